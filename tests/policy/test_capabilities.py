"""Requests shaped by what the model can take: parallel tool calls, and how many tools."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel
from stowage import ConfigError, FunctionTool, Runtime, Settings, ToolRegistry
from stowage.core import ModelRequest, ToolSpec, UserMessage
from stowage.model._openai_wire import chat_body, responses_body
from stowage.model._scripted import ScriptedModel
from stowage.policy import (
    Capabilities,
    capabilities_for,
    capabilities_from_model_info,
    check_tool_count,
)
from stowage.testing import FakeOpenAIServer


class NoArgs(BaseModel):
    pass


def tools(n: int) -> ToolRegistry:
    async def noop(args: NoArgs) -> str:
        return "ok"

    return ToolRegistry(
        [
            FunctionTool(name=f"t{i}", description="a tool", args_model=NoArgs, fn=noop)
            for i in range(n)
        ]
    )


def test_the_registry_the_endpoint_and_the_settings_each_say_in_their_order() -> None:
    assert capabilities_for(Settings(model="gpt-4o-2024-08-06")) == Capabilities(
        parallel_tool_calls=True, max_tools=128
    )
    assert capabilities_for(Settings(model="gpt-4")).parallel_tool_calls is False
    # a reasoning model that refuses the parameter is told nothing
    assert capabilities_for(Settings(model="o1")).parallel_tool_calls is None
    assert capabilities_for(Settings(model="my-local-model")) == Capabilities()
    found = capabilities_from_model_info(
        {"id": "x", "model_info": {"supports_parallel_function_calling": False, "max_tools": 8}}
    )
    assert found == Capabilities(parallel_tool_calls=False, max_tools=8)
    assert capabilities_for(Settings(model="gpt-4o"), found).max_tools == 8
    chosen = Settings(model="gpt-4o", parallel_tool_calls=False, max_tools=300)
    assert capabilities_for(chosen, found) == Capabilities(parallel_tool_calls=False, max_tools=300)
    assert capabilities_from_model_info({"id": "x"}) == Capabilities()


@pytest.mark.parametrize("body", [chat_body, responses_body])
def test_the_wire_says_parallel_tool_calls_only_with_tools_and_when_known(body: object) -> None:
    spec = ToolSpec(name="t", description="d", parameters={"type": "object"})
    base = ModelRequest(model="m", input=(UserMessage(text="hi"),), tools=(spec,))
    make = body  # type: ignore[assignment]
    assert "parallel_tool_calls" not in make(base, stream=False)  # type: ignore[operator]
    one = ModelRequest(model="m", input=base.input, tools=(spec,), parallel_tool_calls=False)
    assert make(one, stream=False)["parallel_tool_calls"] is False  # type: ignore[operator]
    bare = ModelRequest(model="m", input=base.input, parallel_tool_calls=False)
    assert "parallel_tool_calls" not in make(bare, stream=False)  # type: ignore[operator]


async def test_a_model_without_parallel_calls_is_asked_for_one_a_round(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with FakeOpenAIServer() as server:
            settings = Settings(store=tmp_path, model="gpt-4", base_url=server.base_url,
                                api_key="k", tools="none")  # fmt: skip
            async with Runtime(settings, tools=tools(2)) as rt:
                await (await rt.create("s1")).send("hello")
            assert server.requests and all(
                b["parallel_tool_calls"] is False for b in server.requests if b.get("tools")
            )


async def test_more_tools_than_the_model_takes_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    settings = Settings(store=tmp_path, model="scripted", max_tools=3)
    check_tool_count(settings, 3)
    with pytest.raises(ConfigError, match="at most 3 tools a request and this session has 4"):
        check_tool_count(settings, 4)
    async with Runtime(settings, gateway=ScriptedModel(), tools=tools(4)) as rt:
        with pytest.raises(ConfigError, match="at most 3 tools"):
            await rt.create("s1")
    assert not (tmp_path / "s1.jsonl").exists()
