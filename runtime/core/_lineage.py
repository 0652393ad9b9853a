"""Lineage: a session's history may start in another log (a fork) and may leave a branch behind
(a rewind); this module turns such logs back into the one record sequence replay folds.

Two records make a lineage:

- ``ForkedFromRecord`` opens a forked log. The child's history is its parent's as of
  ``through_seq``, read from the parent's log (recursively: a parent may be a fork too) rather
  than copied. Every store numbers a log's lines from 1, so a forked log is renumbered when read:
  its own record ``n`` stands at lineage seq ``through_seq + n``, and every seq its records refer
  to is already a lineage seq (the sampler writes them from a lineage-numbered state).
- ``RewindRecord`` makes a session continue from an earlier round: the records after ``to_seq``
  and before the rewind stay in the log, a discarded branch that every fold skips.

``effective_records`` and ``tail_records`` are pure; ``LineageStore`` is a ``LogStore`` that
reads and writes through them, so the runtime, ``check`` and ``show`` see a fork or a rewound
log exactly as they see a plain one: numbered without gaps in meaning, branches left out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ._errors import ConfigError, CorruptLogError, InvalidSessionId, SessionExists, StoreError
from ._records import (
    CompactionRecord,
    ErrorRecord,
    ForkedFromRecord,
    MicrocompactRecord,
    MilestoneRecord,
    ProtectedRecord,
    Record,
    RewindRecord,
    RoundCommittedRecord,
    TurnRecord,
)
from ._settings import validate_session_id
from ._store import LeaseHolder, LogRead, LogStore, WriterLease

__all__ = [
    "Lineage", "LineageStore", "effective_records", "lineage_store", "round_end", "tail_records",
]  # fmt: skip

# a chain of forks deeper than this is taken for a loop in corrupt logs, not a real lineage
_MAX_DEPTH = 256
# the longest session id (``validate_session_id``): a default fork id keeps its suffix whole
_MAX_ID = 128


def effective_records(records: Iterable[Record]) -> list[Record]:
    """``records`` without the branches their rewinds discarded (each rewind record kept: it
    holds a seq the session has used). Idempotent, so a resolved sequence passes unchanged."""
    kept: list[Record] = []
    for record in records:
        if isinstance(record, RewindRecord):
            while kept and kept[-1].seq > record.to_seq:
                kept.pop()
        kept.append(record)
    return kept


def tail_records(records: Sequence[Record]) -> list[Record]:
    """What resume folds: the first record, then every record after the newest compaction's
    ``covers_through`` (all of them without a compaction), selected by seq, since a lineage
    has gaps where branches were discarded. ``records`` must be effective (see above)."""
    if not records:
        return []
    covers = 1
    for record in reversed(records):
        if isinstance(record, CompactionRecord):
            covers = max(record.covers_through, 1)
            break
    return [records[0], *(r for r in records[1:] if r.seq > covers)]


def _ends_a_round(record: Record) -> bool:
    """Whether ``record`` still belongs to the round committed before it."""
    match record:
        case TurnRecord(phase=phase):
            return phase != "started"
        case CompactionRecord() | MicrocompactRecord() | ErrorRecord() | RewindRecord():
            return True
        case ProtectedRecord(source=source):
            return source == "summarizer"
        case MilestoneRecord(source=source):
            return source == "model"
        case _:
            return False


def round_end(session_id: str, records: Sequence[Record], round_: int | None) -> tuple[int, int]:
    """``(seq, round)``: where committed round ``round_`` ends in effective ``records`` (its
    ``round_committed`` and what its turn and compactions wrote after it), the newest committed
    round when ``round_`` is None.

    Raises ``ConfigError`` naming the session and the rounds it has when there is no such round.
    """
    commits = [(i, r.round) for i, r in enumerate(records) if isinstance(r, RoundCommittedRecord)]
    if not commits:
        raise ConfigError(f"session {session_id} has no committed round yet: nothing to go back to")
    if round_ is None:
        index, found = commits[-1]
    else:
        matches = [(i, r) for i, r in commits if r == round_]
        if not matches:
            raise ConfigError(
                f"session {session_id} has no committed round {round_}: its rounds are "
                f"{commits[0][1]} to {commits[-1][1]}"
            )
        index, found = matches[-1]
    end = index
    while end + 1 < len(records) and _ends_a_round(records[end + 1]):
        end += 1
    return records[end].seq, found


#: how many sessions' offsets a store keeps (an entry is a few dozen bytes)
_OFFSETS_KEPT = 100_000


def _renumbered(records: Iterable[Record], by: int) -> list[Record]:
    return [replace(r, seq=r.seq + by) for r in records] if by else list(records)


@dataclass(frozen=True, slots=True, kw_only=True)
class Lineage:
    """A session's records in lineage seqs: its ancestors' effective prefix, then its own log
    renumbered, discarded branches included (``effective`` leaves them out)."""

    session_id: str
    records: tuple[Record, ...]
    #: the lineage seq of this log's own first record (1 for a log that is no fork)
    own_from: int
    read: LogRead

    @property
    def effective(self) -> list[Record]:
        return effective_records(self.records)

    @property
    def discarded(self) -> frozenset[int]:
        """Seqs of the records a rewind discarded."""
        kept = {r.seq for r in self.effective}
        return frozenset(r.seq for r in self.records if r.seq not in kept)


class LineageStore:
    """A ``LogStore`` that reads forks with their ancestors and rewound logs without their
    discarded branches, and numbers what is written to a fork back into its own log.

    ``read`` gives a session's effective lineage; ``read_tail`` what resume folds (from the
    newest compaction at or before the fork point, when the child has none of its own): the
    same state whole-lineage replay gives. Writes take and give lineage seqs. A plain log with
    no rewind passes through unchanged, at the cost of one check per read.

    A fork's reads read its own log and its ancestors' whole logs: the store protocol has no
    range read, so resume of a fork costs its lineage's length, not only its tail.
    """

    def __init__(self, store: LogStore) -> None:
        self.inner = store
        # the lineage seq before each log's own first record: 0, or a fork's through_seq;
        # fixed when the log is created, so learnt once, and kept for the sessions seen last
        # (a worker meets millions over its life; one it forgot costs one tail read)
        self._offsets: dict[str, int] = {}

    # -- lineage ---------------------------------------------------------------------------

    async def lineage(self, session_id: str, *, repair: bool = False) -> Lineage:
        """The session's lineage. Raises what ``read`` raises, and ``CorruptLogError`` when a
        parent's log is missing or too short for the fork point, or the forks loop."""
        return await self._lineage(validate_session_id(session_id), repair, ())

    async def _lineage(self, session_id: str, repair: bool, children: tuple[str, ...]) -> Lineage:
        if session_id in children or len(children) > _MAX_DEPTH:
            raise CorruptLogError(
                f"its forks lead back to {session_id} or go {_MAX_DEPTH} deep",
                path=children[0],
                line=1,
            )
        own = await self.inner.read(session_id, repair=repair)
        first = own.records[0] if own.records else None
        if not isinstance(first, ForkedFromRecord):
            self._learn(session_id, 0)
            return Lineage(session_id=session_id, records=own.records, own_from=1, read=own)
        offset = first.through_seq
        self._learn(session_id, offset)
        try:
            parent = await self._lineage(first.parent_id, False, (*children, session_id))
        except CorruptLogError:
            raise
        except (StoreError, InvalidSessionId) as exc:  # the parent's log is gone, or unreadable
            raise CorruptLogError(
                f"a fork of {first.parent_id}, whose log cannot be read: {exc}",
                path=session_id,
                line=1,
            ) from exc
        prefix = effective_records(r for r in parent.records if r.seq <= first.through_seq)
        if not prefix or prefix[-1].seq != first.through_seq:
            raise CorruptLogError(
                f"a fork of {first.parent_id} through seq {first.through_seq}, which its "
                "parent's log does not hold",
                path=session_id,
                line=1,
            )
        records = (*prefix, *_renumbered(own.records, offset))
        return Lineage(session_id=session_id, records=records, own_from=offset + 1, read=own)

    async def fork(
        self, parent_id: str, child_id: str | None = None, *, at_round: int | None = None
    ) -> str:
        """Start log ``child_id`` as a fork of ``parent_id`` at the end of round ``at_round``
        (the newest committed round when None) and return its id: ``child_id``, or the first
        free ``<parent>-fork-<n>``. The parent is only read. The child's lease is held by this
        store (implicitly, as after any ``create``) until it is acquired or released.

        Raises ``InvalidSessionId``, ``SessionNotFound`` for a missing parent, ``ConfigError``
        for a round the parent has not committed, ``SessionExists`` for a ``child_id`` in use,
        ``CorruptLogError``.
        """
        if child_id is not None:
            validate_session_id(child_id)
        parent = await self.lineage(parent_id)
        if not parent.records:
            raise ConfigError(f"session {parent_id} has an empty log: nothing to fork")
        through_seq, through_round = round_end(parent_id, parent.effective, at_round)
        record = ForkedFromRecord(
            seq=through_seq + 1,
            parent_id=parent_id,
            through_seq=through_seq,
            through_round=through_round,
        )
        if child_id is not None:
            await self.create(child_id, [record])
            return child_id
        for n in itertools.count(1):
            suffix = f"-fork-{n}"
            candidate = parent_id[: _MAX_ID - len(suffix)] + suffix
            if await self.exists(candidate):
                continue
            try:
                await self.create(candidate, [record])
            except SessionExists:
                continue  # another process took it first
            return candidate
        raise AssertionError("unreachable")  # pragma: no cover

    async def rewind(self, session_id: str, to_round: int) -> RewindRecord:
        """Append a rewind of ``session_id`` to the end of round ``to_round``. The caller holds
        the session's writer lease (or the store takes it implicitly, as for any append).

        Raises ``SessionNotFound``, ``ConfigError`` for a round the session has not committed,
        or one it already ends at, and what ``append`` raises.
        """
        lineage = await self.lineage(session_id)
        effective = lineage.effective
        to_seq, _ = round_end(session_id, effective, to_round)
        if to_seq == effective[-1].seq:
            raise ConfigError(
                f"session {session_id} already ends at round {to_round}: nothing to rewind"
            )
        record = RewindRecord(seq=lineage.records[-1].seq + 1, to_round=to_round, to_seq=to_seq)
        await self.append(session_id, [record])
        return record

    async def _offset(self, session_id: str) -> int:
        offset = self._offsets.get(session_id)
        if offset is None:
            tail = await self.inner.read_tail(session_id, repair=False)
            first = tail.records[0] if tail.records else None
            offset = first.through_seq if isinstance(first, ForkedFromRecord) else 0
            self._learn(session_id, offset)
        return offset

    def _learn(self, session_id: str, offset: int) -> None:
        offsets = self._offsets
        offsets.pop(session_id, None)  # the newest last, so the oldest go first
        offsets[session_id] = offset
        if len(offsets) > _OFFSETS_KEPT:
            del offsets[next(iter(offsets))]

    # -- LogStore --------------------------------------------------------------------------

    async def read(self, session_id: str, *, repair: bool = True) -> LogRead:
        """The session's effective lineage (see ``Lineage``); raises as the inner ``read``."""
        lineage = await self.lineage(session_id, repair=repair)
        if lineage.own_from == 1 and not any(isinstance(r, RewindRecord) for r in lineage.records):
            return lineage.read
        return LogRead(records=tuple(lineage.effective), torn_tail=lineage.read.torn_tail)

    async def read_tail(self, session_id: str, *, repair: bool = True) -> LogRead:
        """What resume folds: the inner store's tail for a plain log, else the tail of the
        effective lineage (see ``tail_records``)."""
        tail = await self.inner.read_tail(validate_session_id(session_id), repair=repair)
        records = tail.records
        first = records[0] if records else None
        if isinstance(first, ForkedFromRecord):
            whole = await self.read(session_id, repair=False)
            return LogRead(records=tuple(tail_records(whole.records)), torn_tail=tail.torn_tail)
        self._learn(session_id, 0)
        if not any(isinstance(r, RewindRecord) for r in records):
            return tail
        effective = effective_records(records)
        compaction = next((r for r in reversed(records) if isinstance(r, CompactionRecord)), None)
        if compaction is None or any(r is compaction for r in effective):
            # the tail is whole, or starts at a compaction no rewind discarded
            return LogRead(records=tuple(effective), torn_tail=tail.torn_tail)
        whole = await self.read(session_id, repair=False)
        return LogRead(records=tuple(tail_records(whole.records)), torn_tail=tail.torn_tail)

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """As the inner ``create``; a log opening with a ``ForkedFromRecord`` is given in
        lineage seqs and written from seq 1."""
        first = records[0] if records else None
        offset = first.through_seq if isinstance(first, ForkedFromRecord) else 0
        await self.inner.create(session_id, _renumbered(records, -offset))
        self._learn(session_id, offset)

    async def append(self, session_id: str, records: Sequence[Record]) -> None:
        offset = await self._offset(validate_session_id(session_id))
        await self.inner.append(session_id, _renumbered(records, -offset))

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> Mapping[str, Exception | None]:
        refused: dict[str, Exception | None] = {}
        own: list[tuple[str, Sequence[Record]]] = []
        for session_id, records in batches:
            if session_id in refused:
                continue
            try:
                offset = await self._offset(validate_session_id(session_id))
            except (StoreError, ConfigError) as exc:  # InvalidSessionId is a ConfigError
                refused[session_id] = exc
                continue
            own.append((session_id, _renumbered(records, -offset)))
        outcomes = dict(await self.inner.append_batches(own)) if own else {}
        return {**outcomes, **refused}

    async def acquire(self, session_id: str) -> WriterLease:
        return await self.inner.acquire(session_id)

    async def renew_leases(self) -> list[str]:
        return await self.inner.renew_leases()

    async def exists(self, session_id: str) -> bool:
        return await self.inner.exists(session_id)

    async def list_sessions(self) -> list[str]:
        return await self.inner.list_sessions()

    async def lease_holder(self, session_id: str) -> LeaseHolder | None:
        return await self.inner.lease_holder(session_id)

    async def aclose(self) -> None:
        await self.inner.aclose()


def lineage_store(store: LogStore) -> LineageStore:
    """``store`` seen through lineages (itself when it already is)."""
    return store if isinstance(store, LineageStore) else LineageStore(store)
