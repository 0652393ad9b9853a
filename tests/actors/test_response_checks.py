"""What the sampler checks in a response before writing it, and how long it waits to retry:
duplicate ids, calls cut off by the output limit, the server's waits."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from stowage.actors._responses import cut_call_outputs, merge_outputs, unique_call_ids, vet_usage
from stowage.actors._retry import backoff_delay, call_with_retries
from stowage.core import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    ModelConnectionError,
    ModelRequest,
    ModelResponse,
    Usage,
    UserMessage,
)


def call(call_id: str, arguments: str = "{}", name: str = "read") -> FunctionCall:
    return FunctionCall(call_id=call_id, name=name, arguments=arguments)


def test_duplicate_ids_in_one_response_become_unique_and_keep_their_order() -> None:
    response = ModelResponse(items=(call("c1"), call("c1"), call("c1-s9-1")))
    fixed = unique_call_ids(response, set(), salt="s9")
    ids = [c.call_id for c in fixed.calls]
    assert ids[0] == "c1" and len(set(ids)) == 3
    assert [c.name for c in fixed.calls] == ["read"] * 3


def test_only_calls_cut_off_by_the_output_limit_are_refused() -> None:
    items = (call("a", '{"path": "x"}'), call("b", '{"path": "y'))
    truncated = ModelResponse(items=items, finish_reason="length")
    refused = cut_call_outputs(truncated, max_output_tokens=256)
    assert list(refused) == ["b"]
    assert refused["b"].is_error and "cut off by the output limit (256 tokens)" in (
        refused["b"].output
    )
    assert (
        cut_call_outputs(
            ModelResponse(items=items, finish_reason="tool_calls"), max_output_tokens=None
        )
        == {}
    )
    ran = (FunctionCallOutput(call_id="a", output="ok"),)
    assert [o.call_id for o in merge_outputs(truncated.calls, refused, ran)] == ["a", "b"]


def test_usage_is_vetted_against_the_request_it_describes() -> None:
    request = ModelRequest(model="m", input=(UserMessage(text="x" * 64_000),))
    zero = Usage(input_tokens=0, output_tokens=0, total_tokens=0)
    vetted = vet_usage(ModelResponse(items=(), usage=zero), request)
    assert vetted.usage is None and vetted.rejected == zero and vetted.reason
    real = Usage(input_tokens=16_000, output_tokens=5, total_tokens=16_005)
    assert vet_usage(ModelResponse(items=(), usage=real), request).usage == real


def test_a_wait_the_server_asks_for_is_taken_up_to_the_cap() -> None:
    assert 2.0 <= backoff_delay(1, retry_after=2.0, max_wait=60) <= 2.2
    assert 5.0 <= backoff_delay(1, retry_after=360.0, max_wait=5.0) <= 5.5
    assert backoff_delay(1, retry_after=None) <= 0.5


async def test_a_transient_error_with_a_retry_after_waits_what_the_server_asked() -> None:
    calls: list[float] = []

    async def flaky() -> str:
        calls.append(anyio.current_time())
        if len(calls) == 1:
            error = ModelConnectionError("503")
            error.retry_after = 0.2
            raise error
        return "ok"

    with anyio.fail_after(5):
        assert await call_with_retries(flaky, attempts=2, log=_Log(), what="t") == "ok"
    assert calls[1] - calls[0] >= 0.2


class _Log:
    """Enough of a structlog logger for ``call_with_retries``."""

    def warning(self, event: str, **fields: Any) -> None:
        assert event == "t_retry" and fields["error"] == "ModelConnectionError"

    def debug(self, event: str, **fields: Any) -> None:
        pytest.fail("a 5xx is not a throttle")


def test_an_assistant_message_alone_is_not_checked_for_calls() -> None:
    response = ModelResponse(items=(AssistantMessage(text="hi"),), finish_reason="length")
    assert response.truncated and cut_call_outputs(response, max_output_tokens=10) == {}
