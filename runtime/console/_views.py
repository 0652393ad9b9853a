"""What the console shows, worked out from a session's records: pure functions, no I/O.

Every figure here is a fold over the log (the source of truth), so the console, ``stowage
show`` and the log agree by construction. Text stays text: templates escape it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stowage.core import (
    AssistantMessage,
    CompactionRecord,
    CompactionSummary,
    CorruptLogError,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    MicrocompactRecord,
    MilestoneRecord,
    ProtectedRecord,
    ProtectedState,
    ProtectedStateViolation,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SessionState,
    SystemMessage,
    TurnRecord,
    UserMessage,
    describe_manifest,
    effective_records,
    render,
)
from stowage.facade import TokenFigure, recorded_budget, token_figures
from stowage.policy import token_status

__all__ = [
    "ChartPoint",
    "CompactionCard",
    "CompactionTone",
    "Milestone",
    "PendingCall",
    "ProtectedRow",
    "SessionRow",
    "SessionView",
    "TimelineEntry",
    "session_row",
    "session_view",
]

_MARK_NAMES = ("soft_mark", "compact_mark", "hard_mark")
_DEFAULT_MARKS = {"soft_mark": 0.70, "compact_mark": 0.85, "hard_mark": 0.95}


@dataclass(frozen=True, slots=True, kw_only=True)
class ChartPoint:
    """Tokens in use after one committed round (``estimated`` when no usage went into it)."""

    round: int
    seq: int
    tokens: int
    estimated: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionCard:
    """One compaction or microcompaction, with the figures its record holds."""

    number: int
    seq: int
    ts: str
    kind: str  # full, fallback or micro
    reason: str
    round: int
    turn: int
    tokens_before: int | None
    tokens_after: int | None
    estimated: bool
    removed: int
    retained: int
    covers_through: int | None
    #: tokens in use when it was applied: the figure the chart and ``list`` show for the
    #: session at that moment (the record's ``tokens_before`` is the figure its plan was made
    #: on, which a plan made in the background can be rounds older than)
    in_use: int | None
    #: whether ``in_use`` had no reported usage in it
    in_use_estimated: bool
    #: ``in_use`` as a fraction of usable: where the compaction was applied
    applied_at: float | None
    #: seconds a request was held back for it (when the record says)
    waited: float | None
    summary: str
    protected: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelineEntry:
    """One line of the timeline: an item, a round's end, a turn mark or a compaction."""

    seq: int
    ts: str
    kind: str
    round: int | None
    title: str
    text: str
    stubbed: bool = False
    error: bool = False
    interrupted: bool = False
    cached: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedRow:
    """A protected entry with the id it is kept under and who set it."""

    id: str
    kind: str
    text: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRow:
    """One line of the sessions page."""

    session_id: str
    state: str
    holder: str
    model: str
    turns: int
    rounds: int
    #: tokens of history in the next request; the tool schemas are outside usable and not in it
    tokens: int | None
    usable: int | None
    percent: float | None
    compactions: int
    microcompactions: int
    last_activity: str
    last_seq: int
    #: tokens of the tool schemas every request carries, outside ``usable`` (0 when unknown)
    tool_schemas: int = 0
    #: calls that wait for a person's approval, in call order
    pending: tuple[PendingCall, ...] = ()
    #: what the last error record said, when the session failed
    failure: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingCall:
    """A call that waits for approval, with what a person needs to decide and the commands
    that decide it."""

    call_id: str
    tool: str
    arguments: str
    approve: str
    deny: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Milestone:
    """A phase that ended, after ``round`` committed rounds: the chart marks it."""

    round: int
    name: str
    seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionTone:
    """What the Compactions tile's colour says: where the newest full compaction was applied.

    ``none``: no compaction yet; ``ahead``: below the compact mark (done ahead of pressure,
    between turns or at the soft mark); ``at-mark``: between the compact and the hard mark,
    as planned; ``forced``: at or past the hard mark, where a round had to wait for it.
    """

    tone: str
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionView:
    """Everything the session page shows."""

    row: SessionRow
    timeline: tuple[TimelineEntry, ...]
    chart: tuple[ChartPoint, ...]
    marks: dict[str, float]
    cards: tuple[CompactionCard, ...]
    protected: tuple[ProtectedRow, ...]
    cached_input: int | None
    errors: tuple[str, ...] = field(default=())
    tone: CompactionTone = field(default_factory=lambda: CompactionTone(tone="none", note=""))
    milestones: tuple[Milestone, ...] = ()


