"""Cached input tokens: read from both wires, simulated by the fake server's prefix cache, and
recorded per round; ``prompt_cache_key`` sent on both wires."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import anyio
import pytest
from stowage import Runtime, Settings
from stowage.core import (
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    RoundCommittedRecord,
    SystemMessage,
    UserMessage,
)
from stowage.model import ScriptedBrain
from stowage.model._openai_gateway import OpenAIGateway
from stowage.model._openai_wire import _usage
from stowage.policy import cache_key_for, session_cache_figures
from stowage.storage import JsonlStore
from stowage.testing import FakeOpenAIServer

WIRES: tuple[Literal["chat", "responses"], ...] = ("chat", "responses")


def test_cached_tokens_are_read_from_either_wire_and_default_to_zero() -> None:
    chat = {"prompt_tokens": 900, "completion_tokens": 5, "total_tokens": 905,
            "prompt_tokens_details": {"cached_tokens": 768}}  # fmt: skip
    responses = {"input_tokens": 900, "output_tokens": 5, "total_tokens": 905,
                 "input_tokens_details": {"cached_tokens": 640}}  # fmt: skip
    bare = {"prompt_tokens": 900, "completion_tokens": 5}
    chat_usage = _usage(chat, "prompt_tokens", "completion_tokens")
    responses_usage = _usage(responses, "input_tokens", "output_tokens")
    bare_usage = _usage(bare, "prompt_tokens", "completion_tokens")
    assert chat_usage is not None and chat_usage.cached_tokens == 768
    assert responses_usage is not None and responses_usage.cached_tokens == 640
    assert bare_usage is not None and bare_usage.cached_tokens == 0


def _request(n: int, key: str | None) -> ModelRequest:
    items: list[object] = [SystemMessage(text="be brief " * 100), UserMessage(text="go " * 300)]
    for i in range(n):
        items.append(FunctionCall(call_id=f"c{i}", name="read", arguments="{}"))
        items.append(FunctionCallOutput(call_id=f"c{i}", output="line of file\n" * 120))
    return ModelRequest(model="m", input=tuple(items), cache_key=key)  # type: ignore[arg-type]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("stream", [False, True])
async def test_the_fake_server_serves_the_common_prefix_in_whole_blocks_per_cache_key(
    wire: Literal["chat", "responses"], stream: bool
) -> None:
    with anyio.fail_after(30):
        async with FakeOpenAIServer(brain=ScriptedBrain()) as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api=wire)
            try:
                create = gateway.stream if stream else gateway.create
                first = await _collect(create, _request(1, "key-a"), stream)
                second = await _collect(create, _request(2, "key-a"), stream)
                other = await _collect(create, _request(3, "key-b"), stream)
            finally:
                await gateway.aclose()
        assert first.usage is not None and first.usage.cached_tokens == 0
        assert second.usage is not None and other.usage is not None
        cached = second.usage.cached_tokens
        assert cached > 0 and cached % 128 == 0
        # the whole first request is a prefix of the second: at most one block short of it
        assert first.usage.input_tokens - 128 < cached <= first.usage.input_tokens
        assert other.usage.cached_tokens == 0  # another key, another cache
        assert [b.get("prompt_cache_key") for b in server.requests] == ["key-a", "key-a", "key-b"]
        assert server.prefix_cache is not None
        assert server.prefix_cache.figures["key-a"]["prefix_breaks"] == 0


async def _collect(create: object, request: ModelRequest, stream: bool):  # type: ignore[no-untyped-def]
    from stowage.core import ResponseDone

    if not stream:
        return await create(request)  # type: ignore[operator]
    done = None
    async for event in create(request):  # type: ignore[operator]
        if isinstance(event, ResponseDone):
            done = event.response
    assert done is not None
    return done


async def test_a_changed_start_is_a_prefix_break_and_is_served_only_up_to_the_change() -> None:
    with anyio.fail_after(30):
        async with FakeOpenAIServer(brain=ScriptedBrain()) as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="chat")
            try:
                first = await gateway.create(_request(3, "k"))
                changed = _request(4, "k")
                items = list(changed.input)
                items[3] = FunctionCallOutput(call_id="c0", output="[stub]")
                second = await gateway.create(
                    ModelRequest(model="m", input=tuple(items), cache_key="k")
                )
            finally:
                await gateway.aclose()
        assert first.usage is not None and second.usage is not None
        # only the system, user message and first call survive: far less than the first request
        assert second.usage.cached_tokens < first.usage.input_tokens // 2
        assert server.prefix_cache is not None
        assert server.prefix_cache.figures["k"]["prefix_breaks"] == 1


@pytest.mark.parametrize("wire", WIRES)
async def test_a_session_sends_its_cache_key_and_records_cached_tokens_per_round(
    tmp_path: Path, wire: Literal["chat", "responses"]
) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=2)) as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api=wire)
            settings = Settings(model="scripted", store=tmp_path, wire_api=wire, tools="none")
            async with Runtime(settings, gateway=gateway) as rt:
                session = await rt.create("s1", system="sys " * 400)
                for n in range(3):
                    await session.send(f"turn {n}: " + "words " * 200)
            bodies = list(server.requests)
        key = cache_key_for(settings, "s1")
        assert key is not None and "s1" not in key
        assert {b.get("prompt_cache_key") for b in bodies} == {key}
        store = JsonlStore(tmp_path)
        try:
            records = (await store.read("s1")).records
        finally:
            await store.aclose()
        usages = [r.usage for r in records if isinstance(r, RoundCommittedRecord)]
        assert usages and all(u is not None for u in usages)
        assert usages[0] is not None and usages[0].cached_tokens == 0
        assert sum(u.cached_tokens for u in usages if u is not None) > 0
        figures = session_cache_figures(records)
        assert figures.reported and figures.breaks == 0 and 0 < figures.reuse < 1
        assert figures.uncached_tokens == figures.input_tokens - figures.cached_tokens


async def test_the_cache_key_can_be_turned_off_or_set(tmp_path: Path) -> None:
    assert cache_key_for(Settings(prompt_cache_key=""), "s1") is None
    assert cache_key_for(Settings(prompt_cache_key=None), "s1") is None
    assert cache_key_for(Settings(prompt_cache_key="team-7"), "s1") == "team-7"
    assert cache_key_for(Settings(), "s1") != cache_key_for(Settings(), "s2")
