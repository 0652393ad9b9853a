"""A worker in this process (the scripted model, real PostgreSQL): messages answered once each,
a dead worker's turn finished by the next one without logging its input twice, idle sessions
giving way, and a drain that finishes or interrupts turns and gives every lease back."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import stowage
from stowage import Event, RoundStarted, Settings
from stowage.core import (
    FencingError,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    SessionRecord,
    TurnRecord,
    UserMessage,
)
from stowage.storage import PostgresStore
from stowage.testing import ScriptedModel
from stowage.worker import Client, Worker, WorkerOptions

from .conftest import DSN, held_leases, message_counts, verdict

WORKSPACE = Path(__file__).parent


def make_worker(
    schema: str,
    *,
    latency: float = 0.0,
    lease_ttl: float = 5.0,
    idle_timeout: float = 0.1,
    **options: float,
) -> Worker:
    store = PostgresStore(DSN, schema=schema, lease_ttl=lease_ttl, max_size=4)
    defaults: dict[str, float] = {"poll_interval": 0.2, "grace": 10.0}
    return Worker(
        store,
        Settings(workspace=WORKSPACE),
        gateway=ScriptedModel(tool_rounds=1, latency=latency),
        options=WorkerOptions(**{**defaults, **options}),  # type: ignore[arg-type]
        idle_timeout=idle_timeout,
    )


def round_started(worker: Worker) -> anyio.Event:
    started = anyio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, RoundStarted):
            started.set()

    worker.runtime.subscribe(on_event)
    return started


async def test_every_message_is_answered_once_and_every_log_checks(schema: str) -> None:
    with anyio.fail_after(60):
        worker = make_worker(schema, concurrency=4)
        answers: dict[str, str] = {}
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            async with Client(DSN, schema=schema) as client:

                async def converse(session_id: str) -> None:
                    for n in range(3):
                        sent = await client.send(
                            session_id, f"turn {n}: read a file", wait=True, create=True
                        )
                        assert sent.queued and sent.answer
                        answers[sent.message_id] = sent.answer

                async with anyio.create_task_group() as senders:
                    for n in range(6):
                        senders.start_soon(converse, f"s{n}")
            worker.drain()
        found = await verdict(schema)
        assert found.problems == {}
        assert found.logged == dict.fromkeys(answers, 1)
        assert found.answered == dict.fromkeys(answers, 1)
        assert all(text.startswith("Answer to: turn") for text in answers.values())
        assert await held_leases(schema) == []


async def test_a_worker_dead_after_logging_the_input_is_taken_over_and_answers_it_once(
    schema: str,
) -> None:
    with anyio.fail_after(60):
        dead = PostgresStore(DSN, schema=schema, lease_ttl=1)
        async with Client(DSN, schema=schema) as client:
            sent = await client.send("s1", "read a file", create=True)
            # the dead worker: claims, creates the log, logs the input and a tool call, dies
            assert await dead.claim_waiting(limit=1) == [("s1", None)]
            await dead.create("s1", [SessionRecord(seq=1, model="scripted")])
            call = FunctionCall(call_id="c1", name="list_dir", arguments='{"path": "."}')
            user = UserMessage(text="read a file", message_id=sent.message_id)
            await dead.append(
                "s1",
                [
                    ItemRecord(seq=2, item=user),
                    TurnRecord(seq=3, turn=1, phase="started"),
                    ItemRecord(seq=4, item=call, round=1),
                ],
            )
            worker = make_worker(schema)
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                answer = await client.answer("s1", sent.message_id)
                worker.drain()
        assert answer.startswith("Answer to: read a file")
        assert worker.taken_over == 1
        with pytest.raises(FencingError):  # the dead worker, come back, writes nothing
            await dead.append(
                "s1", [ItemRecord(seq=5, item=FunctionCallOutput(call_id="c1", output="x"))]
            )
        await dead.aclose()
        found = await verdict(schema)
        assert found.problems == {}
        assert found.logged == {sent.message_id: 1}
        assert found.answered == {sent.message_id: 1}
        reader = PostgresStore(DSN, schema=schema)
        records = (await reader.read("s1")).records
        await reader.aclose()
        outputs = [
            r.item
            for r in records
            if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
        ]
        assert outputs[0].call_id == "c1" and outputs[0].output.startswith("interrupted")


async def test_an_idle_session_gives_its_place_to_a_session_with_input(schema: str) -> None:
    with anyio.fail_after(20):
        worker = make_worker(schema, concurrency=1, idle_timeout=60.0)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            async with Client(DSN, schema=schema) as client:
                first = await client.send("s1", "hello", wait=True, create=True)
                assert worker.serving == {"s1"}  # idle, lingering with its lease
                second = await client.send("s2", "hello", wait=True, create=True)
                third = await client.send("s1", "again", wait=True)
            worker.drain()
        assert first.answer and second.answer and third.answer
        assert await held_leases(schema) == []


async def test_a_drain_finishes_the_turns_in_flight_and_gives_every_lease_back(
    schema: str,
) -> None:
    with anyio.fail_after(60):
        worker = make_worker(schema, latency=0.2, concurrency=2)
        started = round_started(worker)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            async with Client(DSN, schema=schema) as client:
                for n in range(4):
                    for k in range(2):
                        await client.send(f"s{n}", f"message {k}", create=True)
                await started.wait()
                worker.drain()
        counts = await message_counts(schema)
        assert counts["answered"] >= 1  # the turns in flight were finished
        assert counts["logged"] == 0 and counts["failed"] == 0  # none was cut off
        assert counts["answered"] + counts["queued"] == 8  # the rest waits for a worker
        assert await held_leases(schema) == []
        assert (await verdict(schema)).problems == {}


async def test_a_turn_past_the_grace_is_interrupted_and_the_next_worker_finishes_it(
    schema: str,
) -> None:
    with anyio.fail_after(60):
        slow = make_worker(schema, latency=30.0, grace=0.2)
        started = round_started(slow)
        async with Client(DSN, schema=schema) as client:
            sent = await client.send("s1", "take your time", create=True)
            async with anyio.create_task_group() as tg:
                await tg.start(slow.run)
                await started.wait()
                slow.drain()
            assert (await message_counts(schema))["logged"] == 1  # its input is in the log
            assert await held_leases(schema) == []
            fast = make_worker(schema)
            async with anyio.create_task_group() as tg:
                await tg.start(fast.run)
                answer = await client.answer("s1", sent.message_id)
                fast.drain()
        assert answer.startswith("Answer to: take your time")
        found = await verdict(schema)
        assert found.problems == {}
        assert found.logged == {sent.message_id: 1} and found.answered == {sent.message_id: 1}


async def test_a_one_shot_client_sends_and_waits_without_async_with(schema: str) -> None:
    with anyio.fail_after(30):
        worker = make_worker(schema)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            sent = await stowage.Client(DSN, schema=schema).send(
                "one", "hello", wait=True, create=True
            )
            again = await Client(DSN, schema=schema).send(
                "one", "hello", wait=False, message_id=sent.message_id
            )
            worker.drain()
        assert sent.answer and sent.answer.startswith("Answer to: hello")
        assert not again.queued  # the same id is never queued twice
        assert (await verdict(schema)).logged == {sent.message_id: 1}