def _marks(meta: SessionRecord | None) -> dict[str, float]:
    settings = meta.settings if meta else {}
    marks = dict(_DEFAULT_MARKS)
    for name in _MARK_NAMES:
        value = settings.get(name)
        if isinstance(value, int | float):
            marks[name] = float(value)
    return marks


def _cached(record: RoundCommittedRecord) -> int | None:
    """Input tokens served from the provider's prompt cache, when it said (0 is "not said")."""
    usage = record.usage
    return usage.cached_tokens if usage is not None and usage.cached_tokens > 0 else None


def _state(records: Sequence[Record], folded: SessionState, holder: str) -> str:
    last = records[-1] if records else None
    if isinstance(last, ErrorRecord):
        return "failed"
    if folded.awaiting_approval:
        # before "leased": a chat waiting for y/n holds the lease, and a person is what it needs
        return "approval"
    if holder:
        return "leased"
    return "open" if folded.turn_open else "idle"


_ARGUMENTS_SHOWN = 160


def _pending(session_id: str, folded: SessionState) -> tuple[PendingCall, ...]:
    def short(text: str) -> str:
        return text if len(text) <= _ARGUMENTS_SHOWN else text[: _ARGUMENTS_SHOWN - 1] + "\u2026"

    return tuple(
        PendingCall(
            call_id=call.call_id,
            tool=call.name,
            arguments=short(call.arguments),
            approve=f"stowage approve {session_id} {call.call_id}",
            deny=f"stowage deny {session_id} {call.call_id}",
        )
        for call in folded.awaiting_approval
    )


def _tone(cards: Sequence[CompactionCard], marks: dict[str, float]) -> CompactionTone:
    full = [c for c in cards if c.kind != "micro"]
    if not full:
        return CompactionTone(tone="none", note="no compaction yet")
    newest = full[-1]
    if newest.applied_at is None:
        return CompactionTone(tone="at-mark", note="newest: usable not recorded")
    where = f"newest at {newest.applied_at:.0%} of usable"
    if newest.applied_at >= marks["hard_mark"]:
        return CompactionTone(
            tone="forced",
            note=f"{where}: at the hard mark ({marks['hard_mark']:.0%}), a round waited",
        )
    if newest.applied_at >= marks["compact_mark"]:
        return CompactionTone(
            tone="at-mark", note=f"{where}: at the compact mark ({marks['compact_mark']:.0%})"
        )
    return CompactionTone(tone="ahead", note=f"{where}: ahead of the compact mark")


def _budget(records: Sequence[Record], *, has_stubs: bool) -> tuple[int | None, int]:
    """The usable budget (None when the log cannot say) and the tool schema tokens outside
    it (0 when unknown)."""
    try:
        recorded = recorded_budget(records, has_stubs=has_stubs)
    except Exception:  # a log another version wrote, or no session record first
        return None, 0
    return recorded.usable, recorded.budget.tool_tokens if recorded.budget is not None else 0


def _tokens(folded: SessionState, tool_tokens: int) -> int | None:
    """Tokens of history in the next request: the provider's reported count less the tool
    schemas it included (they are outside usable), never below what the characters imply."""
    protected = _protected_chars(folded)
    return token_status(folded, tool_tokens=tool_tokens, extra_chars=protected).tokens


def _protected_chars(folded: SessionState) -> int:
    try:
        return len(render(folded.protected))
    except CorruptLogError:  # protected ops that do not apply: the page lists the error
        return 0


def _fold(session_id: str, records: Sequence[Record]) -> tuple[SessionState, list[str]]:
    """The state after every record that applies; a record that cannot is reported, not fatal
    (the console shows a damaged log rather than failing the page)."""
    folded = SessionState(session_id=session_id)
    problems: list[str] = []
    for record in records:
        try:
            folded.apply(record)
        except CorruptLogError as exc:
            problems.append(f"#{record.seq}: {exc}")
    return folded, problems


def session_row(session_id: str, records: Sequence[Record], *, holder: str = "") -> SessionRow:
    """The sessions-page line of one log. Raises nothing."""
    records = effective_records(records)  # a rewind's discarded branch is not the session's
    folded, _ = _fold(session_id, records)
    return _row(session_id, records, folded, holder)


