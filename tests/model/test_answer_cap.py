"""An answer larger than ``max_answer_chars`` is refused, and the gateway stops reading it.

Against the fake OpenAI server over loopback HTTP, on both wire APIs, streamed and whole,
through aiohttp and through the openai SDK's public API: a 2 MB answer
with a 100,000-character cap raises ``ResponseTooLarge`` before the whole of it is read; an
answer within the cap comes through whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

import anyio
import pytest
from stowage.core import (
    AssistantMessage,
    FunctionCall,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ResponseDone,
    ResponseTooLarge,
    Settings,
    TextDelta,
    Usage,
    UserMessage,
)
from stowage.model import make_gateway
from stowage.model._openai_gateway import OpenAIGateway
from stowage.testing import FakeOpenAIServer

WireApi = Literal["chat", "responses"]
CAP = 100_000
BIG = 2_000_000
REQUEST = ModelRequest(model="m", input=(UserMessage(text="write a lot"),))
#: what may reach the caller past the cap: the text of the last read, at most what aiohttp
#: buffers of a body before it stops reading from the socket
READ_SLACK = 1024 * 1024
SENDINGS = [
    pytest.param({"http_client": "aiohttp"}, id="aiohttp"),
    pytest.param({"http_client": "sdk"}, id="sdk"),
]


def answering(text: str, *, arguments: str = "") -> Callable[[ModelRequest], ModelResponse]:
    """A brain that answers ``text`` (and one call with ``arguments``, when given), reporting
    10 output tokens whatever its size, as a broken endpoint might."""

    def brain(request: ModelRequest) -> ModelResponse:
        items: tuple[AssistantMessage | FunctionCall, ...] = (AssistantMessage(text=text),)
        if arguments:
            items += (FunctionCall(call_id="c1", name="write", arguments=arguments),)
        return ModelResponse(
            items=items,
            usage=Usage(input_tokens=5, output_tokens=10, total_tokens=15),
            model=request.model,
        )

    return brain


async def _answer(gateway: OpenAIGateway, *, stream: bool, seen: list[str]) -> ModelResponse | None:
    """One call; the text deltas that came before it ended go to ``seen``."""
    if not stream:
        return await gateway.create(REQUEST)
    response: ModelResponse | None = None
    async for event in gateway.stream(REQUEST):
        if isinstance(event, TextDelta):
            seen.append(event.text)
        elif isinstance(event, ResponseDone):
            response = event.response
    return response


@pytest.mark.parametrize("sending", SENDINGS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("wire_api", ["chat", "responses"])
async def test_a_2_mb_answer_past_a_100k_cap_is_refused_before_it_is_all_read(
    wire_api: WireApi, stream: bool, sending: dict[str, str]
) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer(brain=answering("w" * BIG)) as server:
            url = server.base_url
            gateway = OpenAIGateway(
                base_url=url,
                api_key="sk-test",
                wire_api=wire_api,
                max_answer_chars=CAP,
                **sending,
            )
            seen: list[str] = []
            try:
                with pytest.raises(ResponseTooLarge) as raised:
                    await _answer(gateway, stream=stream, seen=seen)
            finally:
                await gateway.aclose()
    assert isinstance(raised.value, ModelResponseError) and raised.value.transient
    assert "max_answer_chars" in str(raised.value) and url in str(raised.value)
    # a stream stops within one read of the cap: what reached the caller is about the cap
    assert sum(map(len, seen)) <= CAP + READ_SLACK
    if not stream and sending["http_client"] == "aiohttp":
        # a whole body is read only as far as an answer within the cap could reach
        found = re.search(r"\(([\d,]+) read\)", str(raised.value))
        assert found is not None
        read = int(found[1].replace(",", ""))
        assert gateway.max_body_bytes < read < BIG


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("wire_api", ["chat", "responses"])
async def test_call_arguments_count_towards_the_cap(wire_api: WireApi, stream: bool) -> None:
    brain = answering("short", arguments='{"text": "' + "a" * (CAP + 10) + '"}')
    with anyio.fail_after(30):
        async with FakeOpenAIServer(brain=brain) as server:
            gateway = OpenAIGateway(
                base_url=server.base_url, api_key="sk-test", wire_api=wire_api,
                max_answer_chars=CAP,
            )  # fmt: skip
            try:
                with pytest.raises(ResponseTooLarge, match="max_answer_chars"):
                    await _answer(gateway, stream=stream, seen=[])
            finally:
                await gateway.aclose()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("wire_api", ["chat", "responses"])
async def test_an_answer_within_the_cap_comes_through_whole(
    wire_api: WireApi, stream: bool
) -> None:
    text = "v" * (CAP - 20)
    with anyio.fail_after(30):
        async with FakeOpenAIServer(brain=answering(text)) as server:
            gateway = make_gateway(
                Settings(
                    model="m", base_url=server.base_url, api_key="sk-test", wire_api=wire_api,
                    max_answer_chars=CAP,
                )
            )  # fmt: skip
            assert isinstance(gateway, OpenAIGateway) and gateway.max_answer_chars == CAP
            try:
                response = await _answer(gateway, stream=stream, seen=[])
            finally:
                await gateway.aclose()
    assert response is not None and response.text == text
