"""What the store contract's checks are built from: the factories they take, the records they write,
and the small assertions they share (see ``contract``)."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

import anyio
from stowage.core import (
    AssistantMessage,
    CompactionRecord,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    ItemRecord,
    LeaseHolder,
    LogStore,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SystemMessage,
    Usage,
    UserMessage,
)

__all__ = [
    "Backing",
    "BackingCheck",
    "Check",
    "ExpiringStoreFactory",
    "ExpiryCheck",
    "INVALID_SESSION_IDS",
    "StoreFactory",
    "all_written",
    "compaction",
    "expected_tail",
    "group_append",
    "is_this_process",
    "opened",
    "raises",
    "records_of",
    "refused",
    "round_records",
    "session_start",
]

StoreFactory: TypeAlias = Callable[[], Awaitable[LogStore]]
Check: TypeAlias = Callable[[StoreFactory], Awaitable[None]]
ExpiringStoreFactory: TypeAlias = Callable[[float], Awaitable[LogStore]]
"""Opens a store over the same data whose writer leases last the given seconds unrenewed."""
ExpiryCheck: TypeAlias = Callable[[ExpiringStoreFactory], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Backing:
    """A view of a store's backing data, for checks that readers change none of it."""

    snapshot: Callable[[], Awaitable[object]]
    tear: Callable[[str], Awaitable[None]] | None = None


BackingCheck: TypeAlias = Callable[[StoreFactory, Backing], Awaitable[None]]

INVALID_SESSION_IDS = ("../x", "a/b", "", ".", "..", "x y", "é", "a\nb", "x" * 129)
"""Ids every store must refuse with ``InvalidSessionId`` before touching its backing data."""


# -- record builders ----------------------------------------------------------------------------


def session_start(*, model: str = "test-model") -> list[Record]:
    """The first batch of a log: the session record, the system message, a user message."""
    return [
        SessionRecord(seq=1, model=model, context_window=128_000, tools=("read", "write")),
        ItemRecord(seq=2, item=SystemMessage(text="You are a careful agent.")),
        ItemRecord(seq=3, item=UserMessage(text="Fix the bug in main.py", pinned=True)),
    ]


def round_records(first_seq: int, round_number: int) -> list[Record]:
    """One whole round from ``first_seq``: assistant text, a call, its output, the commit."""
    call_id = f"call_{round_number}"
    return [
        ItemRecord(
            seq=first_seq, item=AssistantMessage(text=f"round {round_number}"), round=round_number
        ),
        ItemRecord(
            seq=first_seq + 1,
            item=FunctionCall(call_id=call_id, name="read", arguments='{"path": "main.py"}'),
            round=round_number,
        ),
        ItemRecord(
            seq=first_seq + 2,
            item=FunctionCallOutput(call_id=call_id, output='line 1\nline "2"\n'),
            round=round_number,
        ),
        RoundCommittedRecord(
            seq=first_seq + 3,
            round=round_number,
            usage=Usage(input_tokens=100 * round_number, output_tokens=7, total_tokens=0),
            first_seq=first_seq,
            last_seq=first_seq + 2,
        ),
    ]


def compaction(seq: int, covers_through: int, *, round_number: int = 1) -> CompactionRecord:
    """A compaction at ``seq`` that absorbed everything up to ``covers_through``."""
    return CompactionRecord(
        seq=seq,
        summary=f"summary through {covers_through}",
        covers_through=covers_through,
        retained=(HistoryEntry(seq=3, item=UserMessage(text="Fix the bug in main.py")),),
        reason="threshold",
        tokens_before=9000,
        tokens_after=1200,
        removed=max(covers_through - 3, 0),
        round=round_number,
        protected={"objective": "fix the bug", "decisions": [{"type": "compaction"}]},
    )


def expected_tail(records: Sequence[Record]) -> tuple[Record, ...]:
    """What ``read_tail`` must return for a log that ``read`` returns as ``records``."""
    if not records:
        return ()
    start = 1
    for record in reversed(records):
        if isinstance(record, CompactionRecord):
            start = record.covers_through + 1
            break
    return (records[0], *(r for r in records[1:] if r.seq >= start))


# -- helpers ------------------------------------------------------------------------------------


@asynccontextmanager
async def opened(open_store: StoreFactory) -> AsyncIterator[LogStore]:
    store = await open_store()
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


async def raises(expected: type[BaseException], call: Awaitable[Any], what: str) -> BaseException:
    try:
        await call
    except expected as exc:
        return exc
    raise AssertionError(f"{what}: expected {expected.__name__}, nothing was raised")


async def group_append(store: LogStore, session_id: str, records: Sequence[Record]) -> None:
    """``append`` through ``append_batches``: raises the session's outcome, if an error."""
    outcomes = await store.append_batches([(session_id, records)])
    assert set(outcomes) == {session_id}, f"outcomes for {sorted(outcomes)}, not {session_id!r}"
    error = outcomes[session_id]
    if error is not None:
        raise error


def refused(
    expected: type[BaseException],
    outcomes: Mapping[str, Exception | None],
    session_id: str,
    what: str,
) -> BaseException:
    error = outcomes.get(session_id)
    if not isinstance(error, expected):
        raise AssertionError(
            f"{what}: expected {expected.__name__} as the outcome of {session_id!r}, got {error!r}"
        )
    return error


def all_written(
    outcomes: Mapping[str, Exception | None], session_ids: Sequence[str], what: str
) -> None:
    failed = {sid: e for sid, e in outcomes.items() if sid in session_ids and e is not None}
    assert not failed, f"{what}: healthy sessions were refused: {failed}"
    missing = sorted(set(session_ids) - set(outcomes))
    assert not missing, f"{what}: no outcome for {missing}"


async def records_of(store: LogStore, session_id: str) -> tuple[Record, ...]:
    read = await store.read(session_id)
    assert read.torn_tail is None, f"{session_id}: unexpected torn tail {read.torn_tail}"
    return read.records


def is_this_process(holder: LeaseHolder | None, what: str) -> LeaseHolder:
    assert holder is not None, f"{what}: SessionBusy names no holder"
    assert holder.pid == os.getpid(), f"{what}: holder pid {holder.pid}, not {os.getpid()}"
    assert holder.host == socket.gethostname(), f"{what}: holder host {holder.host!r}"
    age = datetime.now(UTC) - holder.since
    assert timedelta(seconds=-60) < age < timedelta(minutes=10), f"{what}: since {holder.since}"
    return holder