def _row(
    session_id: str, records: Sequence[Record], folded: SessionState, holder: str
) -> SessionRow:
    usable, tool_tokens = _budget(records, has_stubs=bool(folded.stubbed))
    tokens = _tokens(folded, tool_tokens)
    last = records[-1] if records else None
    return SessionRow(
        session_id=session_id,
        state=_state(records, folded, holder),
        holder=holder,
        model=folded.meta.model if folded.meta else "?",
        turns=folded.turn,
        rounds=folded.round,
        tokens=tokens,
        usable=usable,
        percent=(100.0 * tokens / usable) if tokens is not None and usable else None,
        compactions=folded.compactions,
        microcompactions=folded.microcompactions,
        last_activity=records[-1].ts if records else "",
        last_seq=records[-1].seq if records else 0,
        tool_schemas=tool_tokens,
        pending=_pending(session_id, folded),
        failure=last.message if isinstance(last, ErrorRecord) else "",
    )


def _snapshot_text(snapshot: dict[str, Any] | None) -> str:
    return json.dumps(snapshot, indent=2, sort_keys=True) if snapshot else "(none)"


def _item_entry(record: ItemRecord, stubbed: set[int], names: dict[str, str]) -> TimelineEntry:
    item = record.item

    def entry(kind: str, title: str, text: str, *, error: bool = False) -> TimelineEntry:
        return TimelineEntry(
            seq=record.seq,
            ts=record.ts,
            round=record.round,
            kind=kind,
            title=title,
            text=text,
            stubbed=record.seq in stubbed,
            error=error,
            interrupted=kind == "output" and error and text.startswith("interrupted:"),
        )

    match item:
        case SystemMessage(text=text):
            return entry("system", "system", text)
        case UserMessage(text=text, pinned=pinned):
            return entry("user", "user (pinned)" if pinned else "user", text)
        case AssistantMessage(text=text):
            return entry("assistant", "assistant", text)
        case FunctionCall(call_id=call_id, name=name, arguments=arguments):
            names[call_id] = name
            return entry("call", f"call {name} [{call_id}]", arguments)
        case FunctionCallOutput(call_id=call_id, output=output, is_error=is_error):
            title = f"output of {names.get(call_id, '?')} [{call_id}]"
            return entry("output", title, output, error=is_error)
        case CompactionSummary(text=text):
            return entry("summary", "summary", text)
    return entry("item", type(item).__name__, repr(item))


def _protected_rows(records: Sequence[Record], final: ProtectedState) -> tuple[ProtectedRow, ...]:
    """Who set each entry: the source of the record that first brought its id in."""
    setter: dict[str, str] = {}
    state = ProtectedState()
    for record in records:
        if isinstance(record, ProtectedRecord):
            for op in record.ops:
                try:
                    state = state.apply(op)
                except ProtectedStateViolation:
                    continue
                for entry in state.entries:
                    setter.setdefault(entry.id, record.source)
        elif isinstance(record, CompactionRecord) and record.protected is not None:
            try:
                state = ProtectedState.from_snapshot(record.protected)
            except Exception:  # an unreadable snapshot: keep what was known
                continue
            for entry in state.entries:
                setter.setdefault(entry.id, f"summarizer (compaction #{record.seq})")
    return tuple(
        ProtectedRow(
            id=entry.id, kind=entry.kind, text=entry.line, source=setter.get(entry.id, "?")
        )
        for entry in final.entries
    )


