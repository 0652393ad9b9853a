"""The contract every ``LogStore`` must meet, as checks a store's tests run.

Each check is an ``async`` function taking a ``StoreFactory``: a callable that opens a store over
the same, initially empty, backing data every time it is called (so a check can reopen it). A
check closes every store it opens and raises ``AssertionError`` when the store breaks the
contract. Run them all with ``pytest.mark.parametrize("check", CHECKS)``::

    @pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
    async def test_store_meets_contract(check, tmp_path):
        async def open_store():
            return JsonlStore(tmp_path)
        with anyio.fail_after(10):
            await check(open_store)

Three more families test what only some stores can offer or need a view of the backing data:

- ``BACKING_CHECKS`` take the factory and a ``Backing``: an async ``snapshot()`` of everything
  the store keeps (files, rows), compared before and after readers ran, and for stores whose
  writes can tear an async ``tear(session_id)`` that leaves a partial last record, as a crash
  mid-write does.
- ``EXPIRY_CHECKS`` take an ``ExpiringStoreFactory``: called with a lease TTL in seconds, for
  stores whose leases expire (SQLite, PostgreSQL; a JSONL lease's lock never does).
- ``check_writer_in_another_process`` runs a real second process that holds a lease; call it
  with the source of an expression that opens the same store in that process.

Group commits: ``append_batches`` answers per session (``None`` or the error ``append`` would
raise), and one poisoned session among 30 (a seq gap, a record that cannot be encoded, a session
another store holds, an unknown or invalid id; a fenced session among the expiry checks) gets
its error while the 29 others are durable and readable from a fresh store.

No pytest import here: the module ships with the package for third-party stores.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeAlias

import anyio
from stowage.core import (
    AssistantMessage,
    CompactionRecord,
    ErrorRecord,
    FencingError,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    InvalidSessionId,
    ItemRecord,
    LeaseHolder,
    LogStore,
    MicrocompactRecord,
    ProtectedRecord,
    Record,
    RoundCommittedRecord,
    SessionBusy,
    SessionExists,
    SessionNotFound,
    SessionRecord,
    StoreError,
    SystemMessage,
    TurnRecord,
    Usage,
    UserMessage,
    WriterLease,
)

__all__ = [
    "BACKING_CHECKS",
    "CHECKS",
    "EXPIRY_CHECKS",
    "INVALID_SESSION_IDS",
    "Backing",
    "BackingCheck",
    "Check",
    "ExpiringStoreFactory",
    "ExpiryCheck",
    "StoreFactory",
    "check_writer_in_another_process",
    "compaction",
    "expected_tail",
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
    """A view of a store's backing data, for checks that readers change none of it.

    ``snapshot()`` returns everything the store keeps (say, every file under a directory with
    its bytes), comparable with ``==``; ``tear(session_id)``, for stores whose writes can tear,
    leaves a partial record at the end of the session's log as a crash mid-write would.
    """

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
async def _opened(open_store: StoreFactory) -> AsyncIterator[LogStore]:
    store = await open_store()
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


async def _raises(expected: type[BaseException], call: Awaitable[Any], what: str) -> BaseException:
    try:
        await call
    except expected as exc:
        return exc
    raise AssertionError(f"{what}: expected {expected.__name__}, nothing was raised")


async def _group_append(store: LogStore, session_id: str, records: Sequence[Record]) -> None:
    """``append`` through ``append_batches``: raises the session's outcome, if an error."""
    outcomes = await store.append_batches([(session_id, records)])
    assert set(outcomes) == {session_id}, f"outcomes for {sorted(outcomes)}, not {session_id!r}"
    error = outcomes[session_id]
    if error is not None:
        raise error


