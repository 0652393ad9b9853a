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

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import anyio
from stowage.core import (
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    InvalidSessionId,
    ItemRecord,
    LogStore,
    MicrocompactRecord,
    ProtectedRecord,
    Record,
    SessionBusy,
    SessionExists,
    SessionNotFound,
    SessionRecord,
    StoreError,
    TurnRecord,
    UserMessage,
)

from ._contract_kit import (
    INVALID_SESSION_IDS,
    Backing,
    BackingCheck,
    Check,
    ExpiringStoreFactory,
    ExpiryCheck,
    StoreFactory,
    all_written,
    compaction,
    expected_tail,
    group_append,
    is_this_process,
    opened,
    raises,
    records_of,
    refused,
    round_records,
    session_start,
)
from ._contract_leases import (
    EXPIRY_CHECKS,
    check_release_then_reacquire,
    check_second_writer_refused_naming_the_holder,
    check_writer_in_another_process,
    check_writer_that_let_go_is_refused,
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


# -- checks -------------------------------------------------------------------------------------


async def check_create_append_read_round_trip(open_store: StoreFactory) -> None:
    """What is created and appended reads back equal, in order, ``ts`` included."""
    log: list[Record] = session_start()
    async with opened(open_store) as store:
        assert not await store.exists("s1"), "exists() before create"
        await store.create("s1", log)
        assert await store.exists("s1"), "exists() after create"
        for round_number in (1, 2, 3):
            batch = round_records(len(log) + 1, round_number)
            await store.append("s1", batch)
            log.extend(batch)
        records = await records_of(store, "s1")
    assert list(records) == log, "read() differs from what was written"
    assert [r.ts for r in records] == [r.ts for r in log], "timestamps changed"


async def check_fresh_store_sees_appends(open_store: StoreFactory) -> None:
    """A second store over the same data sees every acknowledged append and continues it."""
    log: list[Record] = session_start()
    async with opened(open_store) as store:
        await store.create("s1", log)
        log += round_records(4, 1)
        await store.append("s1", log[3:])
    async with opened(open_store) as store:
        assert list(await records_of(store, "s1")) == log
        more = round_records(len(log) + 1, 2)
        await store.append("s1", more)  # learns the last seq from the data
        log += more
    async with opened(open_store) as store:
        assert list(await records_of(store, "s1")) == log
        assert (await store.read_tail("s1")).records == tuple(log)


async def check_create_twice_raises_session_exists(open_store: StoreFactory) -> None:
    """Creating an existing session raises ``SessionExists`` and leaves its log alone."""
    async with opened(open_store) as store:
        await store.create("s1", session_start())
        await raises(SessionExists, store.create("s1", session_start(model="other")), "create")
        records = await records_of(store, "s1")
    assert list(records) == session_start(), "the existing log was changed"


async def check_missing_session_raises_not_found(open_store: StoreFactory) -> None:
    """Append, read and read_tail of an unknown id raise ``SessionNotFound``."""
    async with opened(open_store) as store:
        await raises(SessionNotFound, store.append("nope", round_records(1, 1)), "append")
        refused(SessionNotFound, await store.append_batches([("nope", [])]), "nope", "group")
        await raises(SessionNotFound, store.read("nope"), "read")
        await raises(SessionNotFound, store.read_tail("nope"), "read_tail")
        await raises(SessionNotFound, store.acquire("nope"), "acquire")
        assert not await store.exists("nope")
        assert await store.list_sessions() == [], "a failed call created a session"


async def check_invalid_session_ids_refused(open_store: StoreFactory) -> None:
    """Every method refuses a bad id with ``InvalidSessionId`` and creates nothing."""
    async with opened(open_store) as store:
        for bad in INVALID_SESSION_IDS:
            calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                ("create", partial(store.create, bad, session_start())),
                ("append", partial(store.append, bad, round_records(4, 1))),
                ("append_batches", partial(group_append, store, bad, round_records(4, 1))),
                ("read", partial(store.read, bad)),
                ("read_tail", partial(store.read_tail, bad)),
                ("exists", partial(store.exists, bad)),
                ("acquire", partial(store.acquire, bad)),
            ]
            for name, call in calls:
                await raises(InvalidSessionId, call(), f"{name}({bad!r})")
        assert await store.list_sessions() == []


async def check_seq_gap_and_regression_refused(open_store: StoreFactory) -> None:
    """A batch that does not continue the log exactly is refused whole, naming the session."""
    log = session_start()
    async with opened(open_store) as store:
        await raises(StoreError, store.create("s0", round_records(2, 1)), "create at seq 2")
        await store.create("s1", log)
        gap = await raises(StoreError, store.append("s1", round_records(6, 1)), "gap")
        assert "s1" in str(gap) and "6" in str(gap), f"message lacks session or seq: {gap}"
        await raises(StoreError, store.append("s1", round_records(3, 1)), "regression")
        holed = [*round_records(4, 1)[:2], *round_records(7, 1)[2:]]
        await raises(StoreError, store.append("s1", holed), "hole inside a batch")
        assert list(await records_of(store, "s1")) == log, "a refused batch left records"
        await store.append("s1", round_records(4, 1))  # the right seq still works
        assert len(await records_of(store, "s1")) == 7