def session_view(session_id: str, records: Sequence[Record], *, holder: str = "") -> SessionView:
    """The session page of one log: timeline, chart, compaction cards, protected state.
    Raises nothing: records that do not fold are listed in ``errors``."""
    records = effective_records(records)  # a rewind's discarded branch is not the session's
    stubbed: set[int] = set()
    for record in records:
        if isinstance(record, MicrocompactRecord):
            stubbed.update(record.stubbed)
    folded = SessionState(session_id=session_id)
    problems: list[str] = []
    names: dict[str, str] = {}
    timeline: list[TimelineEntry] = []
    chart: list[ChartPoint] = []
    cards: list[CompactionCard] = []
    milestones: list[Milestone] = []
    cached_total: int | None = None
    in_use_at = token_figures(session_id, records)
    for record in records:
        try:
            folded.apply(record)
        except CorruptLogError as exc:
            problems.append(f"#{record.seq}: {exc}")
            continue
        match record:
            case ItemRecord():
                timeline.append(_item_entry(record, stubbed, names))
            case RoundCommittedRecord(round=round_, usage=usage):
                after = in_use_at.get(record.seq)
                if after is not None:
                    chart.append(
                        ChartPoint(
                            round=round_,
                            seq=record.seq,
                            tokens=after.tokens,
                            estimated=after.estimated,
                        )
                    )
                cached = _cached(record)
                if cached is not None:
                    cached_total = (cached_total or 0) + cached
                figures = (
                    f"input {usage.input_tokens}, output {usage.output_tokens}, total {usage.total_tokens}"
                    if usage
                    else "no usage reported"
                )
                if cached is not None:
                    figures += f", cached input {cached}"
                if record.manifest is not None:
                    figures += "\n" + describe_manifest(record.manifest)
                timeline.append(
                    TimelineEntry(
                        seq=record.seq,
                        ts=record.ts,
                        kind="round",
                        round=round_,
                        title=f"round {round_} committed",
                        text=figures,
                        interrupted=record.interrupted,
                        cached=cached,
                    )
                )
            case TurnRecord(turn=turn, phase=phase):
                timeline.append(
                    TimelineEntry(
                        seq=record.seq,
                        ts=record.ts,
                        kind="turn",
                        round=None,
                        title=f"turn {turn} {phase}",
                        text="",
                    )
                )
            case CompactionRecord() | MicrocompactRecord():
                micro = isinstance(record, MicrocompactRecord)
                number = 1 + sum((c.kind == "micro") == micro for c in cards)
                card = _card(record, number, folded, in_use_at.get(record.seq))
                cards.append(card)
                timeline.append(
                    TimelineEntry(
                        seq=record.seq,
                        ts=record.ts,
                        kind="compaction" if card.kind != "micro" else "micro",
                        round=card.round,
                        title=f"{'compaction' if card.kind != 'micro' else 'microcompaction'} "
                        f"#{card.number} ({card.kind})",
                        text=card.reason,
                    )
                )
            case ProtectedRecord(ops=ops, source=source):
                timeline.append(
                    TimelineEntry(
                        seq=record.seq,
                        ts=record.ts,
                        kind="protected",
                        round=None,
                        title=f"protected state ({source})",
                        text="\n".join(json.dumps(op, sort_keys=True) for op in ops),
                    )
                )
            case MilestoneRecord(name=name, note=note, source=source):
                milestones.append(Milestone(round=folded.round, name=name, seq=record.seq))
                timeline.append(
                    TimelineEntry(
                        seq=record.seq,
                        ts=record.ts,
                        kind="milestone",
                        round=None,
                        title=f"milestone: {name} (said by the {source})",
                        text=note or "",
                    )
                )
            case ErrorRecord(kind=kind, message=message):
                timeline.append(
                    TimelineEntry(
                        seq=record.seq,
                        ts=record.ts,
                        kind="error",
                        round=None,
                        title=f"error: {kind}",
                        text=message,
                        error=True,
                    )
                )
    try:
        final = folded.protected
        protected = _protected_rows(records, final)
    except CorruptLogError as exc:
        problems.append(str(exc))
        protected = ()
    marks = _marks(folded.meta)
    return SessionView(
        row=_row(session_id, records, folded, holder),
        timeline=tuple(timeline),
        chart=tuple(chart),
        marks=marks,
        cards=tuple(cards),
        protected=protected,
        cached_input=cached_total,
        errors=tuple(problems),
        tone=_tone(cards, marks),
        milestones=tuple(milestones),
    )


def _card(
    record: CompactionRecord | MicrocompactRecord,
    number: int,
    folded: SessionState,
    in_use: TokenFigure | None,
) -> CompactionCard:
    tokens = in_use.tokens if in_use is not None else record.tokens_before
    applied = in_use.share if in_use is not None else None
    in_use_estimated = in_use.estimated if in_use is not None else record.estimated
    if isinstance(record, MicrocompactRecord):
        return CompactionCard(
            number=number,
            seq=record.seq,
            ts=record.ts,
            kind="micro",
            reason=record.reason,
            round=folded.round,
            turn=folded.turn,
            tokens_before=record.tokens_before,
            tokens_after=record.tokens_after,
            estimated=record.estimated,
            removed=len(record.stubbed),
            retained=0,
            covers_through=None,
            in_use=tokens,
            in_use_estimated=in_use_estimated,
            applied_at=applied,
            waited=None,
            summary="",
            protected="",
        )
    return CompactionCard(
        number=number,
        seq=record.seq,
        ts=record.ts,
        kind=record.kind,
        reason=record.reason,
        round=record.round,
        turn=record.turn,
        tokens_before=record.tokens_before,
        tokens_after=record.tokens_after,
        estimated=record.estimated,
        removed=record.removed,
        retained=len(record.retained),
        covers_through=record.covers_through,
        in_use=tokens,
        in_use_estimated=in_use_estimated,
        applied_at=applied,
        waited=record.waited,
        summary=record.summary,
        protected=_snapshot_text(record.protected),
    )