def _refused(
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


def _all_written(
    outcomes: Mapping[str, Exception | None], session_ids: Sequence[str], what: str
) -> None:
    failed = {sid: e for sid, e in outcomes.items() if sid in session_ids and e is not None}
    assert not failed, f"{what}: healthy sessions were refused: {failed}"
    missing = sorted(set(session_ids) - set(outcomes))
    assert not missing, f"{what}: no outcome for {missing}"


async def _records(store: LogStore, session_id: str) -> tuple[Record, ...]:
    read = await store.read(session_id)
    assert read.torn_tail is None, f"{session_id}: unexpected torn tail {read.torn_tail}"
    return read.records


def _is_this_process(holder: LeaseHolder | None, what: str) -> LeaseHolder:
    assert holder is not None, f"{what}: SessionBusy names no holder"
    assert holder.pid == os.getpid(), f"{what}: holder pid {holder.pid}, not {os.getpid()}"
    assert holder.host == socket.gethostname(), f"{what}: holder host {holder.host!r}"
    age = datetime.now(UTC) - holder.since
    assert timedelta(seconds=-60) < age < timedelta(minutes=10), f"{what}: since {holder.since}"
    return holder


# -- checks -------------------------------------------------------------------------------------


async def check_create_append_read_round_trip(open_store: StoreFactory) -> None:
    """What is created and appended reads back equal, in order, ``ts`` included."""
    log: list[Record] = session_start()
    async with _opened(open_store) as store:
        assert not await store.exists("s1"), "exists() before create"
        await store.create("s1", log)
        assert await store.exists("s1"), "exists() after create"
        for round_number in (1, 2, 3):
            batch = round_records(len(log) + 1, round_number)
            await store.append("s1", batch)
            log.extend(batch)
        records = await _records(store, "s1")
    assert list(records) == log, "read() differs from what was written"
    assert [r.ts for r in records] == [r.ts for r in log], "timestamps changed"


async def check_fresh_store_sees_appends(open_store: StoreFactory) -> None:
    """A second store over the same data sees every acknowledged append and continues it."""
    log: list[Record] = session_start()
    async with _opened(open_store) as store:
        await store.create("s1", log)
        log += round_records(4, 1)
        await store.append("s1", log[3:])
    async with _opened(open_store) as store:
        assert list(await _records(store, "s1")) == log
        more = round_records(len(log) + 1, 2)
        await store.append("s1", more)  # learns the last seq from the data
        log += more
    async with _opened(open_store) as store:
        assert list(await _records(store, "s1")) == log
        assert (await store.read_tail("s1")).records == tuple(log)


async def check_create_twice_raises_session_exists(open_store: StoreFactory) -> None:
    """Creating an existing session raises ``SessionExists`` and leaves its log alone."""
    async with _opened(open_store) as store:
        await store.create("s1", session_start())
        await _raises(SessionExists, store.create("s1", session_start(model="other")), "create")
        records = await _records(store, "s1")
    assert list(records) == session_start(), "the existing log was changed"


async def check_missing_session_raises_not_found(open_store: StoreFactory) -> None:
    """Append, read and read_tail of an unknown id raise ``SessionNotFound``."""
    async with _opened(open_store) as store:
        await _raises(SessionNotFound, store.append("nope", round_records(1, 1)), "append")
        _refused(SessionNotFound, await store.append_batches([("nope", [])]), "nope", "group")
        await _raises(SessionNotFound, store.read("nope"), "read")
        await _raises(SessionNotFound, store.read_tail("nope"), "read_tail")
        await _raises(SessionNotFound, store.acquire("nope"), "acquire")
        assert not await store.exists("nope")
        assert await store.list_sessions() == [], "a failed call created a session"


async def check_invalid_session_ids_refused(open_store: StoreFactory) -> None:
    """Every method refuses a bad id with ``InvalidSessionId`` and creates nothing."""
    async with _opened(open_store) as store:
        for bad in INVALID_SESSION_IDS:
            calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                ("create", partial(store.create, bad, session_start())),
                ("append", partial(store.append, bad, round_records(4, 1))),
                ("append_batches", partial(_group_append, store, bad, round_records(4, 1))),
                ("read", partial(store.read, bad)),
                ("read_tail", partial(store.read_tail, bad)),
                ("exists", partial(store.exists, bad)),
                ("acquire", partial(store.acquire, bad)),
            ]
            for name, call in calls:
                await _raises(InvalidSessionId, call(), f"{name}({bad!r})")
        assert await store.list_sessions() == []


async def check_seq_gap_and_regression_refused(open_store: StoreFactory) -> None:
    """A batch that does not continue the log exactly is refused whole, naming the session."""
    log = session_start()
    async with _opened(open_store) as store:
        await _raises(StoreError, store.create("s0", round_records(2, 1)), "create at seq 2")
        await store.create("s1", log)
        gap = await _raises(StoreError, store.append("s1", round_records(6, 1)), "gap")
        assert "s1" in str(gap) and "6" in str(gap), f"message lacks session or seq: {gap}"
        await _raises(StoreError, store.append("s1", round_records(3, 1)), "regression")
        holed = [*round_records(4, 1)[:2], *round_records(7, 1)[2:]]
        await _raises(StoreError, store.append("s1", holed), "hole inside a batch")
        assert list(await _records(store, "s1")) == log, "a refused batch left records"
        await store.append("s1", round_records(4, 1))  # the right seq still works
        assert len(await _records(store, "s1")) == 7


