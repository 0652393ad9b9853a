"""A fleet's view of itself and of forks: a worker is listed by ``stowage workers`` while idle,
with its rounds/s once it works, and is gone when it stops; a forked session, whose log numbers
its records from 1 while they refer to lineage seqs, is answered with the right text."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from stowage import Settings
from stowage.core import lineage_store
from stowage.storage import PostgresStore
from stowage.testing import ScriptedModel
from stowage.worker import Client, Worker, WorkerOptions

from .conftest import DSN, poll_until

WORKSPACE = Path(__file__).parent


def make_worker(schema: str, *, lease_ttl: float = 5.0, latency: float = 0.0) -> Worker:
    store = PostgresStore(DSN, schema=schema, lease_ttl=lease_ttl, max_size=4)
    return Worker(
        store,
        Settings(workspace=WORKSPACE),
        gateway=ScriptedModel(tool_rounds=1, latency=latency),
        options=WorkerOptions(poll_interval=0.2, grace=10.0),
        idle_timeout=0.1,
    )


async def test_an_idle_worker_is_listed_with_its_rounds_per_second_and_leaves(
    schema: str,
) -> None:
    with anyio.fail_after(60):
        # a TTL of 1.5 s: a beat every 0.5 s; the turns below take some 2.5 s of rounds
        worker = make_worker(schema, lease_ttl=1.5, latency=0.2)
        looker = PostgresStore(DSN, schema=schema, min_size=1, max_size=1)

        async def mine() -> list[dict[str, Any]]:
            return [row for row in await looker.live_workers() if row["pid"] == os.getpid()]

        try:
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                rows = await poll_until(mine, every=0.05)
                assert rows[0]["sessions"] == 0  # holds nothing, listed all the same
                assert rows[0]["since"] is not None and rows[0]["renewed"] is not None
                async with (
                    Client(DSN, schema=schema) as client,
                    anyio.create_task_group() as senders,
                ):

                    async def converse(session_id: str) -> None:
                        for n in range(3):
                            await client.send(session_id, f"turn {n}", create=True, wait=True)

                    for n in range(3):
                        senders.start_soon(converse, f"s{n}")

                    async def working() -> list[dict[str, Any]]:
                        return [r for r in await mine() if (r["rounds_per_s"] or 0) > 0]

                    busy = await poll_until(working, every=0.05)
                assert busy[0]["rounds_per_s"] > 0
                worker.drain()
            assert await looker.live_workers() == []  # its row went with it, and its leases
        finally:
            await looker.aclose()


async def test_a_forked_session_is_answered_with_its_own_answer(schema: str) -> None:
    with anyio.fail_after(60):
        worker = make_worker(schema)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            async with Client(DSN, schema=schema) as client:
                for n in range(2):
                    first = await client.send("parent", f"parent turn {n}", create=True, wait=True)
                    assert (first.answer or "").startswith(f"Answer to: parent turn {n}.")
                forking = PostgresStore(DSN, schema=schema)
                try:
                    child = await lineage_store(forking).fork("parent", "child")
                finally:
                    await forking.aclose()  # gives the child's lease back
                sent = await client.send(child, "what does the fork say?", wait=True)
                assert (sent.answer or "").startswith("Answer to: what does the fork say?.")
                again = await client.send(child, "and once more?", wait=True)
                assert (again.answer or "").startswith("Answer to: and once more?.")
            worker.drain()
