"""The acceptance check: a constraint given at session start is in every request a recording
server receives, verbatim, across many compactions and a resume in a new runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage import HistoryCompacted, Runtime, Settings
from stowage.model._brain import ScriptedBrain
from stowage.testing import FakeOpenAIServer

CONSTRAINT = "never commit code; must stay compatible with Python 3.12 (timeout: 37 s)"


def strings(value: Any) -> list[str]:
    """Every string in a JSON request body."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


PADDING = " and write down every figure" * 8


@pytest.mark.parametrize("wire_api", ["chat", "responses"])
async def test_a_starting_constraint_is_in_every_request_across_compactions_and_a_resume(
    tmp_path: Path, wire_api: str
) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=1, loss=0.5)) as server:
            settings = Settings(
                model="fake-model",
                base_url=server.base_url,
                api_key="sk-test",
                wire_api=wire_api,  # type: ignore[arg-type]
                store=tmp_path,
                tools="none",
                # every turn crosses it; the first round after a compaction only sets the base
                # the next one must grow from (the guard against compactions that free
                # nothing), so a compaction every other turn
                compact_threshold=120,
                # older user words live in the summary alone, so each summary replaces more
                # than it adds (a compaction that would grow history is skipped)
                user_budget_chars=0,
                durability="none",
            )
            compactions: list[HistoryCompacted] = []
            async with Runtime(settings) as rt:
                rt.subscribe(
                    lambda e: compactions.append(e) if isinstance(e, HistoryCompacted) else None
                )
                session = await rt.create("s1", system="be brief", constraints=[CONSTRAINT])
                for n in range(10):
                    await session.send(f"step {n}: measure the parser on input {n}" + PADDING)
            async with Runtime(settings) as rt:  # a new runtime: resumed from the log alone
                rt.subscribe(
                    lambda e: compactions.append(e) if isinstance(e, HistoryCompacted) else None
                )
                session = await rt.resume("s1")
                for n in range(10, 20):
                    await session.send(f"step {n}: measure the parser on input {n}" + PADDING)
        assert len(compactions) >= 9
        # the summary requests (they ask for the updates block) carry it too
        summaries = [
            b for b in server.requests if any("protected_updates" in s for s in strings(b))
        ]
        assert len(summaries) == len(compactions)
        assert len(server.requests) >= 2 * len(summaries)
        for body in server.requests:
            assert any(CONSTRAINT in text for text in strings(body)), body
