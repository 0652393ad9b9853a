"""The pieces a ``Runtime`` is put together from: the limiters its limits make, a gateway that
could not be built, the after-compaction hook as a bus subscriber, and the reading of a
failure for a fenced append."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TypedDict

import anyio
import structlog
from stowage.core import (
    AfterCompaction,
    CallLimiter,
    ConfigError,
    Event,
    FencingError,
    HistoryCompacted,
    ModelRequest,
    ModelResponse,
    RuntimeLimits,
    Settings,
    StreamEvent,
)

__all__ = ["Limiters", "UnbuiltGateway", "after_hook", "fencing_error", "limiters", "tool_fields"]

_log = structlog.get_logger("stowage.runtime")


class Limiters(TypedDict):
    """The limiters a runtime's sessions share, by name; None: unlimited."""

    model: CallLimiter | None
    compaction: anyio.CapacityLimiter | None
    tools: anyio.CapacityLimiter | None
    running: anyio.CapacityLimiter | None


def limiters(limits: RuntimeLimits) -> Limiters:
    """The limiters that keep ``limits``."""

    def capacity(total: int | None) -> anyio.CapacityLimiter | None:
        return anyio.CapacityLimiter(total) if total is not None else None

    return Limiters(
        model=CallLimiter(limits.max_model_calls) if limits.max_model_calls is not None else None,
        compaction=capacity(limits.max_compactions),
        tools=capacity(limits.max_tool_calls),
        running=capacity(limits.max_running_sessions),
    )


class UnbuiltGateway:
    """The gateway of a runtime whose settings cannot make one: every call raises why."""

    def __init__(self, error: ConfigError) -> None:
        self.error = error

    async def create(self, request: ModelRequest) -> ModelResponse:
        raise self.error

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        raise self.error
        yield  # pragma: no cover - makes this an async generator

    async def aclose(self) -> None:
        return None


def fencing_error(exc: BaseException) -> FencingError | None:
    """The ``FencingError`` in ``exc``, its exception groups or its causes, if any."""
    if isinstance(exc, FencingError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = fencing_error(inner)
            if found is not None:
                return found
    if exc.__cause__ is not None:
        return fencing_error(exc.__cause__)
    return None


def after_hook(hook: AfterCompaction) -> Callable[[Event], None]:
    """A bus subscriber calling ``hook`` on each ``HistoryCompacted``."""

    def deliver(event: Event) -> None:
        if isinstance(event, HistoryCompacted):
            try:
                hook(event)
            except Exception as exc:
                _log.warning("compaction_hook_failed", hook="after", error=repr(exc))

    return deliver


def tool_fields(settings: Settings) -> tuple[object, ...]:
    """The settings the built-in tools are made from."""
    return (
        settings.tools,
        settings.workspace,
        settings.sandbox,
        settings.sandbox_network,
        settings.command_env,
    )