async def check_empty_batch_changes_nothing(open_store: StoreFactory) -> None:
    """Appending no records is allowed and writes nothing."""
    async with opened(open_store) as store:
        await store.create("s1", session_start())
        await store.append("s1", [])
        assert await store.append_batches([]) == {}, "an empty group commit has no outcomes"
        assert await store.append_batches([("s1", [])]) == {"s1": None}
        assert list(await records_of(store, "s1")) == session_start()


async def check_read_tail_without_compaction(open_store: StoreFactory) -> None:
    """With no compaction in the log, read_tail returns the whole log."""
    log: list[Record] = session_start()
    async with opened(open_store) as store:
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
    async with opened(open_store) as store:
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
            records = await records_of(store, "s1")
            assert records == tuple(log)
            tail = await store.read_tail("s1")
            assert tail.torn_tail is None
            assert tail.records == expected_tail(records), f"wrong tail after round {round_number}"
        assert tail.records[0] == log[0]
        assert len(tail.records) < len(log), "the tail did not start after the compaction"


async def check_read_tail_compaction_edge_cases(open_store: StoreFactory) -> None:
    """covers_through of 0 or 1 keeps everything; a compaction as the last record is kept;
    a covers_through past the end leaves the session record alone."""
    async with opened(open_store) as store:
        cases = (("zero", 0), ("one", 1), ("all", 7), ("beyond", 50))
        for session_id, covers_through in cases:
            log = [*session_start(), *round_records(4, 1)]
            log.append(compaction(len(log) + 1, covers_through))
            await store.create(session_id, log)
            records = await records_of(store, session_id)
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
    async with opened(open_store) as store:
        await store.create("s1", log[:1])
        await store.append("s1", log[1:])
        assert list(await records_of(store, "s1")) == log
        assert (await store.read_tail("s1")).records == tuple(log)


async def check_append_batches_across_sessions(open_store: StoreFactory) -> None:
    """One group commit over 50 sessions (one with two batches) lands every batch."""
    ids = [f"s{n:02d}" for n in range(50)]
    async with opened(open_store) as store:
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
            assert list(await records_of(store, session_id)) == expected, session_id
    async with opened(open_store) as store:  # and it is durable, not only cached
        assert len(await records_of(store, ids[7])) == 11


async def check_append_batches_isolates_sessions(open_store: StoreFactory) -> None:
    """A group commit refuses a bad session whole (every batch of it in the group) with its
    own error, and writes every other session's batches."""
    async with opened(open_store) as store:
        for session_id in ("a", "b", "c"):
            await store.create(session_id, session_start())
        bad = [("a", round_records(4, 1)), ("b", round_records(9, 1)), ("c", round_records(4, 1))]
        outcomes = await store.append_batches(bad)
        assert set(outcomes) == {"a", "b", "c"}, f"outcomes for {sorted(outcomes)}"
        gap = refused(StoreError, outcomes, "b", "group with a gap")
        assert "'b'" in str(gap) and "9" in str(gap), f"message lacks session or seq: {gap}"
        all_written(outcomes, ["a", "c"], "group with a gap")
        twice = [
            ("a", round_records(8, 2)),
            ("c", round_records(8, 2)),
            ("a", round_records(20, 3)),
        ]
        outcomes = await store.append_batches(twice)  # a's second batch does not continue
        refused(StoreError, outcomes, "a", "a session whose second batch has a gap")
        all_written(outcomes, ["c"], "group with a session twice")
        missing = [("b", round_records(4, 1)), ("ghost", round_records(4, 1))]
        outcomes = await store.append_batches(missing)
        refused(SessionNotFound, outcomes, "ghost", "group with a ghost")
        all_written(outcomes, ["b"], "group with a ghost")
        assert await store.list_sessions() == ["a", "b", "c"], "a refused session was created"
    async with opened(open_store) as store:
        assert list(await records_of(store, "a")) == [*session_start(), *round_records(4, 1)]
        assert list(await records_of(store, "b")) == [*session_start(), *round_records(4, 1)]
        c = [*session_start(), *round_records(4, 1), *round_records(8, 2)]
        assert list(await records_of(store, "c")) == c
        await store.append("a", round_records(8, 2))  # the refused seqs are still free
        assert len(await records_of(store, "a")) == 11


