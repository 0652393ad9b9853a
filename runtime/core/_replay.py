"""Replay: the one fold from log records to session state.

The live sampler never edits history by hand: every record it writes goes through
``SessionState.apply`` as well, exactly as replay does on resume. Live history and replayed
history are therefore the same function of the same records (design invariant 4), and tests
check it anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from ._errors import CorruptLogError, ProtectedStateViolation
from ._history import compose_history
from ._items import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
)
from ._ledger import TurnLedger
from ._lineage import effective_records
from ._protected import ProtectedState
from ._records import (
    ApprovalRecord,
    CompactionRecord,
    ErrorRecord,
    ForkedFromRecord,
    ItemRecord,
    MicrocompactRecord,
    MilestoneRecord,
    ProgressRecord,
    ProtectedRecord,
    Record,
    RewindRecord,
    RoundCommittedRecord,
    SessionRecord,
    SettingsChangedRecord,
    TurnRecord,
    Usage,
)
from ._sizes import entry_chars, history_chars, item_chars

__all__ = ["SessionState", "replay"]

# the weight, in tokens, a compaction record's carried ratio has against new reports
_CALIBRATION_CARRY = 1000
# what of an open call's progress is kept: its first and last characters
_PARTIAL_KEEP = 4000


# the settings most sessions of a process were opened with are the same: a live session's
# state points at one dict for them all, not a copy of its own (a bounded table of them)
_SHARED_SETTINGS: dict[bytes, dict[str, Any]] = {}
_SHARED_SETTINGS_MAX = 64


def _shared_settings(record: SessionRecord) -> SessionRecord:
    """``record`` with its settings the table's equal dict (added when new), or as it is."""
    try:
        key = orjson.dumps(record.settings, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not a JSON value: kept as it is
        return record
    shared = _SHARED_SETTINGS.get(key)
    if shared is None:
        if len(_SHARED_SETTINGS) >= _SHARED_SETTINGS_MAX:
            del _SHARED_SETTINGS[next(iter(_SHARED_SETTINGS))]
        _SHARED_SETTINGS[key] = record.settings
        return record
    if shared is record.settings or shared != record.settings:  # a tuple is not its list
        return record
    return replace(record, settings=shared)


def _head_and_tail(text: str) -> str:
    """``text``, or its head and tail when it is longer than twice ``_PARTIAL_KEEP``."""
    if len(text) <= 2 * _PARTIAL_KEEP:
        return text
    cut = len(text) - 2 * _PARTIAL_KEEP
    return f"{text[:_PARTIAL_KEEP]}\n[... {cut} characters ...]\n{text[-_PARTIAL_KEEP:]}"


@dataclass(eq=False, slots=True)  # one per live session: no per-instance dict
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
    #: approvals of the open round's calls: call id -> requested, approved or denied
    approvals: dict[str, str] = field(default_factory=dict)
    #: the reasons given with denials, by call id
    denial_reasons: dict[str, str] = field(default_factory=dict)
    #: what each call awaiting approval will do (``ApprovalRecord.detail``), by call id
    approval_details: dict[str, str] = field(default_factory=dict)
    #: what open calls printed so far (``progress`` records), head and tail kept, by call id
    partial: dict[str, str] = field(default_factory=dict)
    stubbed: set[int] = field(default_factory=set)
    protected_ops: list[dict[str, Any]] = field(default_factory=list)
    protected_snapshot: dict[str, Any] | None = None
    #: ``protected`` worked out from the snapshot and the ops; None when they changed since
    _protected_cache: ProtectedState | None = field(default=None, repr=False)
    last_compaction_seq: int = 0
    #: the probes the newest compaction's summary was checked against, carried to the next
    probes: tuple[str, ...] = ()
    #: reported usage of the first round committed after the newest compaction: the base a
    #: threshold compaction must grow from before another one can free anything
    usage_after_compaction: int | None = None
    _awaiting_usage_base: bool = field(default=False, repr=False)
    compactions: int = 0
    microcompactions: int = 0
    #: ``covers_through`` of the newest re-grounded compaction (0: none seen), and the full
    #: compactions since it (both as far as the records applied go: a resumed tail starts at
    #: the newest compaction)
    reground_base: int = 0
    fulls_since_reground: int = 0
    #: milestones applied, the newest of them, and turns finished since the newest compaction
    milestones: int = 0
    last_milestone: MilestoneRecord | None = None
    turns_since_compaction: int = 0
    #: token accounting (``runtime._tokens``): characters of history as projected (stubs
    #: counted as stubs), the last seq the reported usage covers, characters microcompaction
    #: took out of that covered part since, and the calibration sums of reported rounds
    projected_chars: int = 0
    usage_covers_seq: int = 0
    usage_discount_chars: int = 0
    calib_chars: int = 0
    calib_tokens: int = 0
    calib_rounds: int = 0
    _sampled_round: int | None = None
    _sampled_last_seq: int = 0
    _request_chars: int = 0
    #: what the open turn called and what its compactions absorbed (the loop detector's
    #: input); None outside a turn, so a parked session keeps none
    ledger: TurnLedger | None = None

    @property
    def awaiting_approval(self) -> tuple[FunctionCall, ...]:
        """The open round's calls still waiting for a person's approval, in call order."""
        return tuple(
            call for cid, call in self.open_calls.items() if self.approvals.get(cid) == "requested"
        )

    @property
    def items(self) -> tuple[Item, ...]:
        """History items, without seqs."""
        return tuple(entry.item for entry in self.history)

    def apply(self, record: Record) -> None:
        """Fold one record in. Raises ``CorruptLogError`` when the records contradict each
        other (seq not increasing, an output for an unknown call, a commit with open calls)."""
        if record.seq <= self.last_seq:
            raise self._corrupt(record, f"seq {record.seq} after {self.last_seq}")
        if isinstance(record, RewindRecord) and self.last_seq > record.to_seq:
            # a live state cannot give records back: a rewind is folded only after the
            # branch it discards was left out (``replay`` does it, see ``core._lineage``)
            raise self._corrupt(
                record, f"rewind to seq {record.to_seq} folded after seq {self.last_seq}"
            )
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
                self.approvals = {}
                self.denial_reasons = {}
                self.approval_details = {}
                self.round_usage = record.usage
                if record.usage is not None:
                    self.last_usage = record.usage
                    self.usage_seq = record.seq
                    self._calibrate(record, record.usage)
                    if self._awaiting_usage_base:
                        self.usage_after_compaction = record.usage.total_tokens
                        self._awaiting_usage_base = False
            case CompactionRecord():
                summary = HistoryEntry(
                    seq=record.seq,
                    item=CompactionSummary(text=record.summary, provider=record.provider_item),
                )
                tail = [e for e in self.history if e.seq > record.covers_through]
                self.history = list(compose_history(record.retained, summary, tail))
                self.stubbed = {s for s in self.stubbed if s > record.covers_through}
                self.round = max(self.round, record.round)
                self.turn = max(self.turn, record.turn)
                # usage reported before the compaction describes a history that is gone
                self.last_usage = None
                self.round_usage = None
                self.usage_seq = record.seq
                self._reset_accounting(record)
                if record.protected is not None:
                    self.protected_snapshot = record.protected
                    self.protected_ops = []
                    self._protected_cache = None
                self.last_compaction_seq = record.seq
                if record.check is not None:
                    self.probes = record.check.probes
                if record.turn_open and not self.turn_open:
                    # replayed from this record on (a resume): the turn's "started" record is
                    # before it, so the record says the turn is open; its ledger starts here
                    self.turn_open = True
                    self.ledger = TurnLedger()
                if self.ledger is not None:
                    self.ledger.compacted(record.covers_through, {e.seq for e in record.retained})
                self.usage_after_compaction = None
                self._awaiting_usage_base = True
                self.compactions += 1
                self.turns_since_compaction = 0
                if record.regrounded:
                    self.reground_base = record.covers_through
                    self.fulls_since_reground = 0
                elif record.kind == "full":
                    self.fulls_since_reground += 1
            case MicrocompactRecord():
                self._stub(record.stubbed)
                self.microcompactions += 1
            case ProtectedRecord():
                self.protected_ops.extend(record.ops)
                self._protected_cache = None
            case TurnRecord():
                if record.phase != "started" and self.turn_open:
                    self.turns_since_compaction += 1
                self.turn = max(self.turn, record.turn)
                self.turn_open = record.phase == "started"
                self.ledger = TurnLedger() if self.turn_open else None
            case SessionRecord():
                self.meta = _shared_settings(record)
            case ErrorRecord():
                pass
            case MilestoneRecord():
                self.milestones += 1
                self.last_milestone = record
            case SettingsChangedRecord():
                pass  # identity, not history: see ``core._identity``
            case ForkedFromRecord() | RewindRecord():
                pass  # where the history came from: see ``core._lineage``
            case ProgressRecord():
                if record.call_id in self.open_calls:
                    so_far = self.partial.get(record.call_id, "") + record.text
                    self.partial[record.call_id] = _head_and_tail(so_far)
            case ApprovalRecord():
                if record.call_id not in self.open_calls:
                    raise self._corrupt(record, f"approval for {record.call_id}, not an open call")
                self.approvals[record.call_id] = record.decision
                if record.detail:
                    self.approval_details[record.call_id] = record.detail
                if record.decision == "denied":
                    self.denial_reasons[record.call_id] = record.reason or ""

    def _calibrate(self, record: RoundCommittedRecord, usage: Usage) -> None:
        if self._sampled_round != record.round:
            # nothing of this round reached history (an empty answer): the usage covers it all
            self.usage_covers_seq = record.seq
        else:
            self.usage_covers_seq = self._sampled_last_seq
            self.calib_chars += self._request_chars
            self.calib_tokens += usage.input_tokens
            self.calib_rounds += 1
        self.usage_discount_chars = 0

    def _reset_accounting(self, record: CompactionRecord) -> None:
        self.projected_chars = history_chars(self.history, self.stubbed)
        self.usage_covers_seq = record.seq
        self.usage_discount_chars = 0
        self._sampled_round = None
        # resume starts at this record, so the calibration restarts from what it carries
        ratio = record.chars_per_token
        self.calib_rounds = 0
        self.calib_tokens = _CALIBRATION_CARRY if ratio else 0
        self.calib_chars = round(ratio * _CALIBRATION_CARRY) if ratio else 0

    def _stub(self, seqs: Iterable[int]) -> None:
        fresh = set(seqs) - self.stubbed
        for entry in self.history:
            if entry.seq in fresh:
                saved = entry_chars(entry) - entry_chars(entry, fresh)
                self.projected_chars -= saved
                if self.last_usage is not None and entry.seq <= self.usage_covers_seq:
                    self.usage_discount_chars += saved
        self.stubbed.update(fresh)
        if self.ledger is not None:
            self.ledger.stubbed(fresh)

    def _apply_item(self, record: ItemRecord, item: Item) -> None:
        if record.round is not None and isinstance(item, AssistantMessage | FunctionCall):
            if self._sampled_round != record.round:
                # the history this round's request was built from, for the calibration
                self._sampled_round = record.round
                self._request_chars = self.projected_chars
            self._sampled_last_seq = record.seq
        self.projected_chars += item_chars(item)
        if isinstance(item, FunctionCall):
            self.open_calls[item.call_id] = item
            self.open_round = record.round
            if self.ledger is not None:
                self.ledger.call(item, record.seq)
        elif isinstance(item, FunctionCallOutput):
            if self.partial:
                self.partial.pop(item.call_id, None)
            if self.open_calls.pop(item.call_id, None) is None:
                raise self._corrupt(record, f"output for unknown call {item.call_id!r}")
            if self.ledger is not None:
                self.ledger.output(item, record.seq)
        self.history.append(HistoryEntry(seq=record.seq, item=item))

    @property
    def protected(self) -> ProtectedState:
        """The protected state: the newest compaction's snapshot with the ops logged since.

        Worked out when asked, not per record: a resume tail starts before the compaction
        record and holds ``protected`` records whose base is only in that record's snapshot;
        the snapshot supersedes them, so they must never be applied to anything else.
        Raises ``CorruptLogError`` when the ops cannot apply to the snapshot.
        """
        if self._protected_cache is None:
            try:
                base = (
                    ProtectedState.from_snapshot(self.protected_snapshot)
                    if self.protected_snapshot is not None
                    else ProtectedState()
                )
                self._protected_cache = base.apply_all(self.protected_ops)
            except ProtectedStateViolation as exc:
                raise CorruptLogError(
                    f"protected state: {exc}", path=self.session_id, line=self.last_seq
                ) from exc
        return self._protected_cache

    def _corrupt(self, record: Record, message: str) -> CorruptLogError:
        return CorruptLogError(message, path=self.session_id, line=record.seq)


def replay(session_id: str, records: Iterable[Record]) -> SessionState:
    """Fold ``records`` (a whole log, or the session record plus a tail from a compaction)
    into a fresh state, leaving out the branches rewinds discarded. Raises
    ``CorruptLogError`` as ``SessionState.apply`` does."""
    state = SessionState(session_id=session_id)
    for record in effective_records(records):
        state.apply(record)
    state.protected  # noqa: B018  # worked out now, so a bad protected op fails the replay
    return state
