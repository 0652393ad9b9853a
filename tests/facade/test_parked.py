"""A live session between turns is parked: no task, and nothing of the turn it answered (nor
of its requests' lines and running hashes, made again by the next run's first request)."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from pathlib import Path

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from stowage import Runtime, Settings
from stowage.actors import Reply, UserTurn
from stowage.core import _manifest
from stowage.model._scripted import ScriptedModel

SESSIONS = 12


def _held() -> Counter[str]:
    """Objects alive now, by kind, of the kinds a parked session must not hold many of."""
    gc.collect()
    kinds: Counter[str] = Counter()
    for obj in gc.get_objects():
        # by type(), never isinstance(): a lazy proxy among them (openai's numpy one) would
        # import what it stands for on its __class__ being read
        cls = type(obj)
        if issubclass(cls, UserTurn):
            kinds["command"] += 1
        elif issubclass(cls, Reply):
            kinds["reply"] += 1
        elif issubclass(cls, asyncio.Event):
            kinds["event"] += 1
        elif issubclass(cls, MemoryObjectSendStream):
            kinds["stream"] += 1
        elif issubclass(cls, _manifest._Run):
            kinds["request hash"] += 1
    kinds["task"] = len(asyncio.all_tasks())
    return kinds


async def _settled() -> Counter[str]:
    """``_held()`` once it stopped changing: a turn is answered a little before its session
    parks (the run ends when the sampler finds nothing to do and the compactor idle)."""
    seen = _held()
    stable = 0
    while stable < 3:
        await anyio.sleep(0.05)
        now = _held()
        stable = stable + 1 if now == seen else 0
        seen = now
    return seen


async def test_parked_sessions_hold_no_task_and_nothing_of_their_last_turn(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        settings = Settings(store=tmp_path, tools="none", compact_threshold=1500)
        async with Runtime(settings, gateway=ScriptedModel(tool_rounds=2)) as rt:
            await rt.send("warm-up", "warm up")
            await rt.hibernate("warm-up")
            before = _held()
            async with anyio.create_task_group() as tg:
                for n in range(SESSIONS):

                    async def drive(session_id: str = f"p{n}") -> None:
                        for turn in range(2):
                            await rt.send(session_id, f"turn {turn}: fetch things")

                    tg.start_soon(drive)
            assert len(rt.sessions) == SESSIONS
            after = await _settled()
        kept = ("task", "command", "reply", "request hash")
        grown = {kind: after[kind] - before[kind] for kind in kept}
        # no task (its supervisor ended as it parked), no command answered, no reply kept,
        # no request's hashes
        assert grown == {"task": 0, "command": 0, "reply": 0, "request hash": 0}
        # the commands' stream (its two ends' send side here) and the runtime's own share of
        # the store's inbox; no executor inbox survives its run
        assert after["stream"] - before["stream"] <= 2 * SESSIONS
        # nothing waits: the doorbell, the slots and the "stopped" flag make their events only
        # while someone waits
        assert after["event"] - before["event"] == 0
