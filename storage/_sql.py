"""What the SQL stores share: batch checks before a transaction, row decoding after a query; and
what every store's group commit shares (``append_one``, ``check_follows``). The ``LogStore``
methods both SQL stores write alike are ``_sql_store``'s."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from stowage.core import (
    CompactionRecord,
    CorruptLogError,
    InvalidSessionId,
    Record,
    StoreError,
    validate_session_id,
)

from ._codec import decode_record, encode_record

__all__ = [
    "PlannedBatch",
    "append_one",
    "check_consecutive",
    "check_continues",
    "check_follows",
    "decode_rows",
    "group_by_session",
    "plan_batch",
    "plan_sessions",
]

P = TypeVar("P")

#: a store's ``append_batches``
GroupAppend = Callable[
    [Sequence[tuple[str, Sequence[Record]]]], Awaitable[dict[str, Exception | None]]
]


async def append_one(
    append_batches: GroupAppend, session_id: str, records: Sequence[Record]
) -> None:
    """``append`` as a group commit of one batch: raises the refusal its session gets."""
    error = (await append_batches(((session_id, records),)))[session_id]
    if error is not None:
        raise error


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedBatch:
    """One session's batch, checked and encoded, ready for a transaction."""

    session_id: str
    rows: list[tuple[str, int, str]]  # (session_id, seq, body)
    first_seq: int | None
    last_seq: int | None
    tail_from: int | None  # set when the batch holds a compaction


def plan_batch(session_id: str, records: Sequence[Record], *, create: bool = False) -> PlannedBatch:
    """Check ids and seqs that need no database, and encode."""
    validate_session_id(session_id)
    seqs = [record.seq for record in records]
    if create and seqs and seqs[0] != 1:
        raise StoreError(f"session {session_id!r}: a log starts at seq 1, not {seqs[0]}")
    check_consecutive(session_id, seqs)
    try:
        rows = [(session_id, r.seq, encode_record(r).decode()) for r in records]
    except TypeError as exc:
        raise StoreError(f"session {session_id!r}: a record cannot be encoded: {exc}") from exc
    tail_from = None
    for record in reversed(records):
        if isinstance(record, CompactionRecord):
            tail_from = record.covers_through + 1
            break
    return PlannedBatch(
        session_id=session_id,
        rows=rows,
        first_seq=seqs[0] if seqs else None,
        last_seq=seqs[-1] if seqs else None,
        tail_from=tail_from,
    )


def check_consecutive(session_id: str, seqs: Sequence[int]) -> None:
    """Raises ``StoreError`` naming the session unless ``seqs`` (a batch's) are consecutive."""
    for previous, seq in itertools.pairwise(seqs):
        if seq != previous + 1:
            raise StoreError(
                f"session {session_id!r}: seqs in a batch must be consecutive, "
                f"got {previous} then {seq}"
            )


def plan_sessions(
    batches: Sequence[tuple[str, Sequence[Record]]],
) -> tuple[dict[str, list[PlannedBatch]], dict[str, Exception | None]]:
    """A group commit's batches by session (in their order), each checked and encoded."""
    return group_by_session(batches, plan_batch)


def group_by_session(
    batches: Sequence[tuple[str, Sequence[Record]]], plan: Callable[[str, Sequence[Record]], P]
) -> tuple[dict[str, list[P]], dict[str, Exception | None]]:
    """``plan`` each batch by session; a session with one refused batch is refused whole."""
    planned: dict[str, list[P]] = {}
    outcomes: dict[str, Exception | None] = {}
    for session_id, records in batches:
        if outcomes.get(session_id) is not None:
            continue
        try:
            one = plan(session_id, records)
        except (InvalidSessionId, StoreError) as exc:
            outcomes[session_id] = exc
            planned.pop(session_id, None)
            continue
        outcomes[session_id] = None
        planned.setdefault(session_id, []).append(one)
    return planned, outcomes


def check_continues(batch: PlannedBatch, last_seq: int) -> None:
    """Raises ``StoreError`` naming the session and seqs unless the batch follows ``last_seq``."""
    if batch.first_seq is not None:
        check_follows(batch.session_id, batch.first_seq, last_seq)


def check_follows(session_id: str, first_seq: int, last_seq: int) -> None:
    """Raises ``StoreError`` unless ``first_seq`` follows ``last_seq``."""
    if first_seq == last_seq + 1:
        return
    problem = "gap" if first_seq > last_seq + 1 else "regression"
    raise StoreError(
        f"session {session_id!r}: seq {problem}: batch starts at seq {first_seq} "
        f"but the log ends at seq {last_seq} (expected {last_seq + 1})"
    )


def decode_rows(
    rows: Iterable[tuple[int, str | bytes]], *, where: str, tail_from: int = 1
) -> tuple[Record, ...]:
    """Decode ``(seq, body)`` rows in seq order: seq 1, then dense from ``max(tail_from, 2)``."""
    out: list[Record] = []
    expected = 1
    for seq, body in rows:
        if seq != expected:
            raise CorruptLogError(f"seq {seq} where {expected} was expected", path=where, line=seq)
        try:
            record = decode_record(body)
        except ValueError as exc:
            raise CorruptLogError(str(exc), path=where, line=seq) from None
        if record.seq != seq:
            raise CorruptLogError(f"row {seq} holds seq {record.seq}", path=where, line=seq)
        out.append(record)
        expected = max(tail_from, 2) if seq == 1 else seq + 1
    return tuple(out)
