"""The tool executor actor: runs one round's calls concurrently, never crashes on a tool."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import anyio
import structlog
from stowage.core import (
    Event,
    FunctionCall,
    FunctionCallOutput,
    ToolContext,
    ToolFinished,
    ToolStarted,
)
from stowage.tools import ToolRegistry, execute_call

from ._messages import RunTools
from ._queue import MailboxReceive

__all__ = ["INTERRUPTED_CALL", "run_tool_executor"]

INTERRUPTED_CALL = (
    "interrupted: the turn was stopped before this call finished; it may or may not have run"
)

_log = structlog.get_logger("stowage.tools")


async def run_tool_executor(
    session_id: str,
    registry: ToolRegistry,
    inbox: MailboxReceive[RunTools],
    publish: Callable[[Event], None],
    *,
    default_timeout: float,
    limiter: anyio.CapacityLimiter | None = None,
) -> None:
    """Serve ``RunTools`` until the inbox closes. The calls of one request run concurrently
    (at most ``limiter``'s tokens at once, shared by every session); every call gets exactly
    one output, in call order: a tool's exception, timeout, unknown name or bad arguments
    become error outputs, and calls the turn's interrupt stopped get an interrupted one."""
    log = _log.bind(session=session_id, actor="tool_executor")
    async with inbox:
        async for request in inbox:
            # what a call the turn's interrupt stopped keeps: it may or may not have run
            outputs: list[FunctionCallOutput] = [
                FunctionCallOutput(call_id=c.call_id, output=INTERRUPTED_CALL, is_error=True)
                for c in request.calls
            ]
            with request.interrupt.guard() if request.interrupt else nullcontext():
                if len(request.calls) == 1:
                    # one call (most rounds): run it here, not in a task group of one
                    await _run_one(
                        session_id,
                        registry,
                        request.calls[0],
                        request.round,
                        outputs,
                        0,
                        publish,
                        default_timeout,
                        limiter,
                    )
                else:
                    async with anyio.create_task_group() as tg:
                        for index, call in enumerate(request.calls):
                            tg.start_soon(
                                _run_one,
                                session_id,
                                registry,
                                call,
                                request.round,
                                outputs,
                                index,
                                publish,
                                default_timeout,
                                limiter,
                            )
            log.debug("tools_done", round=request.round, calls=len(outputs))
            request.reply.set(tuple(outputs))


async def _run_one(
    session_id: str,
    registry: ToolRegistry,
    call: FunctionCall,
    round_: int,
    outputs: list[FunctionCallOutput],
    index: int,
    publish: Callable[[Event], None],
    default_timeout: float,
    limiter: anyio.CapacityLimiter | None,
) -> None:
    publish(ToolStarted(session_id=session_id, round=round_, call_id=call.call_id, name=call.name))
    context = ToolContext(session_id=session_id, round=round_, call_id=call.call_id, name=call.name)
    if limiter is None:
        output = await execute_call(
            registry, call, default_timeout=default_timeout, context=context
        )
    else:
        async with limiter:
            output = await execute_call(
                registry, call, default_timeout=default_timeout, context=context
            )
    outputs[index] = output
    publish(
        ToolFinished(
            session_id=session_id,
            round=round_,
            call_id=call.call_id,
            name=call.name,
            is_error=output.is_error,
            output_chars=len(output.output),
        )
    )
