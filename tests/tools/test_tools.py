"""Tools and the executor: every call ends in an output, errors included; order and limits hold."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel
from stowage.core._errors import ConfigError
from stowage.core._items import FunctionCall, FunctionCallOutput
from stowage.core._tool import Tool
from stowage.tools._registry import (
    FunctionTool,
    ToolError,
    ToolRegistry,
    execute_call,
    execute_calls,
)


class EchoArgs(BaseModel):
    text: str
    times: int = 1


class NoArgs(BaseModel):
    pass


async def echo(args: EchoArgs) -> str:
    return args.text * args.times


def echo_tool(timeout: float | None = None) -> FunctionTool[EchoArgs]:
    return FunctionTool(
        name="echo", description="Repeat text.", args_model=EchoArgs, fn=echo, timeout=timeout
    )


def fc(name: str, arguments: str, call_id: str = "c1") -> FunctionCall:
    return FunctionCall(call_id=call_id, name=name, arguments=arguments)


def registry_with(*tools: Tool) -> ToolRegistry:
    return ToolRegistry(tools)


# FunctionTool and ToolRegistry


def test_function_tool_spec_uses_the_model_json_schema() -> None:
    tool = echo_tool()
    assert isinstance(tool, Tool)
    assert tool.spec.name == "echo"
    assert tool.spec.description == "Repeat text."
    assert tool.spec.parameters == EchoArgs.model_json_schema()
    assert tool.timeout is None


def test_function_tool_validate_raises_value_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match="text: Field required"):
        echo_tool().validate({"times": 2})


def test_function_tool_rejects_non_positive_timeout() -> None:
    with pytest.raises(ConfigError, match="timeout"):
        echo_tool(timeout=0)


def test_registry_lists_names_and_specs_in_order_added() -> None:
    other = FunctionTool(name="other", description="d", args_model=NoArgs, fn=_ok)
    registry = registry_with(echo_tool(), other)
    assert registry.names() == ("echo", "other")
    assert [spec.name for spec in registry.specs()] == ["echo", "other"]
    assert "echo" in registry and "missing" not in registry
    assert len(registry) == 2
    assert registry.get("other") is other
    assert registry.get("missing") is None


def test_registry_refuses_duplicate_names() -> None:
    registry = registry_with(echo_tool())
    with pytest.raises(ConfigError, match="echo"):
        registry.add(echo_tool())


async def _ok(args: NoArgs) -> str:
    return "ok"


# execute_call


async def test_execute_call_returns_the_tool_text() -> None:
    with anyio.fail_after(10):
        out = await execute_call(
            registry_with(echo_tool()), fc("echo", '{"text": "ab", "times": 2}'), default_timeout=5
        )
    assert out == FunctionCallOutput(call_id="c1", output="abab", is_error=False)


async def test_execute_call_treats_empty_arguments_as_no_arguments() -> None:
    tool = FunctionTool(name="ping", description="d", args_model=NoArgs, fn=_ok)
    with anyio.fail_after(10):
        out = await execute_call(registry_with(tool), fc("ping", ""), default_timeout=5)
    assert out.output == "ok"
    assert not out.is_error


async def test_execute_call_unknown_tool_names_it_and_lists_available() -> None:
    with anyio.fail_after(10):
        out = await execute_call(registry_with(echo_tool()), fc("rm_rf", "{}"), default_timeout=5)
    assert out.is_error
    assert out.call_id == "c1"
    assert out.output.startswith("error:")
    assert "'rm_rf'" in out.output
    assert "available tools: echo" in out.output


async def test_execute_call_invalid_json_quotes_the_json_error() -> None:
    with anyio.fail_after(10):
        out = await execute_call(
            registry_with(echo_tool()), fc("echo", '{"text": '), default_timeout=5
        )
    assert out.is_error
    assert out.output.startswith("error:")
    assert "not valid JSON" in out.output
    assert "Expecting value" in out.output


async def test_execute_call_schema_failure_gives_pydantic_message() -> None:
    with anyio.fail_after(10):
        out = await execute_call(
            registry_with(echo_tool()),
            fc("echo", '{"text": "a", "times": "many"}'),
            default_timeout=5,
        )
    assert out.is_error
    assert out.output.startswith("error: invalid arguments for echo:")
    assert "times: Input should be a valid integer" in out.output


async def test_execute_call_tool_exception_gives_type_and_message() -> None:
    async def boom(args: NoArgs) -> str:
        raise RuntimeError("disk on fire")

    tool = FunctionTool(name="boom", description="d", args_model=NoArgs, fn=boom)
    with anyio.fail_after(10):
        out = await execute_call(registry_with(tool), fc("boom", "{}"), default_timeout=5)
    assert out.is_error
    assert out.output == "error: boom failed: RuntimeError: disk on fire"


async def test_execute_call_tool_error_message_is_given_as_is() -> None:
    async def refuse(args: NoArgs) -> str:
        raise ToolError("no such file: 'x'")

    tool = FunctionTool(name="refuse", description="d", args_model=NoArgs, fn=refuse)
    with anyio.fail_after(10):
        out = await execute_call(registry_with(tool), fc("refuse", "{}"), default_timeout=5)
    assert out.is_error
    assert out.output == "error: no such file: 'x'"


async def test_execute_call_non_text_result_is_an_error() -> None:
    async def number(args: NoArgs) -> str:
        return 42  # type: ignore[return-value]

    tool = FunctionTool(name="number", description="d", args_model=NoArgs, fn=number)
    with anyio.fail_after(10):
        out = await execute_call(registry_with(tool), fc("number", "{}"), default_timeout=5)
    assert out.is_error
    assert "returned int" in out.output


async def _hang(args: NoArgs) -> str:
    await anyio.Event().wait()
    return "never"


async def test_execute_call_times_out_with_default_timeout() -> None:
    tool = FunctionTool(name="hang", description="d", args_model=NoArgs, fn=_hang)
    with anyio.fail_after(10):
        out = await execute_call(registry_with(tool), fc("hang", "{}"), default_timeout=0.05)
    assert out.is_error
    assert out.output == "error: hang timed out after 0.05 s"


async def test_execute_call_tool_timeout_overrides_default() -> None:
    tool = FunctionTool(name="hang", description="d", args_model=NoArgs, fn=_hang, timeout=0.05)
    with anyio.fail_after(10):
        out = await execute_call(registry_with(tool), fc("hang", "{}"), default_timeout=60)
    assert out.output == "error: hang timed out after 0.05 s"


async def test_execute_call_lets_the_callers_cancellation_through() -> None:
    tool = FunctionTool(name="hang", description="d", args_model=NoArgs, fn=_hang)
    outputs: list[FunctionCallOutput] = []
    with anyio.fail_after(10):
        with anyio.move_on_after(0.05) as scope:
            outputs.append(
                await execute_call(registry_with(tool), fc("hang", "{}"), default_timeout=60)
            )
    assert scope.cancelled_caught
    assert outputs == []


# execute_calls


async def test_execute_calls_runs_concurrently_and_keeps_call_order() -> None:
    second_done = anyio.Event()

    async def first(args: NoArgs) -> str:
        await second_done.wait()  # finishes only after the later call: needs concurrency
        return "first"

    async def second(args: NoArgs) -> str:
        second_done.set()
        return "second"

    registry = registry_with(
        FunctionTool(name="first", description="d", args_model=NoArgs, fn=first),
        FunctionTool(name="second", description="d", args_model=NoArgs, fn=second),
    )
    calls = [fc("first", "{}", "a"), fc("nope", "{}", "b"), fc("second", "{}", "c")]
    with anyio.fail_after(10):
        outputs = await execute_calls(registry, calls, default_timeout=5)
    assert [o.call_id for o in outputs] == ["a", "b", "c"]
    assert [o.output for o in outputs][0::2] == ["first", "second"]
    assert outputs[1].is_error


async def test_execute_calls_of_nothing_is_empty() -> None:
    with anyio.fail_after(10):
        assert await execute_calls(ToolRegistry(), [], default_timeout=5) == ()


async def test_execute_calls_respects_the_limiter() -> None:
    active = 0
    peak = 0
    two_running = anyio.Event()

    async def work(args: NoArgs) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active >= 2:
            two_running.set()
        await two_running.wait()
        for _ in range(5):  # give any call the limiter wrongly let in a chance to start
            await anyio.lowlevel.checkpoint()
        active -= 1
        return "done"

    registry = registry_with(FunctionTool(name="work", description="d", args_model=NoArgs, fn=work))
    calls = [fc("work", "{}", f"c{i}") for i in range(6)]
    with anyio.fail_after(10):
        outputs = await execute_calls(
            registry, calls, default_timeout=5, limiter=anyio.CapacityLimiter(2)
        )
    assert peak == 2
    assert [o.output for o in outputs] == ["done"] * 6
    assert [o.call_id for o in outputs] == [f"c{i}" for i in range(6)]