async def check_empty_batch_changes_nothing(open_store: StoreFactory) -> None:
    """Appending no records is allowed and writes nothing."""
    async with _opened(open_store) as store:
        await store.create("s1", session_start())
        await store.append("s1", [])
        assert await store.append_batches([]) == {}, "an empty group commit has no outcomes"
        assert await store.append_batches([("s1", [])]) == {"s1": None}
        assert list(await _records(store, "s1")) == session_start()


async def check_read_tail_without_compaction(open_store: StoreFactory) -> None:
    """With no compaction in the log, read_tail returns the whole log."""
    log: list[Record] = session_start()
    async with _opened(open_store) as store:
        await store.create("s1", log)
        assert (await store.read_tail("s1")).records == tuple(log)
        for round_number in range(1, 6):
            batch = round_records(len(log) + 1, round_number)
            await store.append("s1", batch)
            log += batch
        tail = await store.read_tail("s1")
    assert tail.torn_tail is None
    assert tail.records == tuple(log)


async def check_read_tail_after_compactions(open_store: StoreFactory) -> None:
    """read_tail is the session record plus the read suffix from the newest compaction's
    covers_through + 1, after every append of a log with several compactions."""
    log: list[Record] = session_start()
    async with _opened(open_store) as store:
        await store.create("s1", log)
        for round_number in range(1, 13):
            batch = round_records(len(log) + 1, round_number)
            if round_number % 4 == 0:
                batch.append(compaction(len(log) + len(batch) + 1, len(log) - 2))
            if round_number == 6:  # a nested {"type": "compaction"} that is not a compaction
                batch.append(
                    ProtectedRecord(seq=len(log) + len(batch) + 1, ops=({"type": "compaction"},))
                )
            await store.append("s1", batch)
            log += batch
            records = await _records(store, "s1")
            assert records == tuple(log)
            tail = await store.read_tail("s1")
            assert tail.torn_tail is None
            assert tail.records == expected_tail(records), f"wrong tail after round {round_number}"
        assert tail.records[0] == log[0]
        assert len(tail.records) < len(log), "the tail did not start after the compaction"


async def check_read_tail_compaction_edge_cases(open_store: StoreFactory) -> None:
    """covers_through of 0 or 1 keeps everything; a compaction as the last record is kept;
    a covers_through past the end leaves the session record alone."""
    async with _opened(open_store) as store:
        cases = (("zero", 0), ("one", 1), ("all", 7), ("beyond", 50))
        for session_id, covers_through in cases:
            log = [*session_start(), *round_records(4, 1)]
            log.append(compaction(len(log) + 1, covers_through))
            await store.create(session_id, log)
            records = await _records(store, session_id)
            assert (await store.read_tail(session_id)).records == expected_tail(records)


async def check_records_survive_byte_for_byte(open_store: StoreFactory) -> None:
    """Text with newlines, quotes, unicode and record-like JSON reads back unchanged."""
    tricky = 'line\n"type":"compaction"\r\n\t\\ é 雪 🚀 \u2028 {"v":1}'
    log: list[Record] = [
        SessionRecord(seq=1, model="m", settings={"nested": {"a": [1, 2.5, None, True]}}),
        ItemRecord(seq=2, item=UserMessage(text=tricky)),
        ItemRecord(seq=3, item=FunctionCall(call_id="c", name="n", arguments=tricky)),
        ItemRecord(seq=4, item=FunctionCallOutput(call_id="c", output=tricky, is_error=True)),
        MicrocompactRecord(seq=5, stubbed=(4,), reason=tricky, tokens_before=None, tokens_after=3),
        TurnRecord(seq=6, turn=1, phase="finished"),
        ErrorRecord(seq=7, kind="tool", message=tricky),
        ItemRecord(seq=8, item=UserMessage(text="")),
    ]
    async with _opened(open_store) as store:
        await store.create("s1", log[:1])
        await store.append("s1", log[1:])
        assert list(await _records(store, "s1")) == log
        assert (await store.read_tail("s1")).records == tuple(log)


async def check_append_batches_across_sessions(open_store: StoreFactory) -> None:
    """One group commit over 50 sessions (one with two batches) lands every batch."""
    ids = [f"s{n:02d}" for n in range(50)]
    async with _opened(open_store) as store:
        for session_id in ids:
            await store.create(session_id, session_start())
        batches: list[tuple[str, Sequence[Record]]] = [(sid, round_records(4, 1)) for sid in ids]
        batches.append((ids[7], round_records(8, 2)))  # the same session twice, in order
        outcomes = await store.append_batches(batches)
        assert outcomes == dict.fromkeys(ids), f"not one None per session: {outcomes}"
        for session_id in ids:
            expected = [*session_start(), *round_records(4, 1)]
            if session_id == ids[7]:
                expected += round_records(8, 2)
            assert list(await _records(store, session_id)) == expected, session_id
    async with _opened(open_store) as store:  # and it is durable, not only cached
        assert len(await _records(store, ids[7])) == 11


