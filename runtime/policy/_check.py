"""``stowage check``: is a log sound, and does resume rebuild what the session had?"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from stowage.core import (
    CompactionRecord,
    CorruptLogError,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    Record,
    SessionRecord,
    SessionState,
    TornTail,
    apply_compaction,
    replay,
)

__all__ = ["CheckReport", "check_log"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckReport:
    """The verdict: ``ok`` when ``problems`` is empty; ``notes`` are facts worth knowing."""

    session_id: str
    records: int
    compactions: int
    history_items: int
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def check_log(
    session_id: str,
    full: Sequence[Record],
    tail: Sequence[Record],
    *,
    torn_tail: TornTail | None = None,
) -> CheckReport:
    """Check a whole log and its resume tail; ``torn_tail`` is what the read found after the
    last complete line, if anything.

    Problems: a log without its session record (empty: no bytes, or only a torn line), or
    not starting with it; records that contradict each other; a compaction whose retained
    entries differ from the logged items at those seqs or from a re-run of the pure policy on
    the prefix; resume-from-tail history differing from whole-log replay. A torn tail is a
    note (a write a crash cut short was never acknowledged), unless it is all the log holds.
    """
    problems: list[str] = []
    notes: list[str] = []
    if torn_tail is not None:
        notes.append(_torn_note(torn_tail))
    if not full or not isinstance(full[0], SessionRecord) or full[0].seq != 1:
        return CheckReport(
            session_id=session_id,
            records=len(full),
            compactions=0,
            history_items=0,
            problems=(_no_session_record(full, torn_tail),),
            notes=tuple(notes),
        )
    try:
        state = replay(session_id, full)
    except CorruptLogError as exc:
        return CheckReport(
            session_id=session_id,
            records=len(full),
            compactions=0,
            history_items=0,
            problems=(f"replay failed: {exc}",),
        )
    items_by_seq = {r.seq: r.item for r in full if isinstance(r, ItemRecord)}
    prefix = SessionState(session_id=session_id)
    for record in full:
        if isinstance(record, CompactionRecord):
            problems.extend(_check_compaction(record, items_by_seq, prefix))
        prefix.apply(record)
    try:
        resumed = replay(session_id, tail)
    except CorruptLogError as exc:
        problems.append(f"resume from the newest compaction failed: {exc}")
    else:
        if resumed.history != state.history:
            problems.append(
                f"resume rebuilds {len(resumed.history)} items but whole-log replay gives "
                f"{len(state.history)}: they differ"
            )
        if resumed.turn_open != state.turn_open:
            problems.append(
                f"resume finds turn {state.turn} {'closed' if state.turn_open else 'open'} but "
                f"whole-log replay finds it {'open' if state.turn_open else 'closed'}"
            )
        if resumed.protected != state.protected:
            problems.append(
                "resume rebuilds a protected state that differs from whole-log replay's"
            )
    problems.extend(_pairing(state))
    waiting = sorted(call.call_id for call in state.awaiting_approval)
    if waiting:
        notes.append(
            f"round {state.open_round} waits for approval of {len(waiting)} call(s) "
            f"({', '.join(waiting)}): 'stowage approve' or 'deny' answers them, then the "
            "round's calls run; a resume leaves them waiting"
        )
    elif state.open_calls:
        notes.append(
            f"round {state.open_round} is open with {len(state.open_calls)} call(s) without "
            "output; "
            "resume will give them 'interrupted' outputs"
        )
    return CheckReport(
        session_id=session_id,
        records=len(full),
        compactions=state.compactions,
        history_items=len(state.history),
        problems=tuple(problems),
        notes=tuple(notes),
    )


def _pairing(state: SessionState) -> list[str]:
    """What a request built from ``state``'s history would carry unpaired."""
    problems: list[str] = []
    calls: set[str] = set()
    answered: set[str] = set()
    for entry in state.history:
        item = entry.item
        if isinstance(item, FunctionCall):
            calls.add(item.call_id)
        elif isinstance(item, FunctionCallOutput):
            if item.call_id not in calls:
                problems.append(
                    f"history holds the output of call {item.call_id!r} (seq {entry.seq}) "
                    "without its call: a provider would refuse the request"
                )
            answered.add(item.call_id)
    for call_id in sorted(calls - answered - set(state.open_calls)):
        problems.append(f"history holds call {call_id!r} without its output")
    return problems


def _check_compaction(
    record: CompactionRecord, items_by_seq: Mapping[int, object], before: SessionState
) -> list[str]:
    problems = []
    for entry in record.retained:
        if items_by_seq.get(entry.seq) != entry.item:
            problems.append(
                f"compaction at seq {record.seq} retains seq {entry.seq}, which the log does not hold as given"
            )
    budget = record.user_budget_chars
    if budget is None:  # logs written before compaction records carried their budget
        budget = before.meta.settings.get("user_budget_chars", 20_000) if before.meta else 20_000
    rerun = apply_compaction(
        before.history,
        summary=record.summary,
        summary_seq=record.seq,
        covers_through=record.covers_through,
        user_budget_chars=int(budget),
        reattach=record.reattached,
    )
    if tuple(e.seq for e in rerun.retained) != tuple(e.seq for e in record.retained):
        problems.append(
            f"compaction at seq {record.seq}: the policy re-run on the prefix retains "
            f"{[e.seq for e in rerun.retained]}, the record says {[e.seq for e in record.retained]}"
        )
    return problems


def _no_session_record(full: Sequence[Record], torn_tail: TornTail | None) -> str:
    if full:
        first = full[0]
        return (
            f"the log starts with a {type(first).__name__} at seq {first.seq}, not the session "
            "record (seq 1): it cannot be resumed"
        )
    if torn_tail is not None:
        return (
            "the log holds no complete record, only a torn line "
            f"({torn_tail.bytes_removed} bytes at {torn_tail.path}:{torn_tail.line}): "
            "the session was never created whole and cannot be resumed"
        )
    return "the log is empty: it holds no session record (seq 1) and cannot be resumed"


def _torn_note(torn: TornTail) -> str:
    done = "was cut off" if torn.removed else "is still in the file"
    return (
        f"a torn last line ({torn.bytes_removed} bytes at {torn.path}:{torn.line}) {done}: "
        "a write a crash cut short, never acknowledged"
    )
