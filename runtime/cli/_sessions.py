"""``stowage list`` and ``context``: what the store holds, read without a lease.

Everything here only reads (``read(..., repair=False)``): it creates, locks and changes
nothing, so it can run next to a live writer. The figures come from the same pure functions
the runtime decides with (replay, token status, budget, watermarks), so ``context`` shows
what the next request would carry and what the policy would do about it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    LeaseHolder,
    LogStore,
    Record,
    RoundCommittedRecord,
    SessionNotFound,
    SessionState,
    SystemMessage,
    UserMessage,
    build_projection,
    identity_from_records,
    item_chars,
    lineage_store,
    render,
    render_touched,
    replay,
    validate_session_id,
)
from stowage.facade import SessionFigures, recorded_budget, session_figures
from stowage.policy import Watermarks, calibrated_ratio, decide

from ._agents import split_agents
from ._store_args import reader_store, store_spec

if TYPE_CHECKING:
    from stowage.policy import PriceBook

__all__ = [
    "SessionSummary",
    "TurnFigures",
    "context_main",
    "last_active_session",
    "list_main",
    "read_records",
    "read_turn_figures",
    "recent_sessions",
    "summarize",
    "turn_figures",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSummary:
    """One row of ``stowage list``. Its figures are ``facade.session_figures``'s, as those of
    the console's sessions page (``console.SessionRow``)."""

    id: str
    model: str
    created: str
    last_activity: str
    turns: int
    #: tokens of history in the next request (tool schemas are outside usable and not in it)
    tokens: int | None
    usable: int | None
    percent_of_usable: float | None
    compactions: int
    #: idle, open (a turn started and never finished), leased (a live writer holds it), failed
    state: str
    #: who holds the writer lease when ``state`` is leased: "pid N on HOST"
    holder: str | None = None
    #: tokens of the tool schemas every request carries, outside ``usable`` (0 when unknown)
    tool_schemas: int = 0
    #: US dollars its requests cost, an exact decimal (None: unknown, or not asked)
    usd: str | None = None


def _state_word(state: SessionState, records: Sequence[Record], holder: LeaseHolder | None) -> str:
    last = records[-1] if records else None
    if holder is not None:
        return "leased"  # a live process writes it now (running a turn, or idle and open)
    if isinstance(last, ErrorRecord):
        return "failed"
    if state.turn_open or state.open_calls:
        return "open"  # a turn started and never finished: running now, or stopped mid-turn
    return "idle"


def _figures_now(state: SessionState, records: Sequence[Record]) -> SessionFigures:
    """How full the next request of ``state`` (folded from ``records``) is. Raises
    ``CorruptLogError`` when ``records`` does not start with a session record."""
    return session_figures(state, recorded_budget(records, has_stubs=bool(state.stubbed)))


