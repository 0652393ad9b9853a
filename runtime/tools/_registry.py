"""Tools and their execution: a model's tool call always ends in an output, never a crash."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import anyio
import pydantic
from stowage.core import (
    ConfigError,
    Effect,
    EffectKind,
    FunctionCall,
    FunctionCallOutput,
    StowageError,
    Tool,
    ToolContext,
    ToolSpec,
    current_tool_context,
)

__all__ = [
    "FunctionTool",
    "ToolError",
    "ToolRegistry",
    "after_crash",
    "call_preview",
    "call_effects",
    "declared_effects",
    "trail_ops",
    "execute_call",
    "execute_calls",
]

ArgsT = TypeVar("ArgsT", bound=pydantic.BaseModel)
_R = TypeVar("_R")


class ToolError(StowageError):
    """Raised by a tool to report a failure whose message the model should read as is."""


class FunctionTool(Generic[ArgsT]):
    """A tool made of an async function and a pydantic model of its arguments.

    The argument schema the model sees is ``args_model.model_json_schema()``; ``run`` gets the
    validated model instance.
    """

    __slots__ = (
        "_after_crash",
        "_args_model",
        "_effects",
        "_fn",
        "_preview",
        "_spec",
        "_timeout",
        "needs_approval",
    )

    def __init__(
        self,
        *,
        name: str,
        description: str,
        args_model: type[ArgsT],
        fn: Callable[[ArgsT], Awaitable[str]],
        timeout: float | None = None,
        needs_approval: bool = False,
        effects: Callable[[ArgsT], tuple[Effect, ...]] | None = None,
        after_crash: Callable[[ArgsT], bool | None] | None = None,
        preview: Callable[[ArgsT], str] | None = None,
    ) -> None:
        """``needs_approval``: every call waits for a person's approval before it runs.
        ``effects``: what a call touches (the paths it reads or writes, the command it runs),
        for the approval policy and the trail of files touched. ``after_crash``: whether a
        call whose process was killed before its output was logged had been applied (True),
        or not (False), as the tool finds it; None: it cannot tell. ``preview``: what a call
        will do, as a person approves it (the diff of an edit, the full command line).

        Raises ``ConfigError`` if ``name`` is empty or ``timeout`` is not positive."""
        if not name:
            raise ConfigError("a tool needs a non-empty name")
        if timeout is not None and not timeout > 0:
            raise ConfigError(f"tool {name!r}: timeout must be > 0 seconds, got {timeout}")
        self.needs_approval = needs_approval
        self._effects = effects
        self._after_crash = after_crash
        self._preview = preview
        self._args_model = args_model
        self._fn = fn
        self._timeout = timeout
        self._spec = ToolSpec(
            name=name, description=description, parameters=args_model.model_json_schema()
        )

    def __repr__(self) -> str:
        return f"FunctionTool(name={self._spec.name!r}, args_model={self._args_model.__name__})"

    @property
    def spec(self) -> ToolSpec:
        """Name, description and argument schema, as the model sees them."""
        return self._spec

    @property
    def timeout(self) -> float | None:
        """Seconds this tool may take; ``None`` uses the executor's default."""
        return self._timeout

    def validate(self, arguments: Any) -> ArgsT:
        """Validate decoded JSON arguments.

        Raises ``ValueError`` with one readable line per problem if they do not fit the model.
        """
        try:
            return self._args_model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise ValueError(_describe_validation_error(exc)) from None

    async def run(self, arguments: ArgsT) -> str:
        """Call the function with validated arguments; raises whatever it raises."""
        return await self._fn(arguments)

    def effects(self, arguments: Any) -> tuple[Effect, ...]:
        """What a call with these decoded JSON arguments touches (none it says, or when the
        arguments do not validate: such a call only gets an error output). Raises nothing."""
        return self._ask(self._effects, arguments) or ()

    def preview(self, arguments: Any) -> str | None:
        """What a call with these decoded JSON arguments will do, for a person to approve;
        None when the tool says nothing or the arguments do not validate. Raises nothing."""
        return self._ask(self._preview, arguments)

    def after_crash(self, arguments: Any) -> bool | None:
        """Whether a call with these decoded JSON arguments, whose process was killed before
        its output was logged, had been applied, as this tool finds it; None: it cannot
        tell. Raises nothing."""
        return self._ask(self._after_crash, arguments)

    def _ask(self, hook: Callable[[ArgsT], _R] | None, arguments: Any) -> _R | None:
        """What ``hook`` answers for the validated ``arguments``; None when it cannot."""
        if hook is None:
            return None
        try:
            return hook(self._args_model.model_validate(arguments))
        except Exception:
            return None


