"""The single-statement append (``storage._pg_append``): what it accepts, and that a store that
uses it still keeps the inbox, the message rows and the fence as the checked append does."""

from __future__ import annotations

import anyio
from stowage.core import FencingError, StoreError
from stowage.storage import PostgresStore
from stowage.storage._pg_append import plan_fast
from stowage.storage._pg_inbox import Logged, channel_name
from stowage.storage._sql import plan_batch

from .conftest import DSN, sql
from .test_store_inbox import entry, inbox_ids, start, turn


def test_plan_fast_takes_only_held_sessions_whose_batches_chain() -> None:
    held = plan_batch("held", turn(2, 1, "m1"))
    chained = [plan_batch("two", turn(2, 1, None)[:2]), plan_batch("two", turn(2, 1, None)[2:])]
    gap = [plan_batch("gap", turn(2, 1, None)[:2]), plan_batch("gap", turn(9, 2, None))]
    planned = {"held": [held], "two": chained, "gap": gap, "free": [plan_batch("free", start())]}
    logged = Logged(messages=[("held", "m1", 2)], finished={"held": 6})
    fast = plan_fast(planned, {"held": 3, "two": 4, "gap": 5}, logged)
    assert fast is not None
    assert fast.session_ids == ["held", "two"]  # "gap" goes the checked way, "free" has no lease
    assert fast.tokens == [3, 4]
    assert fast.expected_last == [1, 1] and fast.last_seqs == [6, 6]
    assert [row[:2] for row in fast.rows][:2] == [("held", 2), ("held", 3)]
    # the message and its turn's end in one append: inserted as answered
    arguments = fast.arguments("owner", "channel")
    assert arguments[12] == [6]
    assert plan_fast(planned, {}, logged) is None


async def test_a_whole_turn_in_one_append_answers_its_message_and_notifies(schema: str) -> None:
    with anyio.fail_after(20):
        store = PostgresStore(DSN, schema=schema)
        try:
            await store.create("s1", start())
            assert await store.push_message("s1", entry("m1"))
            await store.acquire("s1")
            async with store.notifications("answers") as answers:
                await store.append("s1", turn(2, 1, "m1"))
                with anyio.fail_after(5):
                    assert await answers.receive() == "s1"
            status = await store.message_status("s1", "m1")
            assert status is not None and status["status"] == "answered"
            assert (status["seq"], status["answered_seq"]) == (2, 6)
            assert await inbox_ids(schema, "s1") == []
            assert [r.seq for r in (await store.read("s1")).records] == [1, 2, 3, 4, 5, 6]
            rows = await sql(f'SELECT last_seq FROM "{schema}".stowage_sessions')
            assert [row["last_seq"] for row in rows] == [6]
        finally:
            await store.aclose()
    assert channel_name(schema, "answers").startswith("stowage_answers_")


async def test_a_group_writes_the_held_session_and_fences_the_one_taken_over(schema: str) -> None:
    with anyio.fail_after(20):
        mine = PostgresStore(DSN, schema=schema, lease_ttl=0.2, lease_renew_every=0.1)
        other = PostgresStore(DSN, schema=schema)
        try:
            await mine.create("kept", start())
            await mine.create("lost", start())
            await mine.acquire("kept")
            await mine.acquire("lost")
            await anyio.sleep(0.3)  # both leases expire; another store takes one of them
            await other.acquire("lost")
            outcomes = await mine.append_batches(
                [("kept", turn(2, 1, None)), ("lost", turn(2, 1, None))]
            )
            assert outcomes["kept"] is None  # an expired lease nobody took is still good
            assert isinstance(outcomes["lost"], FencingError)
            assert [r.seq for r in (await mine.read("kept")).records] == [1, 2, 3, 4, 5, 6]
            assert [r.seq for r in (await mine.read("lost")).records] == [1]
        finally:
            await mine.aclose()
            await other.aclose()


async def test_a_message_logged_already_is_refused_before_anything_is_written(
    schema: str,
) -> None:
    with anyio.fail_after(20):
        store = PostgresStore(DSN, schema=schema)
        try:
            await store.create("s1", start())
            await store.acquire("s1")
            await store.append("s1", turn(2, 1, "m1"))
            outcomes = await store.append_batches([("s1", turn(7, 2, "m1"))])
            error = outcomes["s1"]
            assert error is not None and "is in the log already" in str(error)
            assert (await store.read("s1")).records[-1].seq == 6
        finally:
            await store.aclose()


async def test_renewals_and_appends_of_many_sessions_at_once_never_deadlock(schema: str) -> None:
    """Every statement locks session rows in id order: renewing leases taken in the reverse
    order while group appends run never makes PostgreSQL break a deadlock (``StoreError``)."""
    ids = [f"s{n:02}" for n in range(24)]
    with anyio.fail_after(60):
        store = PostgresStore(DSN, schema=schema, max_size=8)
        try:
            for session_id in reversed(ids):  # the held leases are listed in reverse order
                await store.create(session_id, start())
            next_seq = dict.fromkeys(ids, 2)
            errors: list[Exception] = []

            async def renew() -> None:
                for _ in range(15):
                    try:
                        assert await store.renew_leases() == []
                    except StoreError as exc:  # a deadlock PostgreSQL broke, if any
                        errors.append(exc)

            async def append() -> None:
                for turn_no in range(1, 6):
                    group = []
                    for session_id in ids:
                        group.append((session_id, turn(next_seq[session_id], turn_no, None)))
                        next_seq[session_id] += 5
                    outcomes = await store.append_batches(group)
                    errors.extend(e for e in outcomes.values() if e is not None)

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(renew)
                tg.start_soon(append)
            assert errors == []
            assert (await store.read(ids[0])).records[-1].seq == 26
        finally:
            await store.aclose()