async def check_append_batches_isolates_sessions(open_store: StoreFactory) -> None:
    """A group commit refuses a bad session whole (every batch of it in the group) with its
    own error, and writes every other session's batches."""
    async with _opened(open_store) as store:
        for session_id in ("a", "b", "c"):
            await store.create(session_id, session_start())
        bad = [("a", round_records(4, 1)), ("b", round_records(9, 1)), ("c", round_records(4, 1))]
        outcomes = await store.append_batches(bad)
        assert set(outcomes) == {"a", "b", "c"}, f"outcomes for {sorted(outcomes)}"
        gap = _refused(StoreError, outcomes, "b", "group with a gap")
        assert "'b'" in str(gap) and "9" in str(gap), f"message lacks session or seq: {gap}"
        _all_written(outcomes, ["a", "c"], "group with a gap")
        twice = [
            ("a", round_records(8, 2)),
            ("c", round_records(8, 2)),
            ("a", round_records(20, 3)),
        ]
        outcomes = await store.append_batches(twice)  # a's second batch does not continue
        _refused(StoreError, outcomes, "a", "a session whose second batch has a gap")
        _all_written(outcomes, ["c"], "group with a session twice")
        missing = [("b", round_records(4, 1)), ("ghost", round_records(4, 1))]
        outcomes = await store.append_batches(missing)
        _refused(SessionNotFound, outcomes, "ghost", "group with a ghost")
        _all_written(outcomes, ["b"], "group with a ghost")
        assert await store.list_sessions() == ["a", "b", "c"], "a refused session was created"
    async with _opened(open_store) as store:
        assert list(await _records(store, "a")) == [*session_start(), *round_records(4, 1)]
        assert list(await _records(store, "b")) == [*session_start(), *round_records(4, 1)]
        c = [*session_start(), *round_records(4, 1), *round_records(8, 2)]
        assert list(await _records(store, "c")) == c
        await store.append("a", round_records(8, 2))  # the refused seqs are still free
        assert len(await _records(store, "a")) == 11


async def check_poisoned_session_among_30(open_store: StoreFactory) -> None:
    """In a group commit of 30 sessions, one poisoned session (a seq gap, a record that
    cannot be encoded, a session another store holds, an unknown id, an invalid id) gets its
    own error and keeps its log as it was; the 29 others are durable and readable from a
    fresh store."""
    healthy = [f"h{n:02d}" for n in range(29)]
    unencodable = ItemRecord(
        seq=4, item=FunctionCallOutput(call_id="c", output="bytes \udcff from a tool")
    )
    async with _opened(open_store) as store, _opened(open_store) as other:
        for session_id in [*healthy, "gap", "unencodable"]:
            await store.create(session_id, session_start())
        await other.create("busy", session_start())  # other holds its lease from now on
        poisons: list[tuple[str, Sequence[Record], type[BaseException]]] = [
            ("gap", round_records(7, 1), StoreError),
            ("unencodable", [unencodable], StoreError),
            ("busy", round_records(4, 1), SessionBusy),
            ("ghost", round_records(4, 1), SessionNotFound),
            ("../x", round_records(4, 1), InvalidSessionId),
        ]
        for round_number, (poisoned, records, expected) in enumerate(poisons, start=1):
            first = 4 * round_number
            group: list[tuple[str, Sequence[Record]]] = [
                (sid, round_records(first, round_number)) for sid in healthy
            ]
            group.insert(round_number * 5, (poisoned, records))
            outcomes = await store.append_batches(group)
            what = f"group {round_number} poisoned by {poisoned!r}"
            assert set(outcomes) == {*healthy, poisoned}, f"{what}: outcomes {sorted(outcomes)}"
            error = _refused(expected, outcomes, poisoned, what)
            if expected is StoreError:
                assert poisoned in str(error), f"{what}: the error does not name it: {error}"
            _all_written(outcomes, healthy, what)
        assert await store.list_sessions() == sorted([*healthy, "busy", "gap", "unencodable"])
        for session_id in ("gap", "unencodable", "busy"):
            assert list(await _records(store, session_id)) == session_start(), session_id
    async with _opened(open_store) as store:  # durable, not only cached
        expected_log: list[Record] = session_start()
        for round_number in range(1, len(poisons) + 1):
            expected_log += round_records(4 * round_number, round_number)
        for session_id in healthy:
            assert list(await _records(store, session_id)) == expected_log, session_id


