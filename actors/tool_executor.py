"""The tool executor actor: runs one round's calls concurrently, never crashes on a tool.

A round of one call (most rounds) is run by ``run_calls`` in the sampler's own task: the
executor's hop buys nothing for a single call, so the executor is started only for a run of
the actors that has several calls to run at once (``ExecutorInbox``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import TypeAlias

import anyio
import structlog
from stowage.core import (
    Event,
    FunctionCall,
    FunctionCallOutput,
    OutputBudget,
    ToolContext,
    ToolFinished,
    ToolStarted,
)
from stowage.tools import ToolRegistry, execute_call

from ._interrupt import TurnInterrupt
from ._messages import RunTools
from ._queue import MailboxReceive, MailboxSend, open_mailbox

__all__ = ["INTERRUPTED_CALL", "ExecutorInbox", "Progress", "run_calls", "run_tool_executor"]

INTERRUPTED_CALL = (
    "interrupted: the turn was stopped before this call finished; it may or may not have run"
)

_log = structlog.get_logger("stowage.tools")

#: makes a piece of what call ``call_id`` printed durable: ``progress(call_id, text)``
Progress: TypeAlias = Callable[[str, str], Awaitable[None]]


async def run_tool_executor(
    session_id: str,
    registry: ToolRegistry,
    inbox: MailboxReceive[RunTools],
    publish: Callable[[Event], None],
    *,
    default_timeout: float,
    limiter: anyio.CapacityLimiter | None = None,
) -> None:
    """Serve ``RunTools`` until the inbox closes, each as ``run_calls`` runs it."""
    log = _log.bind(session=session_id, actor="tool_executor")
    async with inbox:
        async for request in inbox:
            outputs = await run_calls(
                session_id,
                registry,
                request.round,
                request.calls,
                request.interrupt,
                publish,
                default_timeout=default_timeout,
                limiter=limiter,
                output=request.output,
                progress=request.progress,
            )
            log.debug("tools_done", round=request.round, calls=len(outputs))
            request.reply.set(outputs)


async def run_calls(
    session_id: str,
    registry: ToolRegistry,
    round_: int,
    calls: tuple[FunctionCall, ...],
    interrupt: TurnInterrupt | None,
    publish: Callable[[Event], None],
    *,
    default_timeout: float,
    limiter: anyio.CapacityLimiter | None = None,
    output: OutputBudget | None = None,
    progress: Progress | None = None,
) -> tuple[FunctionCallOutput, ...]:
    """Run one round's calls concurrently; every call gets exactly one output, in call order (a
    tool's failure, timeout or interrupt becomes an error output): never raises for a tool's
    failure."""
    # what a call the turn's interrupt stopped keeps: it may or may not have run
    outputs: list[FunctionCallOutput] = [
        FunctionCallOutput(call_id=c.call_id, output=INTERRUPTED_CALL, is_error=True) for c in calls
    ]
    with interrupt.guard() if interrupt else nullcontext():
        if len(calls) == 1:
            # one call (most rounds): run it here, not in a task group of one
            await _run_one(
                session_id, registry, calls[0], round_, outputs, 0, publish, default_timeout,
                limiter, output, progress,
            )  # fmt: skip
        else:
            async with anyio.create_task_group() as tg:
                for index, call in enumerate(calls):
                    tg.start_soon(
                        _run_one, session_id, registry, call, round_, outputs, index, publish,
                        default_timeout, limiter, output, progress,
                    )  # fmt: skip
    return tuple(outputs)


class ExecutorInbox:
    """The tool executor's inbox for one run of a session's actors, opened when the run first has
    several calls at once (a round of one call runs in the sampler's own task)."""

    __slots__ = ("_send", "_start")

    def __init__(self, start: Callable[[MailboxReceive[RunTools]], object]) -> None:
        self._start = start
        self._send: MailboxSend[RunTools] | None = None

    @property
    def started(self) -> bool:
        """Whether this run's executor was started."""
        return self._send is not None

    async def send(self, request: RunTools) -> None:
        """Hand ``request`` to the executor, starting it first if this run has none yet."""
        if self._send is None:
            send: MailboxSend[RunTools]
            receive: MailboxReceive[RunTools]
            send, receive = open_mailbox(1)
            self._start(receive)
            self._send = send
        await self._send.send(request)

    def close(self) -> None:
        if self._send is not None:
            self._send.close()

    async def __aenter__(self) -> ExecutorInbox:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


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
    budget: OutputBudget | None,
    progress: Progress | None = None,
) -> None:
    publish(ToolStarted(session_id=session_id, round=round_, call_id=call.call_id, name=call.name))

    async def printed(text: str) -> None:
        assert progress is not None
        await progress(call.call_id, text)

    context = ToolContext(
        session_id=session_id,
        round=round_,
        call_id=call.call_id,
        name=call.name,
        output=budget,
        progress=printed if progress is not None else None,
    )
    if limiter is None:
        output = await execute_call(
            registry, call, default_timeout=default_timeout, context=context
        )
    else:
        try:
            # a free token is taken without the trip round the event loop ``acquire`` makes
            # (it still queues behind waiters: a token is free only when none waits)
            limiter.acquire_nowait()
        except anyio.WouldBlock:
            await limiter.acquire()
        try:
            output = await execute_call(
                registry, call, default_timeout=default_timeout, context=context
            )
        finally:
            limiter.release()
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
