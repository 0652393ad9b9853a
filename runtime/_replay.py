"""Replay: the one fold from log records to session state.

The live sampler never edits history by hand: every record it writes goes through
``SessionState.apply`` as well, exactly as replay does on resume. Live history and replayed
history are therefore the same function of the same records (design invariant 4), and tests
check it anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ._compaction import compose_history
from ._errors import CorruptLogError
from ._items import CompactionSummary, FunctionCall, FunctionCallOutput, HistoryEntry, Item
from ._records import (
    CompactionRecord,
    ErrorRecord,
    ItemRecord,
    MicrocompactRecord,
    ProtectedRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    TurnRecord,
    Usage,
)

__all__ = ["SessionState", "replay"]


@dataclass(eq=False)
class SessionState:
    """What a session is after the records applied so far. Mutable; owned by one sampler."""

    session_id: str
    meta: SessionRecord | None = None
    history: list[HistoryEntry] = field(default_factory=list)
    last_seq: int = 0
    round: int = 0
    turn: int = 0
    turn_open: bool = False
    #: usage reported by the newest committed round that reported any, and that round's seq
    last_usage: Usage | None = None
    usage_seq: int = 0
    #: usage of the newest committed round exactly as reported (None when it reported none)
    round_usage: Usage | None = None
    #: calls logged in a sampled round that has no ``round_committed`` yet, by call id
    open_calls: dict[str, FunctionCall] = field(default_factory=dict)
    open_round: int | None = None
    stubbed: set[int] = field(default_factory=set)
    protected_ops: list[dict[str, Any]] = field(default_factory=list)
    protected_snapshot: dict[str, Any] | None = None
    last_compaction_seq: int = 0
    compactions: int = 0
    microcompactions: int = 0

    @property
    def items(self) -> tuple[Item, ...]:
        """History items, without seqs."""
        return tuple(entry.item for entry in self.history)

    def apply(self, record: Record) -> None:
        """Fold one record in. Raises ``CorruptLogError`` when the records contradict each
        other (seq not increasing, an output for an unknown call, a commit with open calls)."""
        if record.seq <= self.last_seq:
            raise self._corrupt(record, f"seq {record.seq} after {self.last_seq}")
        self.last_seq = record.seq
        match record:
            case ItemRecord(item=item):
                self._apply_item(record, item)
            case RoundCommittedRecord():
                if self.open_calls:
                    missing = ", ".join(sorted(self.open_calls))
                    raise self._corrupt(record, f"round committed without outputs for {missing}")
                self.round = max(self.round, record.round)
                self.open_round = None
                self.round_usage = record.usage
                if record.usage is not None:
                    self.last_usage = record.usage
                    self.usage_seq = record.seq
            case CompactionRecord():
                summary = HistoryEntry(seq=record.seq, item=CompactionSummary(text=record.summary))
                tail = [e for e in self.history if e.seq > record.covers_through]
                self.history = list(compose_history(record.retained, summary, tail))
                self.stubbed = {s for s in self.stubbed if s > record.covers_through}
                self.round = max(self.round, record.round)
                self.turn = max(self.turn, record.turn)
                # usage reported before the compaction describes a history that is gone
                self.last_usage = None
                self.round_usage = None
                self.usage_seq = record.seq
                if record.protected is not None:
                    self.protected_snapshot = record.protected
                    self.protected_ops = []
                self.last_compaction_seq = record.seq
                self.compactions += 1
            case MicrocompactRecord():
                self.stubbed.update(record.stubbed)
                self.microcompactions += 1
            case ProtectedRecord():
                self.protected_ops.extend(record.ops)
            case TurnRecord():
                self.turn = max(self.turn, record.turn)
                self.turn_open = record.phase == "started"
            case SessionRecord():
                self.meta = record
            case ErrorRecord():
                pass

    def _apply_item(self, record: ItemRecord, item: Item) -> None:
        if isinstance(item, FunctionCall):
            self.open_calls[item.call_id] = item
            self.open_round = record.round
        elif (
            isinstance(item, FunctionCallOutput) and self.open_calls.pop(item.call_id, None) is None
        ):
            raise self._corrupt(record, f"output for unknown call {item.call_id!r}")
        self.history.append(HistoryEntry(seq=record.seq, item=item))

    def _corrupt(self, record: Record, message: str) -> CorruptLogError:
        return CorruptLogError(message, path=self.session_id, line=record.seq)


def replay(session_id: str, records: Iterable[Record]) -> SessionState:
    """Fold ``records`` (a whole log, or the session record plus a tail from a compaction)
    into a fresh state. Raises ``CorruptLogError`` as ``SessionState.apply`` does."""
    state = SessionState(session_id=session_id)
    for record in records:
        state.apply(record)
    return state
