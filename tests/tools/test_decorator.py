"""``@tool``: the schema, description and validation come from the function; sync functions run
in a thread; ``ToolError`` and timeouts become outputs; a ``ToolContext`` parameter gets the call's
context, and a sync tool sees cancellation through it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Literal

import anyio
import anyio.to_thread
import pytest
from stowage import (
    AssistantMessage,
    ConfigError,
    FunctionCall,
    ModelResponse,
    Runtime,
    Settings,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    tool,
)
from stowage.model._scripted import ScriptedModel
from stowage.tools import DecoratedTool, execute_call


@tool
async def search(query: str, limit: int = 5, mode: Literal["fast", "deep"] = "fast") -> str:
    """Search the notes for a phrase.

    Longer text that is still part of the description.

    Args:
        query: The phrase to look for.
        limit: How many hits
            to return at most.
    """
    return f"{query}:{limit}:{mode}"


def fc(name: str, arguments: str, call_id: str = "c1") -> FunctionCall:
    return FunctionCall(call_id=call_id, name=name, arguments=arguments)


def test_schema_name_and_description_come_from_the_signature_and_docstring() -> None:
    assert isinstance(search, Tool) and isinstance(search, DecoratedTool)
    spec = search.spec
    assert spec.name == "search"
    assert spec.description.startswith("Search the notes for a phrase.")
    assert "still part of the description" in spec.description
    assert "Args" not in spec.description
    props = spec.parameters["properties"]
    assert spec.parameters["required"] == ["query"]
    assert props["query"]["type"] == "string"
    assert props["query"]["description"] == "The phrase to look for."
    assert props["limit"]["default"] == 5
    assert props["limit"]["description"] == "How many hits to return at most."
    assert props["mode"]["enum"] == ["fast", "deep"]
    assert spec.parameters["additionalProperties"] is False


def test_name_description_and_timeout_can_be_given() -> None:
    @tool(name="lookup", description="Look it up.", timeout=2.5)
    def find(key: str) -> str:
        return key

    assert find.spec.name == "lookup" and find.spec.description == "Look it up."
    assert find.timeout == 2.5
    assert find("x") == "x"  # the decorated function is still callable as itself


def test_a_signature_a_model_cannot_see_is_refused() -> None:
    with pytest.raises(ConfigError, match="args"):

        @tool
        def variadic(*args: str) -> str:
            return ""

    with pytest.raises(ConfigError, match="timeout"):

        @tool(timeout=0)
        def instant() -> str:
            return ""


async def test_arguments_are_validated_and_coerced_before_the_call() -> None:
    registry = ToolRegistry([search])
    ok = await execute_call(
        registry, fc("search", '{"query": "x", "limit": "3"}'), default_timeout=5
    )
    assert ok.output == "x:3:fast" and not ok.is_error
    bad = await execute_call(
        registry, fc("search", '{"limit": 2, "mode": "slow"}'), default_timeout=5
    )
    assert bad.is_error
    assert "query: Field required" in bad.output and "mode" in bad.output
    extra = await execute_call(
        registry, fc("search", '{"query": "x", "nope": 1}'), default_timeout=5
    )
    assert extra.is_error and "nope" in extra.output


async def test_a_sync_tool_runs_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()
    ran_in: list[int] = []

    @tool
    def where() -> str:
        """Say where it ran."""
        ran_in.append(threading.get_ident())
        return "ran"

    out = await execute_call(ToolRegistry([where]), fc("where", ""), default_timeout=5)
    assert out.output == "ran"
    assert ran_in and ran_in[0] != loop_thread


async def test_tool_error_message_is_the_output_the_model_reads() -> None:
    @tool
    async def fail(path: str) -> str:
        raise ToolError(f"no such file: {path}; list the folder first")

    out = await execute_call(
        ToolRegistry([fail]), fc("fail", '{"path": "a.txt"}'), default_timeout=5
    )
    assert out.is_error
    assert out.output == "error: no such file: a.txt; list the folder first"


async def test_results_that_are_not_text_are_sent_as_json() -> None:
    @tool
    def stats(n: int) -> dict[str, int]:
        return {"n": n, "double": 2 * n}

    out = await execute_call(ToolRegistry([stats]), fc("stats", '{"n": 4}'), default_timeout=5)
    assert out.output == '{"n":4,"double":8}'


async def test_the_per_tool_timeout_wins_and_a_sync_tool_sees_the_cancellation() -> None:
    release = threading.Event()
    finished = threading.Event()
    seen: list[bool] = []

    @tool(timeout=0.2)
    def slow(ctx: ToolContext) -> str:
        release.wait(10)
        seen.append(ctx.cancelled)
        finished.set()
        return "late"

    with anyio.fail_after(10):
        out = await execute_call(ToolRegistry([slow]), fc("slow", "{}"), default_timeout=60)
        assert out.is_error and "timed out after 0.2 s" in out.output
        release.set()
        # the abandoned thread finishes on its own
        assert await anyio.to_thread.run_sync(finished.wait, 10)
    assert seen == [True]


async def test_a_context_parameter_is_not_in_the_schema_and_gets_the_session_and_round(
    tmp_path: Path,
) -> None:
    contexts: list[ToolContext] = []

    @tool
    async def note(text: str, context: ToolContext) -> str:
        """Keep a note."""
        contexts.append(context)
        return f"noted {text}"

    assert list(note.spec.parameters["properties"]) == ["text"]
    model = ScriptedModel.from_responses(
        [
            ModelResponse(items=(fc("note", '{"text": "a"}', "k1"),)),
            ModelResponse(items=(AssistantMessage(text="done"),)),
        ]
    )
    with anyio.fail_after(15):
        async with Runtime(
            Settings(store=tmp_path), gateway=model, tools=ToolRegistry([note])
        ) as rt:
            session = await rt.create("s1")
            result = await session.send("write it down")
    assert result.text == "done"
    (ctx,) = contexts
    assert (ctx.session_id, ctx.round, ctx.call_id, ctx.name) == ("s1", 1, "k1", "note")
    assert not ctx.cancelled
