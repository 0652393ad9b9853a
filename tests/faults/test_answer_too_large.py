"""An answer larger than ``max_answer_chars`` is refused like any other bad response, in a
live session on both wire APIs, streamed and whole: nothing of it is written, it is retried,
and when every attempt is too large the turn fails with ``ResponseTooLarge`` and the session
goes on. The pure check every gateway's answers get (``answer_too_large``) says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from stowage import (
    AssistantMessage,
    FunctionCall,
    ModelRequest,
    ModelResponse,
    ResponseTooLarge,
    TurnResult,
    Usage,
)
from stowage.actors._responses import answer_too_large
from stowage.core import ItemRecord, ModelRetrying, item_chars

from ..conftest import slowness

CAP = 100_000
BIG = 2_000_000


# the fake server takes a while to cut 2 MB into stream chunks: no stall is meant here
def patient() -> dict[str, Any]:
    """The settings of these runs, read when a test starts (the load then, not at collection)."""
    slow = slowness()
    return {"max_answer_chars": CAP, "stream_idle_timeout": 5 * slow, "request_deadline": 10 * slow}


def _big(request: ModelRequest) -> ModelResponse:
    """2 MB of text, reported as 10 output tokens."""
    return ModelResponse(
        items=(AssistantMessage(text="w" * BIG),),
        usage=Usage(input_tokens=50, output_tokens=10, total_tokens=60),
        model=request.model,
    )


def _largest_item(run: Any) -> int:
    return max(
        (item_chars(r.item) for r in run.written if isinstance(r, ItemRecord)),
        default=0,
    )


async def test_an_answer_past_the_cap_is_retried_and_nothing_of_it_is_written(
    tmp_path: Path, fault_run: Any, wire: tuple[str, bool], brains: Any
) -> None:
    answers = brains.reader_brain()
    calls: list[int] = []

    def brain(request: ModelRequest) -> ModelResponse:
        calls.append(1)
        return _big(request) if len(calls) == 1 else answers(request)

    with anyio.fail_after(30):
        async with fault_run(tmp_path, *wire, brain=brain, **patient()) as run:
            result = await run.turn()
            assert isinstance(result, TurnResult), result
            (retry,) = [e for e in run.events if isinstance(e, ModelRetrying)]
            assert retry.error == "ResponseTooLarge"
            assert _largest_item(run) < CAP


async def test_answers_that_stay_too_large_fail_the_turn_and_the_session_goes_on(
    tmp_path: Path, fault_run: Any, wire: tuple[str, bool], brains: Any
) -> None:
    answers = brains.reader_brain()
    big = [True]

    def brain(request: ModelRequest) -> ModelResponse:
        return _big(request) if big[0] else answers(request)

    with anyio.fail_after(30):
        async with fault_run(tmp_path, *wire, brain=brain, **patient()) as run:
            mark = run.last_seq
            error = await run.turn()
            assert isinstance(error, ResponseTooLarge), error
            assert not any(
                isinstance(r, ItemRecord) and isinstance(r.item, AssistantMessage | FunctionCall)
                for r in run.since(mark)
            )
            big[0] = False
            assert isinstance(await run.turn(), TurnResult)
            assert _largest_item(run) < CAP


def test_the_pure_check_counts_text_and_call_arguments() -> None:
    response = ModelResponse(
        items=(
            AssistantMessage(text="a" * 60),
            FunctionCall(call_id="c1", name="write", arguments="b" * 41),
        )
    )
    assert answer_too_large(response, 101) is None
    reason = answer_too_large(response, 100)
    assert reason is not None and "max_answer_chars" in reason and "101" in reason