async def check_concurrent_appends(open_store: StoreFactory) -> None:
    """Many sessions appending at once each end with exactly their own records."""
    ids = [f"c{n}" for n in range(20)]

    async def run(store: LogStore, session_id: str) -> None:
        await store.create(session_id, session_start())
        for round_number in range(1, 6):
            await store.append(session_id, round_records(4 * round_number, round_number))

    async with _opened(open_store) as store:
        async with anyio.create_task_group() as tg:
            for session_id in ids:
                tg.start_soon(run, store, session_id)
        for session_id in ids:
            records = await _records(store, session_id)
            assert [r.seq for r in records] == list(range(1, 24)), session_id


async def check_list_sessions_sorted(open_store: StoreFactory) -> None:
    """list_sessions returns every created id, sorted, and nothing else."""
    async with _opened(open_store) as store:
        assert await store.list_sessions() == []
        for session_id in ("b-2", "A_1", "c", "a"):
            await store.create(session_id, session_start())
        assert await store.list_sessions() == ["A_1", "a", "b-2", "c"]


# -- one writer per session ------------------------------------------------------------------


async def check_second_writer_refused_naming_the_holder(open_store: StoreFactory) -> None:
    """While one store holds a session's lease (taken by ``create``, or handed out by
    ``acquire``), another store's acquire and appends raise ``SessionBusy`` naming the holder,
    and so does a second ``acquire`` through the holding store; readers are not refused."""
    log = session_start()
    async with _opened(open_store) as holder, _opened(open_store) as other:
        await holder.create("s1", log)
        busy = await _raises(SessionBusy, other.acquire("s1"), "acquire by a second store")
        named = _is_this_process(getattr(busy, "holder", None), "acquire by a second store")
        for store, what in ((other, "another store"), (holder, "the holding store")):
            seen = _is_this_process(await store.lease_holder("s1"), f"lease_holder, {what}")
            assert seen.owner == named.owner, f"lease_holder through {what}: {seen}"
        assert str(os.getpid()) in str(busy), f"the message does not name the holder: {busy}"
        await _raises(SessionBusy, other.append("s1", round_records(4, 1)), "append, 2nd store")
        grouped = _group_append(other, "s1", round_records(4, 1))
        await _raises(SessionBusy, grouped, "append_batches, 2nd store")
        lease = await holder.acquire("s1")  # hands out the lease create took
        assert isinstance(lease, WriterLease), f"{lease!r} is not a WriterLease"
        assert lease.session_id == "s1" and lease.token >= 1, lease
        assert lease.holder.owner == named.owner, "the holder named is not the lease's"
        again = await _raises(SessionBusy, holder.acquire("s1"), "a second acquire, same store")
        _is_this_process(getattr(again, "holder", None), "a second acquire through one store")
        await holder.append("s1", round_records(4, 1))
        log = [*log, *round_records(4, 1)]
        assert list(await _records(other, "s1")) == log, "a reader was refused or saw old data"
        assert (await other.read_tail("s1", repair=False)).records == tuple(log)
        await _raises(SessionBusy, other.acquire("s1"), "acquire after the reads")
        await _raises(SessionExists, other.create("s1", session_start()), "create of a held log")
        await holder.append_batches([("s1", round_records(8, 2))])
        assert len(await _records(holder, "s1")) == 11


async def check_release_then_reacquire(open_store: StoreFactory) -> None:
    """A released lease can be taken by another store, with a greater token, and back; a
    released lease cannot be renewed; closing a store releases its leases."""
    log: list[Record] = session_start()
    async with _opened(open_store) as one, _opened(open_store) as two:
        await one.create("s1", log)
        first = await one.acquire("s1")
        await first.renew()
        assert await one.renew_leases() == [], "a held lease reported lost"
        await first.release()
        await first.release()  # idempotent
        assert await one.lease_holder("s1") is None, "a released lease still has a holder"
        assert await two.lease_holder("s1") is None, "a released lease has a holder elsewhere"
        await _raises(FencingError, first.renew(), "renew of a released lease")
        second = await two.acquire("s1")
        assert second.token > first.token, f"token {second.token} after {first.token}"
        await two.append("s1", round_records(4, 1))
        log += round_records(4, 1)
        await second.release()
        async with await one.acquire("s1") as third:
            assert third.token > second.token
            await one.append("s1", round_records(8, 2))
            log += round_records(8, 2)
        fourth = await two.acquire("s1")  # the async with released it
        assert fourth.token > third.token
        await two.append("s1", round_records(12, 3))
        log += round_records(12, 3)
    async with _opened(open_store) as three:  # closing two released fourth
        fifth = await three.acquire("s1")
        assert fifth.token > fourth.token
        assert list(await _records(three, "s1")) == log


