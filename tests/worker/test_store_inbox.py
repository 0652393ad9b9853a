"""The PostgreSQL store's side of the workers: messages queued by id, recorded and answered in
the log's own transactions, claims that skip what others hold, and fencing of a stale worker."""

from __future__ import annotations

import anyio
import pytest
from stowage.core import (
    AssistantMessage,
    FencingError,
    ItemRecord,
    Record,
    RoundCommittedRecord,
    SessionNotFound,
    SessionRecord,
    StoreError,
    TurnRecord,
    UserMessage,
)
from stowage.storage import PostgresStore

from .conftest import DSN, held_leases, sql


def start(seq: int = 1) -> list[Record]:
    return [SessionRecord(seq=seq, model="scripted")]


def turn(first: int, turn_no: int, message_id: str | None, answer: str = "ok") -> list[Record]:
    """A whole turn from ``first``: user item, started, one answering round, finished."""
    return [
        ItemRecord(seq=first, item=UserMessage(text="q", message_id=message_id)),
        TurnRecord(seq=first + 1, turn=turn_no, phase="started"),
        ItemRecord(seq=first + 2, item=AssistantMessage(text=answer), round=turn_no),
        RoundCommittedRecord(
            seq=first + 3, round=turn_no, usage=None, first_seq=first + 2, last_seq=first + 3
        ),
        TurnRecord(seq=first + 4, turn=turn_no, phase="finished"),
    ]


def entry(message_id: str, text: str = "q") -> dict[str, object]:
    return {"message_id": message_id, "text": text}


async def inbox_ids(schema: str, session_id: str) -> list[str]:
    rows = await sql(
        f"SELECT e->>'message_id' AS id FROM \"{schema}\".stowage_sessions AS s, "
        "jsonb_array_elements(s.inbox) AS e WHERE s.session_id = $1",
        session_id,
    )
    return [row["id"] for row in rows]


async def test_a_message_id_is_queued_once_and_leaves_the_inbox_with_its_answer(
    schema: str,
) -> None:
    with anyio.fail_after(20):
        store = PostgresStore(DSN, schema=schema)
        try:
            await store.create("s1", start())
            assert await store.push_message("s1", entry("m1"))
            assert not await store.push_message("s1", entry("m1"))  # a retry queues nothing
            assert await store.push_message("s1", entry("m2"))
            assert await store.message_status("s1", "m1") is None  # queued, not logged
            await store.append("s1", turn(2, 1, "m1")[:2])  # user item and turn started
            assert (await store.message_status("s1", "m1") or {})["status"] == "logged"
            assert await inbox_ids(schema, "s1") == ["m1", "m2"]  # its answer is not durable yet
            await store.append("s1", turn(2, 1, "m1")[2:])
            status = await store.message_status("s1", "m1")
            assert status is not None and status["status"] == "answered"
            assert (status["seq"], status["answered_seq"]) == (2, 6)
            assert await inbox_ids(schema, "s1") == ["m2"]
            assert not await store.push_message("s1", entry("m1"))  # answered: never again
            records = await store.read_range("s1", 4, 5)
            assert [r.seq for r in records] == [4, 5]
        finally:
            await store.aclose()


async def test_a_group_commit_refuses_only_the_session_that_logs_a_known_message_id(
    schema: str,
) -> None:
    with anyio.fail_after(20):
        store = PostgresStore(DSN, schema=schema)
        try:
            await store.create("s1", start())
            await store.create("s2", start())
            await store.append("s1", turn(2, 1, "m1"))
            outcomes = await store.append_batches(
                [("s1", turn(7, 2, "m1")), ("s2", turn(2, 1, "m9"))]
            )
            assert isinstance(outcomes["s1"], StoreError) and "m1" in str(outcomes["s1"])
            assert outcomes["s2"] is None
            assert len((await store.read("s1")).records) == 6  # nothing of the refused batch
            assert (await store.message_status("s2", "m9") or {})["status"] == "answered"
        finally:
            await store.aclose()