async def check_poisoned_session_among_30(open_store: StoreFactory) -> None:
    """In a group commit of 30 sessions, one poisoned session (a seq gap, a record that
    cannot be encoded, a session another store holds, an unknown id, an invalid id) gets its
    own error and keeps its log as it was; the 29 others are durable and readable from a
    fresh store."""
    healthy = [f"h{n:02d}" for n in range(29)]
    unencodable = ItemRecord(
        seq=4, item=FunctionCallOutput(call_id="c", output="bytes \udcff from a tool")
    )
    async with opened(open_store) as store, opened(open_store) as other:
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
            error = refused(expected, outcomes, poisoned, what)
            if expected is StoreError:
                assert poisoned in str(error), f"{what}: the error does not name it: {error}"
            all_written(outcomes, healthy, what)
        assert await store.list_sessions() == sorted([*healthy, "busy", "gap", "unencodable"])
        for session_id in ("gap", "unencodable", "busy"):
            assert list(await records_of(store, session_id)) == session_start(), session_id
    async with opened(open_store) as store:  # durable, not only cached
        expected_log: list[Record] = session_start()
        for round_number in range(1, len(poisons) + 1):
            expected_log += round_records(4 * round_number, round_number)
        for session_id in healthy:
            assert list(await records_of(store, session_id)) == expected_log, session_id


async def check_concurrent_appends(open_store: StoreFactory) -> None:
    """Many sessions appending at once each end with exactly their own records."""
    ids = [f"c{n}" for n in range(20)]

    async def run(store: LogStore, session_id: str) -> None:
        await store.create(session_id, session_start())
        for round_number in range(1, 6):
            await store.append(session_id, round_records(4 * round_number, round_number))

    async with opened(open_store) as store:
        async with anyio.create_task_group() as tg:
            for session_id in ids:
                tg.start_soon(run, store, session_id)
        for session_id in ids:
            records = await records_of(store, session_id)
            assert [r.seq for r in records] == list(range(1, 24)), session_id


async def check_list_sessions_sorted(open_store: StoreFactory) -> None:
    """list_sessions returns every created id, sorted, and nothing else."""
    async with opened(open_store) as store:
        assert await store.list_sessions() == []
        for session_id in ("b-2", "A_1", "c", "a"):
            await store.create(session_id, session_start())
        assert await store.list_sessions() == ["A_1", "a", "b-2", "c"]


# -- one writer per session ------------------------------------------------------------------


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
    async with opened(open_store) as store:
        assert not await store.exists("s1")
        assert await store.list_sessions() == []
        assert await store.lease_holder("s1") is None, "an unknown session has a lease holder"
        await raises(SessionNotFound, store.read("s1"), "read")
        await raises(SessionNotFound, store.read("s1", repair=False), "read without repair")
        await raises(SessionNotFound, store.read_tail("s1"), "read_tail")
        await raises(SessionNotFound, store.read_tail("s1", repair=False), "read_tail")
    assert await backing.snapshot() == before, "a reader created something"


async def check_readers_change_nothing(open_store: StoreFactory, backing: Backing) -> None:
    """Reads of a log another store is writing change no byte of the backing data."""
    log = [*session_start(), *round_records(4, 1)]
    async with opened(open_store) as writer:
        await writer.create("s1", log[:3])
        await writer.append("s1", log[3:])
        lease = await writer.acquire("s1")
        before = await backing.snapshot()
        async with opened(open_store) as reader:
            assert list(await records_of(reader, "s1")) == log
            assert (await reader.read("s1", repair=False)).records == tuple(log)
            assert (await reader.read_tail("s1")).records == tuple(log)
            assert await reader.exists("s1")
            assert await reader.list_sessions() == ["s1"]
            is_this_process(await reader.lease_holder("s1"), "lease_holder, read elsewhere")
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
    async with opened(open_store) as writer:
        await writer.create("s1", log)
    await backing.tear("s1")  # the crash
    before = await backing.snapshot()
    async with opened(open_store) as reader:
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
        async with opened(open_store) as busy_writer:
            lease = await busy_writer.acquire("s1")  # the tear is its own write, in flight
            assert lease.repaired is not None, "acquire did not cut the torn tail"
            await backing.tear("s1")
            torn_now = await backing.snapshot()
            read = await reader.read("s1")  # repair=True, but the lease is not free
            assert read.torn_tail is not None and not read.torn_tail.removed
            assert await backing.snapshot() == torn_now, "a reader cut another writer's line"
            await lease.release()
        async with opened(open_store) as next_writer:
            lease = await next_writer.acquire("s1")
            cut = lease.repaired
            assert cut is not None and cut.removed and cut.line == 8, f"repaired: {cut}"
            assert await backing.snapshot() != torn_now, "the writer left the torn tail"
            clean = await reader.read("s1", repair=False)
            assert clean.torn_tail is None and clean.records == tuple(log)
            await next_writer.append("s1", round_records(8, 2))
            assert len(await records_of(reader, "s1")) == 11


BACKING_CHECKS: tuple[BackingCheck, ...] = (
    check_readers_create_nothing,
    check_readers_change_nothing,
    check_torn_tail_is_cut_only_by_the_writer,
)
"""Checks that need the backing data, in a stable order."""
