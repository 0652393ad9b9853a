"""The timeline of one page of a session: an entry per item, round end, turn mark, compaction,
protected change, milestone and error, for the records in a seq range only (a page of a
10,000-round session builds its ten rounds' entries, not 40,000). Pure, no I/O.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stowage.core import (
    AssistantMessage,
    CompactionRecord,
    CompactionSummary,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    MicrocompactRecord,
    MilestoneRecord,
    ProtectedRecord,
    Record,
    RoundCommittedRecord,
    SystemMessage,
    TurnRecord,
    UserMessage,
    describe_manifest,
)

from ._cards import CompactionCard

__all__ = ["TimelineEntry", "cached_tokens", "timeline_entries"]


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


def timeline_entries(
    records: Sequence[Record],
    *,
    first: int,
    last: int,
    cards: Mapping[int, CompactionCard],
    stubbed: Collection[int],
    unfolded: Collection[int] = (),
) -> tuple[TimelineEntry, ...]:
    """The entries of the records with ``first <= seq <= last`` (``records`` ascending by seq),
    chronological. Raises nothing."""
    low = bisect_left(records, first, key=lambda r: r.seq)
    high = bisect_right(records, last, key=lambda r: r.seq)
    # an output's tool name is its call's, which may sit before the page
    names = {
        r.item.call_id: r.item.name
        for r in records[:high]
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall)
    }
    entries: list[TimelineEntry] = []
    for record in records[low:high]:
        if record.seq in unfolded:
            continue
        entry = _entry(record, names, cards, stubbed)
        if entry is not None:
            entries.append(entry)
    return tuple(entries)


def _entry(
    record: Record,
    names: Mapping[str, str],
    cards: Mapping[int, CompactionCard],
    stubbed: Collection[int],
) -> TimelineEntry | None:
    match record:
        case ItemRecord():
            return _item_entry(record, stubbed, names)
        case RoundCommittedRecord(round=round_, usage=usage):
            cached = cached_tokens(record)
            figures = (
                f"input {usage.input_tokens}, output {usage.output_tokens}, total {usage.total_tokens}"
                if usage
                else "no usage reported"
            )
            if cached is not None:
                figures += f", cached input {cached}"
            if record.manifest is not None:
                figures += "\n" + describe_manifest(record.manifest)
            title = f"round {round_} committed"
            return _at(
                record,
                "round",
                title,
                figures,
                round=round_,
                interrupted=record.interrupted,
                cached=cached,
            )
        case TurnRecord(turn=turn, phase=phase):
            return _at(record, "turn", f"turn {turn} {phase}")
        case CompactionRecord() | MicrocompactRecord():
            card = cards.get(record.seq)
            if card is None:
                return None
            micro = card.kind == "micro"
            title = f"{'microcompaction' if micro else 'compaction'} #{card.number} ({card.kind})"
            return _at(
                record, "micro" if micro else "compaction", title, card.reason, round=card.round
            )
        case ProtectedRecord(ops=ops, source=source):
            text = "\n".join(json.dumps(op, sort_keys=True) for op in ops)
            return _at(record, "protected", f"protected state ({source})", text)
        case MilestoneRecord(name=name, note=note, source=source):
            return _at(record, "milestone", f"milestone: {name} (said by the {source})", note or "")
        case ErrorRecord(kind=kind, message=message):
            return _at(record, "error", f"error: {kind}", message, error=True)
    return None


def _at(
    record: Record, kind: str, title: str, text: str = "", *, round: int | None = None, **flags: Any
) -> TimelineEntry:
    """The entry of ``record``: its seq and time, with what it shows."""
    return TimelineEntry(
        seq=record.seq, ts=record.ts, kind=kind, round=round, title=title, text=text, **flags
    )


def cached_tokens(record: RoundCommittedRecord) -> int | None:
    """Input tokens served from the provider's prompt cache, when it said (0 is "not said")."""
    usage = record.usage
    return usage.cached_tokens if usage is not None and usage.cached_tokens > 0 else None


def _item_entry(
    record: ItemRecord, stubbed: Collection[int], names: Mapping[str, str]
) -> TimelineEntry:
    item, error = record.item, False
    match item:
        case SystemMessage(text=text):
            kind, title = "system", "system"
        case UserMessage(text=text, pinned=pinned):
            kind, title = "user", "user (pinned)" if pinned else "user"
        case AssistantMessage(text=text):
            kind, title = "assistant", "assistant"
        case FunctionCall(call_id=call_id, name=name, arguments=text):
            kind, title = "call", f"call {name} [{call_id}]"
        case FunctionCallOutput(call_id=call_id, output=text, is_error=error):
            kind, title = "output", f"output of {names.get(call_id, '?')} [{call_id}]"
        case CompactionSummary(text=text):
            kind, title = "summary", "summary"
        case _:
            kind, title, text = "item", type(item).__name__, repr(item)
    interrupted = kind == "output" and error and text.startswith("interrupted:")
    flags = {"stubbed": record.seq in stubbed, "error": error, "interrupted": interrupted}
    return _at(record, kind, title, text, round=record.round, **flags)