async def test_messages_for_a_session_without_a_log_wait_for_the_worker_that_creates_it(
    schema: str,
) -> None:
    with anyio.fail_after(20):
        sender = PostgresStore(DSN, schema=schema)
        worker = PostgresStore(DSN, schema=schema, lease_ttl=5)
        try:
            with pytest.raises(SessionNotFound):
                await sender.push_message("new", entry("m1"))
            assert await sender.push_message("new", entry("m1"), create=True)
            assert not await sender.exists("new")
            assert await sender.list_sessions() == []
            with pytest.raises(SessionNotFound):
                await sender.read("new")
            with pytest.raises(SessionNotFound):
                await sender.append("new", start())
            assert await worker.claim_waiting(limit=10) == [("new", None)]
            await worker.create("new", start())  # under the lease the claim took
            assert await worker.exists("new")
            queued = await worker.peek_inbox("new")
            assert [(e["message_id"], status) for e, status in queued] == [("m1", None)]
        finally:
            await sender.aclose()
            await worker.aclose()


async def test_claims_skip_held_sessions_and_report_a_takeover_after_the_lease_expires(
    schema: str,
) -> None:
    with anyio.fail_after(20):
        first = PostgresStore(DSN, schema=schema, lease_ttl=1)
        second = PostgresStore(DSN, schema=schema, lease_ttl=1)
        try:
            for session_id in ("a", "b"):
                await first.create(session_id, start())
                await first.release(session_id)
                await first.push_message(session_id, entry(f"m-{session_id}"))
            assert [sid for sid, _ in await first.claim_waiting(limit=1)] == ["a"]
            claimed = await second.claim_waiting(limit=10)
            assert claimed == [("b", None)]  # "a" is held: skipped
            assert await first.claim_waiting(limit=10) == []  # its own and the other's
            await first.append("a", turn(2, 1, "m-a")[:2])  # user item logged, then it dies
            await anyio.sleep(1.3)  # the first worker stalls; its lease (TTL 1 s) expires
            taken = await second.claim_waiting(limit=10)
            (session_id, previous), *_ = taken
            assert session_id == "a" and previous is not None
            assert previous.owner != "" and previous.pid > 0
            with pytest.raises(FencingError):
                await first.append("a", turn(4, 1, "m-a")[2:])  # the stale worker writes nothing
            with pytest.raises(FencingError):
                await first.peek_inbox("a")
            queued = await second.peek_inbox("a")
            assert [(e["message_id"], status) for e, status in queued] == [("m-a", "logged")]
            await second.append("a", turn(2, 1, "m-a")[2:])
            assert await second.peek_inbox("a") == []
        finally:
            await first.aclose()
            await second.aclose()
        assert await held_leases(schema) == []


async def test_dropped_messages_are_marked_failed_with_their_reason(schema: str) -> None:
    with anyio.fail_after(20):
        store = PostgresStore(DSN, schema=schema)
        try:
            await store.create("s1", start())
            await store.push_message("s1", entry("m1"))
            await store.push_inbox("s1", {"not": "a message"})
            queued = await store.peek_inbox("s1")
            await store.drop_inbox("s1", [e for e, _ in queued], reason="testing")
            assert await store.peek_inbox("s1") == []
            status = await store.message_status("s1", "m1")
            assert status is not None and (status["status"], status["reason"]) == (
                "failed",
                "testing",
            )
        finally:
            await store.aclose()


async def test_a_queued_message_wakes_a_listener(schema: str) -> None:
    with anyio.fail_after(20):
        store = PostgresStore(DSN, schema=schema)
        try:
            await store.create("s1", start())
            async with store.notifications("inbox") as queued:
                await store.push_message("s1", entry("m1"))
                assert await queued.receive() == "s1"
        finally:
            await store.aclose()
