"""Every model request of a round that fails is announced once as ``AttemptAbandoned``: which
attempt, the text it had streamed (so a reader that showed it knows it is not the answer),
why, and what follows — a retry, a compaction after a refusal as too long, or the turn's end.
On a live session against the fake server, on both wire APIs, streamed and whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from stowage import TurnResult
from stowage.core import (
    AssistantDelta,
    AttemptAbandoned,
    Event,
    ModelConnectionError,
    ModelRetrying,
    RoundStarted,
)
from stowage.testing import Fault


def _abandoned(events: list[Event]) -> list[AttemptAbandoned]:
    return [e for e in events if isinstance(e, AttemptAbandoned)]


def _streamed_before(events: list[Event], abandoned: AttemptAbandoned) -> int:
    """Characters of text published since the round's attempt began, up to ``abandoned``."""
    end = events.index(abandoned)
    start = max(
        i for i, e in enumerate(events[:end]) if isinstance(e, RoundStarted | AttemptAbandoned)
    )
    return sum(len(e.text) for e in events[start:end] if isinstance(e, AssistantDelta))


async def test_a_cut_stream_is_announced_with_what_it_streamed_before_its_retry(
    tmp_path: Path, fault_run: Any, wire: tuple[str, bool], brains: Any
) -> None:
    with anyio.fail_after(20):
        async with fault_run(tmp_path, *wire, brain=brains.reader_brain()) as run:
            run.server.inject(Fault.answer("cut_stream"), when="round")
            result = await run.turn()
            assert isinstance(result, TurnResult), result
    (abandoned,) = _abandoned(run.events)
    assert abandoned.round == 1 and abandoned.attempt == 1 and abandoned.next == "retry"
    assert abandoned.error == "IncompleteResponse" and abandoned.reason == "stream cut"
    assert abandoned.streamed_chars == _streamed_before(run.events, abandoned)
    (retry,) = [e for e in run.events if isinstance(e, ModelRetrying)]
    assert run.events.index(abandoned) < run.events.index(retry)  # before the wait


async def test_a_turn_that_fails_announces_its_last_attempt_as_the_end(
    tmp_path: Path, fault_run: Any, wire: tuple[str, bool]
) -> None:
    with anyio.fail_after(20):
        async with fault_run(tmp_path, *wire) as run:
            run.server.inject(Fault.server_error(500), when="round", times=10)
            error = await run.turn()
            assert isinstance(error, ModelConnectionError), error
    abandoned = _abandoned(run.events)
    # max_retries is 1 here: two requests, the second the last
    assert [(a.attempt, a.next) for a in abandoned] == [(1, "retry"), (2, "none")]
    assert all(a.error == "ModelConnectionError" and a.streamed_chars == 0 for a in abandoned)


async def test_a_refusal_as_too_long_is_announced_as_followed_by_compaction(
    tmp_path: Path, fault_run: Any, wire: tuple[str, bool]
) -> None:
    with anyio.fail_after(30):
        async with fault_run(tmp_path, *wire) as run:
            for n in range(3):  # a history with something to compact
                assert isinstance(await run.turn(f"read a.txt, take {n}"), TurnResult)
            run.events.clear()
            run.server.inject(Fault.context_length(tokens=40_000, limit=32_000), when="round")
            result = await run.turn("once more")
            assert isinstance(result, TurnResult), result  # compacted, then sent again
    (first,) = _abandoned(run.events)
    assert first.attempt == 1 and first.next == "compact"
    assert first.error == "ContextLengthExceeded" and first.reason == "refused as too long"
