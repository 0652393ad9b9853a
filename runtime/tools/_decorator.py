"""``@tool``: a typed function becomes a tool, its signature and docstring the model's view."""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, overload

import anyio
import anyio.to_thread
import pydantic
import pydantic_core
from stowage.core import (
    ConfigError,
    Effect,
    EffectKind,
    ToolContext,
    ToolSpec,
    current_tool_context,
)

from ._registry import declared_effects

__all__ = ["DecoratedTool", "tool"]

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION_HEADER = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (text before the first section) and each argument's description."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            section, current = "args", None
            continue
        if _SECTION_HEADER.match(line):
            section, current = "other", None
            continue
        if section is None:
            summary.append(line)
        elif section == "args":
            match = _ARG_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            if match and indent <= 4:
                current = match.group(1).lstrip("*")
                args[current] = match.group(3).strip()
            elif current is not None and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), args


class DecoratedTool:
    """A tool made by ``@tool`` from a typed function. Calling it calls the function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        needs_approval: bool = False,
        touches: Mapping[str, EffectKind] | None = None,
    ) -> None:
        """``touches``: which arguments are paths the call reads, writes, ... or commands it
        runs (``{"path": "read"}``), for the approval policy and the trail of files touched.

        Raises ``ConfigError`` if the signature cannot make a schema (``*args``, an
        annotation pydantic cannot handle), ``timeout`` is not positive, or ``touches`` names
        an argument the function does not have."""
        tool_name = name or fn.__name__
        if timeout is not None and not timeout > 0:
            raise ConfigError(f"tool {tool_name!r}: timeout must be > 0 seconds, got {timeout}")
        self.__wrapped__ = fn
        self._timeout = timeout
        self.needs_approval = needs_approval
        self._touches = dict(touches or {})
        unknown = set(self._touches) - set(inspect.signature(fn).parameters)
        if unknown:
            raise ConfigError(
                f"tool {tool_name!r}: touches names {sorted(unknown)}, which are not its arguments"
            )
        self._is_async = inspect.iscoroutinefunction(fn)
        summary, arg_docs = _parse_docstring(fn.__doc__)
        try:
            hints = typing.get_type_hints(fn)
        except Exception as exc:
            raise ConfigError(f"tool {tool_name!r}: cannot read its annotations: {exc}") from exc
        fields: dict[str, Any] = {}
        self._context_param: str | None = None
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(
                    f"tool {tool_name!r}: *{param.name} cannot be described to a model; "
                    "give every argument a name"
                )
            annotation = hints.get(param.name, Any)
            if annotation is ToolContext:
                self._context_param = param.name
                continue
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (
                annotation,
                pydantic.Field(default, description=arg_docs.get(param.name)),
            )
        try:
            self._args_model = pydantic.create_model(
                f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
            )
            schema = self._args_model.model_json_schema()
        except Exception as exc:
            raise ConfigError(
                f"tool {tool_name!r}: cannot build its argument schema: {exc}"
            ) from exc
        schema.pop("title", None)
        self._spec = ToolSpec(name=tool_name, description=description or summary, parameters=schema)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"DecoratedTool(name={self._spec.name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    @property
    def spec(self) -> ToolSpec:
        """Name, description and argument schema, as the model sees them."""
        return self._spec

    def effects(self, arguments: Any) -> tuple[Effect, ...]:
        """What a call with these decoded JSON arguments touches, as ``touches`` declares."""
        return declared_effects(self._touches, arguments)

    @property
    def timeout(self) -> float | None:
        """Seconds this tool may take; ``None`` uses the executor's default."""
        return self._timeout

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The validated keyword arguments; raises ``ValueError`` naming each problem."""
        try:
            model = self._args_model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            problems = []
            for error in exc.errors(include_url=False):
                where = ".".join(str(part) for part in error["loc"]) or "arguments"
                problems.append(f"{where}: {error['msg']}")
            raise ValueError("; ".join(problems)) from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    async def run(self, arguments: dict[str, Any]) -> str:
        """Call the function (a sync one in a worker thread); a result that is not text is
        sent to the model as JSON. Raises whatever the function raises."""
        kwargs = dict(arguments)
        context = current_tool_context.get()
        if self._context_param is not None:
            if context is None:  # run outside an executor: a context of its own
                context = ToolContext(session_id="", round=0, call_id="", name=self._spec.name)
            kwargs[self._context_param] = context
        if self._is_async:
            result = await self.__wrapped__(**kwargs)
        else:
            call = functools.partial(self.__wrapped__, **kwargs)
            try:
                # a thread cannot be stopped: on cancel it is abandoned and told via context
                result = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                if context is not None:
                    context.cancel()
                raise
        if isinstance(result, str):
            return result
        if result is None:
            return ""
        return pydantic_core.to_json(result).decode()


@overload
def tool(fn: Callable[..., Any], /) -> DecoratedTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    needs_approval: bool = False,
    touches: Mapping[str, EffectKind] | None = None,
) -> Callable[[Callable[..., Any]], DecoratedTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    needs_approval: bool = False,
    touches: Mapping[str, EffectKind] | None = None,
) -> DecoratedTool | Callable[[Callable[..., Any]], DecoratedTool]:
    """Make a tool of a typed function: ``@tool`` or ``@tool(timeout=5, name="...")``.

    ``description`` defaults to the docstring's text before its sections; each argument's
    description comes from its ``Args:`` line. Raise ``ToolError`` inside it to hand the model
    a message to read as the output. ``needs_approval`` makes every call wait for a person's
    approval. ``touches`` says which arguments are paths or commands (``{"path": "read"}``,
    ``{"cmd": "run"}``): the approval policy judges the call on them and the session's trail
    of files touched keeps them. Raises ``ConfigError`` if the function cannot be described
    to a model.
    """

    def make(f: Callable[..., Any]) -> DecoratedTool:
        return DecoratedTool(
            f,
            name=name,
            description=description,
            timeout=timeout,
            needs_approval=needs_approval,
            touches=touches,
        )

    return make(fn) if fn is not None else make