async def check_writer_that_let_go_is_refused(open_store: StoreFactory) -> None:
    """A store that released its lease, which another store then took, cannot write: its
    append is refused and writes nothing, and its old lease cannot be renewed."""
    log = session_start()
    async with _opened(open_store) as stale, _opened(open_store) as fresh:
        await stale.create("s1", log)
        old = await stale.acquire("s1")
        await old.release()
        new = await fresh.acquire("s1")
        await _raises(StoreError, stale.append("s1", round_records(4, 1)), "stale append")
        await _raises(FencingError, old.renew(), "renew of the stale lease")
        assert list(await _records(fresh, "s1")) == log, "the stale writer wrote"
        await fresh.append("s1", round_records(4, 1))
        await new.release()
        assert len(await _records(stale, "s1")) == 7


CHECKS: tuple[Check, ...] = (
    check_create_append_read_round_trip,
    check_fresh_store_sees_appends,
    check_create_twice_raises_session_exists,
    check_missing_session_raises_not_found,
    check_invalid_session_ids_refused,
    check_seq_gap_and_regression_refused,
    check_empty_batch_changes_nothing,
    check_read_tail_without_compaction,
    check_read_tail_after_compactions,
    check_read_tail_compaction_edge_cases,
    check_records_survive_byte_for_byte,
    check_append_batches_across_sessions,
    check_append_batches_isolates_sessions,
    check_poisoned_session_among_30,
    check_concurrent_appends,
    check_list_sessions_sorted,
    check_second_writer_refused_naming_the_holder,
    check_release_then_reacquire,
    check_writer_that_let_go_is_refused,
)
"""Every check, in a stable order."""


# -- backing data: readers change nothing ---------------------------------------------------------


async def check_readers_create_nothing(open_store: StoreFactory, backing: Backing) -> None:
    """Opening a store over nothing and reading from it creates no directory, file, table or
    row."""
    before = await backing.snapshot()
    async with _opened(open_store) as store:
        assert not await store.exists("s1")
        assert await store.list_sessions() == []
        assert await store.lease_holder("s1") is None, "an unknown session has a lease holder"
        await _raises(SessionNotFound, store.read("s1"), "read")
        await _raises(SessionNotFound, store.read("s1", repair=False), "read without repair")
        await _raises(SessionNotFound, store.read_tail("s1"), "read_tail")
        await _raises(SessionNotFound, store.read_tail("s1", repair=False), "read_tail")
    assert await backing.snapshot() == before, "a reader created something"


async def check_readers_change_nothing(open_store: StoreFactory, backing: Backing) -> None:
    """Reads of a log another store is writing change no byte of the backing data."""
    log = [*session_start(), *round_records(4, 1)]
    async with _opened(open_store) as writer:
        await writer.create("s1", log[:3])
        await writer.append("s1", log[3:])
        lease = await writer.acquire("s1")
        before = await backing.snapshot()
        async with _opened(open_store) as reader:
            assert list(await _records(reader, "s1")) == log
            assert (await reader.read("s1", repair=False)).records == tuple(log)
            assert (await reader.read_tail("s1")).records == tuple(log)
            assert await reader.exists("s1")
            assert await reader.list_sessions() == ["s1"]
            _is_this_process(await reader.lease_holder("s1"), "lease_holder, read elsewhere")
        assert await backing.snapshot() == before, "a reader changed the store"
        await lease.release()