def _rounded(percent: float | None) -> float | None:
    return None if percent is None else round(percent, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnFigures:
    """How full a session is after a turn, as ``stowage context`` and ``list`` say it: the
    chat's footer and the ``turn_ended`` line of ``--json``."""

    #: tokens of history in the next request (tool schemas are outside usable and not in it)
    tokens: int | None
    usable: int | None
    percent_of_usable: float | None
    estimated: bool
    compactions: int
    #: the share of the last request's input the provider served from its cache (None: no
    #: usage reported)
    cached_share: float | None


def turn_figures(session_id: str, records: Sequence[Record]) -> TurnFigures:
    """The figures of a session from its full log (the same fold and functions as
    ``context``). Raises ``CorruptLogError``."""
    state = replay(session_id, records)
    figures = _figures_now(state, records)
    usage = next(
        (r.usage for r in reversed(records) if isinstance(r, RoundCommittedRecord) and r.usage),
        None,
    )
    cached = usage.cached_tokens / usage.input_tokens if usage and usage.input_tokens else None
    return TurnFigures(
        tokens=figures.tokens,
        usable=figures.usable,
        percent_of_usable=_rounded(figures.percent_of_usable),
        estimated=figures.status.estimated,
        compactions=state.compactions,
        cached_share=None if usage is None else (cached or 0.0),
    )


async def read_turn_figures(store: LogStore, session_id: str) -> TurnFigures | None:
    """``turn_figures`` of the session's log in ``store`` (closed after); None when the log
    cannot be read (the figures are an extra, never the reason a command fails)."""
    try:
        return turn_figures(session_id, await read_records(store, session_id))
    except Exception:
        return None


def summarize(
    session_id: str,
    records: Sequence[Record],
    holder: LeaseHolder | None = None,
    usd: str | None = None,
) -> SessionSummary:
    """The ``list`` row of a session from its full log and its lease ``holder`` (None when
    free), with ``usd``, what it cost, when asked. Raises ``CorruptLogError``."""
    state = replay(session_id, records)
    figures = _figures_now(state, records)
    return SessionSummary(
        id=session_id,
        model=identity_from_records(records).model,
        created=records[0].ts,
        last_activity=records[-1].ts,
        turns=state.turn,
        tokens=figures.tokens,
        usable=figures.usable,
        percent_of_usable=_rounded(figures.percent_of_usable),
        compactions=state.compactions,
        state=_state_word(state, records, holder),
        holder=None if holder is None else f"pid {holder.pid} on {holder.host}",
        tool_schemas=figures.tool_schemas,
        usd=usd,
    )


async def _summaries(
    store: LogStore, prices: PriceBook | None = None
) -> list[SessionSummary | tuple[str, str]]:
    rows: list[SessionSummary | tuple[str, str]] = []
    for session_id in await store.list_sessions():
        try:
            usd = None
            if prices is None:
                records = (await store.read(session_id, repair=False)).records
            else:
                from stowage.policy import session_cost

                from ._cost import exact_usd

                # a fork's parents paid for theirs; a discarded branch's requests were paid
                lineage = await lineage_store(store).lineage(session_id)
                records = tuple(lineage.effective)
                cost = session_cost(lineage.records, prices, own_from=lineage.own_from)
                usd = exact_usd(cost.usd)
            holder = await store.lease_holder(session_id)
            rows.append(summarize(session_id, records, holder, usd))
        except Exception as exc:  # one bad log must not hide the others
            rows.append((session_id, " ".join(str(exc).split())))
    return rows


async def recent_sessions(store: LogStore) -> list[SessionSummary]:
    """The readable sessions of ``store``, the most recently active first (``store`` is
    closed after)."""
    try:
        rows = await _summaries(store)
    finally:
        await store.aclose()
    found = [row for row in rows if isinstance(row, SessionSummary)]
    return sorted(found, key=lambda row: row.last_activity, reverse=True)


async def last_active_session(store: LogStore) -> str:
    """The id of the session with the newest record. Raises ``SessionNotFound`` when the
    store holds none."""
    newest: tuple[str, str] | None = None
    for session_id in await store.list_sessions():
        try:
            records = (await store.read(session_id, repair=False)).records
        except Exception:
            continue
        if records and (newest is None or records[-1].ts > newest[0]):
            newest = (records[-1].ts, session_id)
    if newest is None:
        raise SessionNotFound("no session in this store to resume: start one with 'stowage run'")
    return newest[1]


def _when(ts: str) -> str:
    return ts[:19].replace("T", " ")


async def list_main(args: argparse.Namespace) -> int:
    """Print every session of ``store`` (a table, or JSON lines with ``--json``); with
    ``--cost``, what each cost (``stowage cost``'s prices: the configuration and the price
    table are read only then, so a plain ``list`` stays quick)."""
    store = reader_store(args)
    spec = store_spec(args)
    if spec.startswith(("postgresql://", "postgres://")):  # the driver only for its URL
        from stowage.storage import PostgresStore

        from ._store_admin import refuse_missing

        inner = getattr(store, "inner", store)  # a PostgreSQL schema, as a directory, must exist
        if isinstance(inner, PostgresStore):
            await refuse_missing(inner, spec, "list")
    prices = None
    if args.cost:
        from ._cost import configured_prices

        prices = configured_prices()
    try:
        rows = await _summaries(store, prices)
    finally:
        await store.aclose()
    if args.json:
        for row in rows:
            data = (
                asdict(row) if isinstance(row, SessionSummary) else {"id": row[0], "error": row[1]}
            )
            if not args.cost:
                data.pop("usd", None)  # not asked: null would read as "unknown"
            sys.stdout.write(json.dumps(data) + "\n")
        return 0
    if not rows:
        print("no sessions in this store; start one with: stowage run MESSAGE", file=sys.stderr)
        return 0
    header = f"{'ID':<24} {'MODEL':<18} {'CREATED':<19}  {'LAST ACTIVITY':<19} {'TURNS':>5}  "
    # TOKENS: history against usable; SCHEMAS: the tool schemas, outside usable
    header += f"{'TOKENS':>15} {'SCHEMAS':>8} {'COMPACT':>7}  " + (f"{'COST':>9}  " * args.cost)
    header += "STATE"
    lines = [header]
    for row in rows:
        if isinstance(row, tuple):
            lines.append(f"{row[0]:<24} unreadable: {row[1]}")
            continue
        used = "-" if row.tokens is None else f"{row.tokens:,}"
        if row.percent_of_usable is not None:
            used += f" {row.percent_of_usable:.0f}%"
        state = f"{row.state} ({row.holder})" if row.holder else row.state
        cost = f"{_money(row.usd):>9}  " if args.cost else ""
        lines.append(
            f"{row.id:<24} {row.model[:18]:<18} {_when(row.created):<19}  "
            f"{_when(row.last_activity):<19} {row.turns:>5}  {used:>15} {row.tool_schemas:>8,} "
            f"{row.compactions:>7}  {cost}"
            f"{state}"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _money(usd: str | None) -> str:
    from stowage.policy import money

    return money(None if usd is None else Decimal(usd), unknown="?")


async def read_records(store: LogStore, session_id: str) -> tuple[Record, ...]:
    try:
        return (await store.read(validate_session_id(session_id), repair=False)).records
    finally:
        await store.aclose()


def _category(item: Any, seq: int, state: SessionState, first_system: bool) -> str:
    if isinstance(item, SystemMessage):
        return "system" if first_system else "protected"
    if isinstance(item, CompactionSummary):
        return "summary"
    if isinstance(item, UserMessage):
        return "user"
    if isinstance(item, AssistantMessage | FunctionCall):
        return "assistant"
    if isinstance(item, FunctionCallOutput):
        return "stubs" if seq in state.stubbed else "tool outputs"
    return "other"


_ORDER = (
    "system",
    "protected",
    "files touched",
    "summary",
    "user",
    "assistant",
    "tool outputs",
    "stubs",
)


def context_report(session_id: str, records: Sequence[Record]) -> dict[str, Any]:
    """What fills the next request of a session, by part, and what the policy would do."""
    state = replay(session_id, records)
    recorded = recorded_budget(records, has_stubs=bool(state.stubbed))
    status = session_figures(state, recorded).status
    tool_tokens = status.tool_tokens
    settings, budget = recorded.settings, recorded.budget
    ratio = calibrated_ratio(state, tool_tokens)
    chars = dict.fromkeys(_ORDER, 0)
    projection = build_projection(
        state.history, stubbed=state.stubbed, protected_text=render(state.protected) or None
    )
    # the projection holds the history in order with the protected message inserted after the
    # leading system message: walk both to attribute each projected item to its part
    history = iter(state.history)
    protected_at = 1 if state.history and isinstance(state.history[0].item, SystemMessage) else 0
    for index, item in enumerate(projection):
        if render(state.protected) and index == protected_at:
            trail = len(render_touched(state.protected))
            chars["files touched"] += trail
            chars["protected"] += item_chars(item) - trail
            continue
        entry = next(history)
        part = _category(item, entry.seq, state, first_system=index == 0)
        size = item_chars(item)
        if part == "system" and isinstance(item, SystemMessage):
            # the instructions AGENTS.md gave the session when it was made: a part of its own
            agents = len(split_agents(item.text)[1])
            if agents:
                chars["AGENTS.md"] = agents
                size -= agents
        chars[part] = chars.get(part, 0) + size
    # AGENTS.md, when the session has it, right after the system message it is part of
    order = sorted(chars, key=lambda name: (name != "system", name != "AGENTS.md"))
    parts = {name: math.ceil(chars[name] / ratio) for name in order}
    usable = recorded.usable
    if budget is not None:
        decision = decide(status, budget.usable, Watermarks.from_settings(settings))
        marks = Watermarks.from_settings(settings)
        upcoming = [
            (name, mark) for name, mark in (
                ("microcompact", marks.soft), ("compact", marks.compact), ("block", marks.hard)
            ) if status.tokens is None or status.tokens < mark * budget.usable
        ]  # fmt: skip
        if decision.action != "none":
            next_action = f"{decision.action} now: {decision.reason}"
        elif upcoming:
            name, mark = upcoming[0]
            next_action = (
                f"{name} at {mark:.0%} of usable ({math.ceil(mark * budget.usable):,} tokens)"
            )
        else:
            next_action = decision.reason
    else:
        next_action = (
            f"compact when reported usage reaches {usable or 0:,} tokens (fixed threshold)"
        )
    return {
        "session": session_id,
        "model": settings.model,
        "context_window": budget.context_window if budget is not None else None,
        "output_reserve": budget.output_reserve if budget is not None else None,
        "usable": usable,
        # history only: the tool schemas are outside usable, so they are not in use of it
        "tokens": status.tokens,
        "estimated": status.estimated,
        "reported": status.reported,
        "floored": status.floored,
        "tool_schemas": tool_tokens,
        "parts": {
            **{
                name: {
                    "tokens": tokens,
                    "percent_of_usable": round(100 * tokens / usable, 1) if usable else None,
                    "outside_usable": False,
                }
                for name, tokens in parts.items()
            },
            "tool schemas": {
                "tokens": tool_tokens,
                "percent_of_usable": None,
                "outside_usable": True,
            },
        },
        "next_action": next_action,
        # the trail a compaction carries, and what the calls since the last one touched
        "files_touched": {
            "carried": [t.line for t in state.protected.touched],
            "earlier": state.protected.earlier,
            "since_last_compaction": [t.line for t in state.protected.fresh],
        },
        "tools": {
            "sandbox": settings.sandbox,
            "approval": settings.approval,
            "allow": list(settings.tool_allow),
            "deny": list(settings.tool_deny),
            "network": settings.sandbox_network,
        },
    }


async def context_main(args: argparse.Namespace, store: LogStore | None = None) -> int:
    """Print what fills the window of session ``args.session``."""
    report = context_report(
        args.session, await read_records(store or reader_store(args), args.session)
    )
    if args.json:
        sys.stdout.write(json.dumps(report) + "\n")
        return 0
    usable = report["usable"]
    est = " (estimated)" if report["estimated"] else ""
    lines = [f"session {report['session']}  model {report['model']}"]
    if report["context_window"] is not None:
        lines.append(
            f"window {report['context_window']:,} - output reserve {report['output_reserve']:,} "
            f"- tool schemas {report['parts']['tool schemas']['tokens']:,} = usable {usable:,}"
        )
    tokens = report["tokens"]
    if tokens is not None and usable:
        lines.append(
            f"in use {tokens:,} of {usable:,} tokens{est}: {100 * tokens / usable:.0f}% "
            f"(history; the {report['tool_schemas']:,} tokens of tool schemas are outside usable)"
        )
    if report["reported"] is not None:
        how = (
            "below what its characters imply, so the estimate is used"
            if report["floored"]
            else f"less {report['tool_schemas']:,} of tool schemas, plus what came since"
        )
        lines.append(f"reported {report['reported']:,} tokens for the last round: {how}")
    for name, part in report["parts"].items():
        pct = part["percent_of_usable"]
        if part["outside_usable"]:
            shown = "outside usable"
        else:
            shown = f"{pct:5.1f}%" if pct is not None else "     -"
        lines.append(f"  {name:<14} {part['tokens']:>9,}  {shown}")
    lines.append(f"next: {report['next_action']}")
    lines.extend(_trail_lines(report["files_touched"]))
    lines.append(_tools_line(report["tools"]))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


#: the trail's lines ``context`` prints of each kind; ``--json`` has them all
_TRAIL_SHOWN = 8


def _trail_lines(trail: dict[str, Any]) -> list[str]:
    """The files touched, newest first: what compactions carry, then what comes next."""
    lines: list[str] = []
    for key, title in (
        ("since_last_compaction", "files touched since the last compaction (carried at the next)"),
        ("carried", "files touched, carried through compactions"),
    ):
        shown = trail[key]
        if not shown:
            continue
        more = len(shown) - _TRAIL_SHOWN + (trail["earlier"] if key == "carried" else 0)
        lines.append(f"{title}:")
        lines += [f"  {line}" for line in shown[:_TRAIL_SHOWN]]
        if more > 0:
            lines.append(f"  and {more:,} more")
    return lines


def _tools_line(tools: dict[str, Any]) -> str:
    """What the session's tools may do, as the user said it."""
    sandbox = tools["sandbox"]
    if sandbox == "workspace-write":
        sandbox += " (network)" if tools["network"] else " (no network)"
    rules = "".join(
        f"; {kind} {', '.join(tools[kind])}" for kind in ("allow", "deny") if tools[kind]
    )
    return f"tools: sandbox {sandbox}, approval {tools['approval']}{rules}"