def _describe_validation_error(exc: pydantic.ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def _ask(tool: Tool | None, method: str, call: FunctionCall) -> object:
    """What ``tool``'s optional ``method`` says of ``call``'s arguments (None: nothing)."""
    asked = getattr(tool, method, None)
    if asked is None:
        return None
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    return asked(arguments)


def call_effects(tool: Tool | None, call: FunctionCall) -> tuple[Effect, ...]:
    """What ``call`` touches, as its tool says (none for a tool that says nothing, or for
    arguments that are not JSON). Raises nothing."""
    found = _ask(tool, "effects", call)
    return tuple(found) if isinstance(found, tuple | list) else ()


def call_preview(tool: Tool | None, call: FunctionCall) -> str | None:
    """What ``call`` will do, as its tool shows it to a person approving it (None: the tool
    shows nothing). Raises nothing; may read files (run it off the event loop)."""
    found = _ask(tool, "preview", call)
    return found if isinstance(found, str) else None


def declared_effects(touches: Mapping[str, EffectKind], arguments: Any) -> tuple[Effect, ...]:
    """What a call touches, from the tool's ``touches`` declaration."""
    if not isinstance(arguments, dict):
        return ()
    found: list[Effect] = []
    for name, kind in touches.items():
        value = arguments.get(name)
        values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        for target in values:
            if isinstance(target, str) and target.strip():
                found.append(Effect(kind, target if kind == "run" else os.path.normpath(target)))
    return tuple(found)


def trail_ops(
    registry: ToolRegistry, calls: Iterable[FunctionCall], outputs: Iterable[FunctionCallOutput]
) -> list[dict[str, str]]:
    """The ``touch`` ops of a round (the trail of files touched, ``stowage.core``'s protected
    state): each path a call that succeeded says it touched, each command it ran with how it
    ended. A call that failed, was refused, denied or interrupted touched nothing. Raises
    nothing."""
    ended = {o.call_id: o for o in outputs if not o.is_error}
    ops: list[dict[str, str]] = []
    for call in calls:
        output = ended.get(call.call_id)
        if output is None:
            continue
        for effect in call_effects(registry.get(call.name), call):
            op = {"op": "touch", "kind": effect.kind, "target": effect.target}
            if effect.kind == "run":
                first = output.output.split("\n", 1)[0]
                if first.startswith(("exit status", "timed out")):
                    op["status"] = first
            ops.append(op)
    return ops


def after_crash(tool: Tool | None, call: FunctionCall) -> bool | None:
    """Whether ``call``, killed with its process before its output was logged, had been
    applied, as its tool finds it (None: it cannot tell). Raises nothing."""
    found = _ask(tool, "after_crash", call)
    return found if isinstance(found, bool) else None


class ToolRegistry:
    """The tools of a session, by name, in the order they were added."""

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        """Raises ``ConfigError`` if two tools share a name."""
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Register ``tool``. Raises ``ConfigError`` if its name is already taken."""
        name = tool.spec.name
        if name in self._tools:
            raise ConfigError(f"a tool named {name!r} is already registered")
        self._tools[name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        """The names of all tools, in the order added."""
        return tuple(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        """The specs of all tools, in the order added, as sent to the model."""
        return tuple(tool.spec for tool in self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"


def _error(call: FunctionCall, message: str) -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call.call_id, output=f"error: {message}", is_error=True)


async def execute_call(
    registry: ToolRegistry,
    call: FunctionCall,
    *,
    default_timeout: float,
    context: ToolContext | None = None,
) -> FunctionCallOutput:
    """Run one tool call and return its output; every failure becomes an error output.

    ``context`` is what the tool sees as ``current_tool_context`` while it runs (one is made
    if not given); it is marked cancelled when the call times out or is cancelled.

    Error outputs have ``is_error=True`` and text starting with ``error:``. Raises nothing but
    the cancellation of the calling task.
    """
    tool = registry.get(call.name)
    if tool is None:
        available = ", ".join(registry.names()) or "none"
        return _error(call, f"unknown tool {call.name!r}; available tools: {available}")
    # Some models send "" for a tool without arguments.
    raw = call.arguments if call.arguments.strip() else "{}"
    try:
        decoded = json.loads(raw)
    except json.JSONDecodeError as exc:
        return _error(call, f"arguments for {call.name} are not valid JSON: {exc}")
    try:
        arguments = tool.validate(decoded)
    except Exception as exc:  # a Tool may raise anything from validate; the model must hear it
        return _error(call, f"invalid arguments for {call.name}: {exc}")
    timeout = tool.timeout if tool.timeout is not None else default_timeout
    if context is None:
        context = ToolContext(session_id="", round=0, call_id=call.call_id, name=call.name)
    result: object = None
    token = current_tool_context.set(context)
    try:
        with anyio.move_on_after(timeout) as scope:
            result = await tool.run(arguments)
    except anyio.get_cancelled_exc_class():
        context.cancel()
        raise
    except ToolError as exc:
        return _error(call, str(exc))
    except Exception as exc:  # the point of the executor: a failing tool is an output
        return _error(call, f"{call.name} failed: {type(exc).__name__}: {exc}")
    finally:
        current_tool_context.reset(token)
    if scope.cancelled_caught:
        context.cancel()
        return _error(call, f"{call.name} timed out after {timeout:g} s")
    if not isinstance(result, str):
        return _error(call, f"{call.name} returned {type(result).__name__}, not text")
    return FunctionCallOutput(call_id=call.call_id, output=result)


async def execute_calls(
    registry: ToolRegistry,
    calls: Sequence[FunctionCall],
    *,
    default_timeout: float,
    limiter: anyio.CapacityLimiter | None = None,
) -> tuple[FunctionCallOutput, ...]:
    """Run ``calls`` concurrently, at most ``limiter.total_tokens`` at once if given."""
    outputs: list[FunctionCallOutput | None] = [None] * len(calls)

    async def run_one(index: int, call: FunctionCall) -> None:
        if limiter is None:
            outputs[index] = await execute_call(registry, call, default_timeout=default_timeout)
        else:
            async with limiter:
                outputs[index] = await execute_call(registry, call, default_timeout=default_timeout)

    async with anyio.create_task_group() as tg:
        for index, call in enumerate(calls):
            tg.start_soon(run_one, index, call)
    done = tuple(output for output in outputs if output is not None)
    assert len(done) == len(calls)  # every task wrote its slot or the group raised
    return done