async def check_torn_tail_is_cut_only_by_the_writer(
    open_store: StoreFactory, backing: Backing
) -> None:
    """A torn last record is reported by readers and left alone, byte for byte (also by a
    reader asked to repair while another store holds the lease); the next writer to acquire
    the session cuts it, reports it in ``lease.repaired``, and appends after it."""
    if backing.tear is None:
        return  # this store's writes cannot tear
    log = [*session_start(), *round_records(4, 1)]
    async with _opened(open_store) as writer:
        await writer.create("s1", log)
    await backing.tear("s1")  # the crash
    before = await backing.snapshot()
    async with _opened(open_store) as reader:
        for read in (
            await reader.read("s1", repair=False),
            await reader.read_tail("s1", repair=False),
        ):
            torn = read.torn_tail
            assert torn is not None, "a torn tail was not reported"
            assert not torn.removed and torn.line == 8 and torn.bytes_removed > 0, torn
            assert read.records == tuple(log), "a reader returned the torn record"
        assert await reader.exists("s1") and await reader.list_sessions() == ["s1"]
        assert await backing.snapshot() == before, "a reader changed a torn log"
        async with _opened(open_store) as busy_writer:
            lease = await busy_writer.acquire("s1")  # the tear is its own write, in flight
            assert lease.repaired is not None, "acquire did not cut the torn tail"
            await backing.tear("s1")
            torn_now = await backing.snapshot()
            read = await reader.read("s1")  # repair=True, but the lease is not free
            assert read.torn_tail is not None and not read.torn_tail.removed
            assert await backing.snapshot() == torn_now, "a reader cut another writer's line"
            await lease.release()
        async with _opened(open_store) as next_writer:
            lease = await next_writer.acquire("s1")
            cut = lease.repaired
            assert cut is not None and cut.removed and cut.line == 8, f"repaired: {cut}"
            assert await backing.snapshot() != torn_now, "the writer left the torn tail"
            clean = await reader.read("s1", repair=False)
            assert clean.torn_tail is None and clean.records == tuple(log)
            await next_writer.append("s1", round_records(8, 2))
            assert len(await _records(reader, "s1")) == 11


BACKING_CHECKS: tuple[BackingCheck, ...] = (
    check_readers_create_nothing,
    check_readers_change_nothing,
    check_torn_tail_is_cut_only_by_the_writer,
)
"""Checks that need the backing data, in a stable order."""


# -- leases that expire ---------------------------------------------------------------------------

_TTL = 0.5


async def check_taken_over_writer_is_fenced(open_store: ExpiringStoreFactory) -> None:
    """A lease left unrenewed past its TTL can be taken by another store; from then on the
    first holder cannot write one record, renew, or acquire while the new lease is live."""
    log = session_start()
    async with (
        _opened(partial(open_store, _TTL)) as slow,
        _opened(partial(open_store, _TTL)) as other,
    ):
        await slow.create("s1", log)
        await slow.create("s2", log)
        lease = await slow.acquire("s1")
        every = lease.renew_every
        assert every is not None and 0 < every < _TTL, f"renew_every {every} for a TTL {_TTL}"
        await _raises(SessionBusy, other.acquire("s1"), "acquire of a live lease")
        await anyio.sleep(_TTL + 0.3)  # slow stalls; its leases expire
        taken = await other.acquire("s1")
        assert taken.token > lease.token
        await other.append("s2", round_records(4, 1))  # an implicit lease is taken over too
        for session_id in ("s1", "s2"):
            batch = round_records(4, 1)
            await _raises(
                FencingError, slow.append(session_id, batch), f"stale append {session_id}"
            )
            grouped = _group_append(slow, session_id, batch)
            await _raises(FencingError, grouped, "stale append_batches")
        await _raises(FencingError, lease.renew(), "renew of a lease taken over")
        assert await slow.renew_leases() == ["s1", "s2"]
        await taken.renew()
        await _raises(SessionBusy, slow.acquire("s1"), "acquire while the new lease is live")
        assert list(await _records(other, "s1")) == log, "the fenced writer wrote"
        await other.append("s1", round_records(4, 1))
        await lease.release()  # gives up nothing of the new holder's
        await other.append("s1", round_records(8, 2))
        await taken.renew()
        assert len(await _records(other, "s1")) == 11


async def check_renewed_lease_outlives_its_ttl(open_store: ExpiringStoreFactory) -> None:
    """A lease renewed in time stays with its holder well past its TTL."""
    async with (
        _opened(partial(open_store, _TTL)) as holder,
        _opened(partial(open_store, _TTL)) as other,
    ):
        await holder.create("s1", session_start())
        lease = await holder.acquire("s1")
        for n in range(6):
            await anyio.sleep(_TTL / 3)
            if n % 2:
                assert await holder.renew_leases() == [], "a renewed lease reported lost"
            else:
                await lease.renew()
            await _raises(SessionBusy, other.acquire("s1"), f"acquire after {n + 1} renewals")
        await holder.append("s1", round_records(4, 1))
        await lease.release()
        await other.acquire("s1")


