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

No pytest import here: the module ships with the package for third-party stores.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeAlias

import anyio
from stowage.core import (
    AssistantMessage,
    CompactionRecord,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    InvalidSessionId,
    ItemRecord,
    LogStore,
    MicrocompactRecord,
    ProtectedRecord,
    Record,
    RoundCommittedRecord,
    SessionExists,
    SessionNotFound,
    SessionRecord,
    StoreError,
    SystemMessage,
    TurnRecord,
    Usage,
    UserMessage,
)

__all__ = [
    "CHECKS",
    "INVALID_SESSION_IDS",
    "Check",
    "StoreFactory",
    "compaction",
    "expected_tail",
    "round_records",
    "session_start",
]

StoreFactory: TypeAlias = Callable[[], Awaitable[LogStore]]
Check: TypeAlias = Callable[[StoreFactory], Awaitable[None]]

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


async def _records(store: LogStore, session_id: str) -> tuple[Record, ...]:
    read = await store.read(session_id)
    assert read.torn_tail is None, f"{session_id}: unexpected torn tail {read.torn_tail}"
    return read.records


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
        await _raises(SessionNotFound, store.append_batches([("nope", [])]), "append_batches")
        await _raises(SessionNotFound, store.read("nope"), "read")
        await _raises(SessionNotFound, store.read_tail("nope"), "read_tail")
        assert not await store.exists("nope")
        assert await store.list_sessions() == [], "a failed call created a session"


async def check_invalid_session_ids_refused(open_store: StoreFactory) -> None:
    """Every method refuses a bad id with ``InvalidSessionId`` and creates nothing."""
    async with _opened(open_store) as store:
        for bad in INVALID_SESSION_IDS:
            calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                ("create", partial(store.create, bad, session_start())),
                ("append", partial(store.append, bad, round_records(4, 1))),
                ("append_batches", partial(store.append_batches, [(bad, round_records(4, 1))])),
                ("read", partial(store.read, bad)),
                ("read_tail", partial(store.read_tail, bad)),
                ("exists", partial(store.exists, bad)),
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
        await store.append_batches([])
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
        await store.append_batches(batches)
        for session_id in ids:
            expected = [*session_start(), *round_records(4, 1)]
            if session_id == ids[7]:
                expected += round_records(8, 2)
            assert list(await _records(store, session_id)) == expected, session_id
    async with _opened(open_store) as store:  # and it is durable, not only cached
        assert len(await _records(store, ids[7])) == 11


async def check_append_batches_all_or_nothing(open_store: StoreFactory) -> None:
    """A group commit with one bad batch writes none of its batches."""
    async with _opened(open_store) as store:
        for session_id in ("a", "b", "c"):
            await store.create(session_id, session_start())
        bad = [("a", round_records(4, 1)), ("b", round_records(9, 1)), ("c", round_records(4, 1))]
        await _raises(StoreError, store.append_batches(bad), "group with a gap")
        missing = [("a", round_records(4, 1)), ("ghost", round_records(4, 1))]
        await _raises(SessionNotFound, store.append_batches(missing), "group with a ghost")
        for session_id in ("a", "b", "c"):
            assert list(await _records(store, session_id)) == session_start(), session_id
        await store.append_batches([(sid, round_records(4, 1)) for sid in ("a", "b", "c")])
        assert len(await _records(store, "b")) == 7


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
    check_append_batches_all_or_nothing,
    check_concurrent_appends,
    check_list_sessions_sorted,
)
"""Every check, in a stable order."""
