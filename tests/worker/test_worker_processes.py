"""Black box: ``stowage worker`` processes sharing one PostgreSQL store, against the fake OpenAI
server in a process of its own, killed with SIGKILL and stopped with SIGTERM.

What must hold whatever dies when: every message answered exactly once (its id on one user
item, in one finished turn, across every log), every log passing ``stowage check``, no request
with a tool call lacking its output, and no lease held once the workers have drained.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from collections.abc import Callable

import anyio
import httpx
import pytest
from stowage.worker import Client, new_message_id

from ..conftest import slowness
from .conftest import (
    DSN,
    Workers,
    held_leases,
    leases_held_by,
    message_counts,
    poll_until,
    sql,
    verdict,
)

pytestmark = pytest.mark.slow

TTL = 2.0  # short leases keep takeovers fast


def fake_stats(url: str) -> dict[str, int]:
    root = url.removesuffix("/v1")
    stats: dict[str, int] = httpx.get(f"{root}/_fake/stats", timeout=5).json()
    return stats


async def all_answered(schema: str, total: int) -> bool:
    return (await message_counts(schema))["answered"] >= total


async def test_a_worker_killed_mid_turn_is_taken_over_within_the_lease_ttl(
    schema: str, fake_server: Callable[..., str], workers_for: Callable[..., Workers]
) -> None:
    with anyio.fail_after(60 * slowness()):
        slow_url, fast_url = fake_server(latency=3.0), fake_server()
        common = ("--lease-ttl", str(TTL), "--poll-interval", "0.5", "--idle-timeout", "0")
        doomed = workers_for(schema, slow_url, *common)
        rescuer = workers_for(schema, fast_url, *common)
        async with Client(DSN, schema=schema) as client:
            sent = await client.send("s1", "read the alpha file", create=True)
            victim = doomed.start()

            async def logged() -> bool:
                return (await message_counts(schema))["logged"] == 1

            await poll_until(logged)  # its input is in the log, its model call in flight
            rescuer.start()

            # the rescuer is up and polling (it claims nothing: the lease is held)
            async def rescuer_ready() -> bool:
                return '"event": "worker_ready"' in rescuer.log_text()

            await poll_until(rescuer_ready)
            victim.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            answer = await client.answer("s1", sent.message_id)
            takeover = time.monotonic() - killed_at
        assert victim.wait(timeout=5) == -signal.SIGKILL
        assert answer.startswith("Answer to: read the alpha file")
        bound = (TTL + 2.0) * slowness()
        assert takeover < bound, f"took {takeover:.2f} s after the kill (bound {bound:.1f} s)"
        rescuer.stop_all()
        assert [proc.returncode for proc in rescuer.procs] == [0]
        found = await verdict(schema)
        assert found.problems == {}
        assert found.logged == {sent.message_id: 1} and found.answered == {sent.message_id: 1}
        assert "session_taken_over" in rescuer.log_text()
        assert fake_stats(fast_url)["orphan_requests"] == 0
        assert await held_leases(schema) == []


async def test_sigterm_drains_turns_in_flight_and_leaves_no_lease(
    schema: str, fake_server: Callable[..., str], workers_for: Callable[..., Workers]
) -> None:
    with anyio.fail_after(60 * slowness()):
        url = fake_server(latency=0.3)
        # a password in the URL (trust auth ignores it) must never reach a log line
        with_password = DSN.replace("://postgres@", "://postgres:pw-s3cret@")
        workers = workers_for(
            schema, url, "--lease-ttl", "30", "--poll-interval", "0.5", "--store", with_password
        )
        async with Client(DSN, schema=schema) as client:
            for n in range(6):
                for k in range(3):
                    await client.send(f"s{n}", f"message {k}", create=True)
            proc = workers.start("--concurrency", "4", "--grace", "20")

            async def some_logged() -> bool:
                return (await message_counts(schema))["logged"] >= 1

            await poll_until(some_logged)
            proc.send_signal(signal.SIGTERM)

            async def exited() -> int | None:
                return proc.poll() is not None

            await poll_until(exited)
        assert proc.returncode == 0, workers.log_text()[-2000:]
        counts = await message_counts(schema)
        assert counts["logged"] == 0 and counts["failed"] == 0  # no turn left cut off
        assert counts["answered"] >= 1 and counts["answered"] + counts["queued"] == 18
        assert await held_leases(schema) == []
        assert (await verdict(schema)).problems == {}
        log = workers.log_text()
        assert "worker_draining" in log and "worker_stopped" in log
        assert "sk-test-secret" not in log and "pw-s3cret" not in log


async def test_three_workers_killed_at_random_answer_every_message_exactly_once(
    schema: str, fake_server: Callable[..., str], workers_for: Callable[..., Workers]
) -> None:
    sessions, waves = 100, 3
    rng = random.Random(7)
    with anyio.fail_after(150 * slowness()):
        url = fake_server(latency=0.01, tool_rounds=2)
        workers = workers_for(
            schema, url, "--lease-ttl", str(TTL), "--poll-interval", "1",
            "--idle-timeout", "0.3", "--concurrency", "24",
        )  # fmt: skip
        for _ in range(3):
            workers.start()
        sent: set[str] = set()
        kills = 0
        # the last wave waits for two kills: fast workers could otherwise answer everything
        # before the chaos began, and the run would prove nothing
        chaos_began = anyio.Event()
        async with Client(DSN, schema=schema) as client, anyio.create_task_group() as tg:

            async def chaos() -> None:
                nonlocal kills
                await anyio.sleep(1.5)
                while True:
                    await workers.started()  # a worker killed while it imports proves nothing
                    alive = workers.alive()
                    # one holding leases if any does: killing an idle one takes nothing over
                    holding = [proc for proc in alive if await leases_held_by(schema, [proc.pid])]
                    victim = rng.choice(holding or alive)
                    victim.send_signal(signal.SIGKILL)
                    kills += 1
                    if kills == 2:
                        chaos_began.set()
                    workers.start()  # a replacement, as an orchestrator would
                    await anyio.sleep(2.5)

            tg.start_soon(chaos)
            # two waves queued at once (create=True), the third sent by waiting senders
            for wave in range(waves - 1):
                for n in range(sessions):
                    message_id = new_message_id()
                    sent.add(message_id)
                    await client.send(
                        f"s{n:03}", f"wave {wave}", create=True, message_id=message_id
                    )

            async def converse(session_id: str) -> None:
                done = await client.send(session_id, "last wave", wait=True)
                assert done.answer and done.answer.startswith("Answer to: last wave")
                sent.add(done.message_id)

            await chaos_began.wait()
            async with anyio.create_task_group() as senders:
                for n in range(sessions):
                    senders.start_soon(converse, f"s{n:03}")
            await poll_until(lambda: all_answered(schema, sessions * waves), every=0.5)
            tg.cancel_scope.cancel()
        await workers.started()
        workers.stop_all()
        assert kills >= 2, "the run ended before the chaos did anything"
        assert [
            proc.returncode for proc in workers.procs if proc.returncode != -signal.SIGKILL
        ] == [0] * 3
        found = await verdict(schema)
        assert found.problems == {}
        assert found.logged == dict.fromkeys(sent, 1), "a message was logged twice or never"
        assert found.answered == dict.fromkeys(sent, 1), "a message was answered twice or never"
        counts = await message_counts(schema)
        assert counts["answered"] == sessions * waves and counts["queued"] == 0
        assert fake_stats(url)["orphan_requests"] == 0
        # the drained workers gave every lease back; the last killed one's lapse by themselves
        drained = [proc.pid for proc in workers.procs if proc.returncode == 0]
        assert await leases_held_by(schema, drained) == []
        rows = await sql(f'SELECT count(*) AS n FROM "{schema}".stowage_sessions')
        assert rows[0]["n"] == sessions
        log = workers.log_text()
        assert "sk-test-secret" not in log
        events = Counter(
            json.loads(line)["event"] for line in log.splitlines() if line.startswith("{")
        )
        assert events["session_taken_over"] >= 1
        print(f"\n{kills} kills; worker events: {dict(sorted(events.items()))}")