async def check_fenced_session_among_30(open_store: ExpiringStoreFactory) -> None:
    """A group commit of 30 sessions, one of which was taken over by another store since: that
    one gets ``FencingError`` and keeps the new holder's log; the 29 others (their leases
    expired, but nobody took them) are written and durable."""
    ids = [f"s{n:02d}" for n in range(30)]
    async with (
        _opened(partial(open_store, _TTL)) as slow,
        _opened(partial(open_store, _TTL)) as other,
    ):
        for session_id in ids:
            await slow.create(session_id, session_start())
        await anyio.sleep(_TTL + 0.3)  # slow stalls; its leases expire
        taken = await other.acquire("s13")
        outcomes = await slow.append_batches([(sid, round_records(4, 1)) for sid in ids])
        assert set(outcomes) == set(ids), f"outcomes for {sorted(outcomes)}"
        _refused(FencingError, outcomes, "s13", "a session taken over")
        healthy = [sid for sid in ids if sid != "s13"]
        _all_written(outcomes, healthy, "a group with a fenced session")
        await other.append("s13", round_records(4, 1))
        await taken.release()
    async with _opened(partial(open_store, _TTL)) as fresh:
        for session_id in ids:
            log = [*session_start(), *round_records(4, 1)]
            assert list(await _records(fresh, session_id)) == log, session_id


EXPIRY_CHECKS: tuple[ExpiryCheck, ...] = (
    check_taken_over_writer_is_fenced,
    check_renewed_lease_outlives_its_ttl,
    check_fenced_session_among_30,
)
"""Checks for stores whose leases expire, in a stable order."""


# -- a second process ------------------------------------------------------------------------------

_CHILD = """
import json, os
import anyio
from stowage.storage import *

async def main():
    store = {store}
    lease = await store.acquire({session_id!r})
    print(json.dumps({{"pid": os.getpid(), "token": lease.token}}), flush=True)
    while True:
        await anyio.sleep(lease.renew_every or 3600)
        await lease.renew()

anyio.run(main)
"""


async def check_writer_in_another_process(
    open_store: StoreFactory, store_source: str, *, takeover_within: float = 0.0
) -> None:
    """A session another process holds is refused with ``SessionBusy`` naming that process;
    once the process is killed (SIGKILL), its lease frees within ``takeover_within`` seconds.

    ``store_source`` is the source of an expression that opens the same store in the child,
    after ``from stowage.storage import *``, e.g. ``"JsonlStore('/srv/logs')"``.
    """
    async with _opened(open_store) as store:
        await store.create("s1", session_start())
    code = _CHILD.format(store=store_source, session_id="s1")
    async with await anyio.open_process([sys.executable, "-c", code]) as child:
        try:
            line = b""
            assert child.stdout is not None and child.stderr is not None
            with anyio.move_on_after(30):
                async for chunk in child.stdout:
                    line += chunk
                    if b"\n" in line:
                        break
            if b"\n" not in line:
                error = b""
                with anyio.move_on_after(1):
                    async for chunk in child.stderr:
                        error += chunk
                raise AssertionError(f"the child did not take the lease: {error.decode()}")
            held = json.loads(line)
            assert held["pid"] == child.pid
            async with _opened(open_store) as store:
                busy = await _raises(SessionBusy, store.acquire("s1"), "acquire held elsewhere")
                holder = getattr(busy, "holder", None)
                assert holder is not None and holder.pid == child.pid, f"holder {holder}"
                seen = await store.lease_holder("s1")
                assert seen is not None and seen.pid == child.pid, f"lease_holder {seen}"
                assert holder.host == socket.gethostname(), f"holder {holder}"
                assert str(child.pid) in str(busy), f"the message does not name the pid: {busy}"
                await _raises(SessionBusy, store.append("s1", round_records(4, 1)), "append")
                assert list(await _records(store, "s1")) == session_start()
                child.send_signal(signal.SIGKILL)
                await child.wait()
                deadline = anyio.current_time() + takeover_within
                while True:
                    try:
                        lease = await store.acquire("s1")
                        break
                    except SessionBusy:
                        if anyio.current_time() >= deadline:
                            raise AssertionError(
                                f"the lease of the killed writer still blocks after "
                                f"{takeover_within} s"
                            ) from None
                        await anyio.sleep(0.1)
                assert lease.token > held["token"], f"token {lease.token} after {held['token']}"
                seen = await store.lease_holder("s1")
                assert seen is not None and seen.pid == os.getpid(), f"lease_holder {seen}"
                await store.append("s1", round_records(4, 1))
                assert len(await _records(store, "s1")) == 7
        finally:
            if child.returncode is None:
                child.kill()
                with anyio.CancelScope(shield=True):
                    await child.wait()
