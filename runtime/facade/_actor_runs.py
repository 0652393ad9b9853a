"""Runs of a session's actors, as the runtime's supervisor drives them: the sampler serving
commands, the compactor beside it, the tool executor when a round has several calls.

A parked session holds no task: its supervisor ends when it parks, keeping what its actors
carry from run to run (``SessionActors``) and its mailbox in a ``SessionRun``; the next
command (or the end of its input) starts a supervisor again (``SessionRun.wake``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import anyio
from stowage.actors import (
    CompactorInbox,
    CompactorKept,
    Doorbell,
    ExecutorInbox,
    MailboxReceive,
    RunTools,
    Sampler,
    SamplerCommand,
    SessionContext,
    Slot,
    Verdict,
    run_compactor,
    run_tool_executor,
)
from stowage.core import LogStore, Record, SessionState

from ._slots import SessionSlot, SlotState

__all__ = ["SessionActors", "SessionRun", "read_records", "serve_commands", "start_actors"]


@dataclass(slots=True, eq=False)
class SessionActors:
    """What a session's actors carry from one run to the next."""

    ctx: SessionContext
    sampler: Sampler
    committed: CompactorInbox
    plans: Slot[Verdict]
    kept: CompactorKept


@dataclass(slots=True, eq=False)
class SessionRun:
    """A live session's mailbox and actors, and whether a supervisor task serves them now. A
    supervisor that finds nothing waiting sets ``serving`` back to False and ends with no await
    between the check and its end: a command sent after the check starts the next one."""

    commands: MailboxReceive[SamplerCommand]
    doorbell: Doorbell
    #: starts a supervisor task for this session
    start: Callable[[SessionRun], object]
    actors: SessionActors | None = None
    #: a supervisor task serves the session now
    serving: bool = False

    def wake(self) -> None:
        """Something came in: ring the running supervisor, or start one."""
        if self.serving:
            self.doorbell.ring()
        else:
            self.serving = True
            self.start(self)


async def start_actors(
    ctx: SessionContext, state: SessionState, doorbell: Doorbell
) -> SessionActors:
    """The actors of a session just started, its log's open round closed (``recover``)."""
    committed = CompactorInbox(on_idle=doorbell.ring)
    plans: Slot[Verdict] = Slot()
    sampler = Sampler(ctx=ctx, state=state, committed=committed, plans=plans)
    kept = CompactorKept.for_session(ctx.settings, ctx.session_id, ctx.tools.specs())
    try:
        await sampler.recover()
    except BaseException:
        ctx.persistence.close()  # its share of the store's inbox: the store's actor must end
        raise
    return SessionActors(ctx=ctx, sampler=sampler, committed=committed, plans=plans, kept=kept)


async def serve_commands(
    actors: SessionActors,
    slot: SessionSlot,
    commands: MailboxReceive[SamplerCommand],
    doorbell: Doorbell,
    running: anyio.CapacityLimiter | None,
) -> bool:
    """Serve the commands waiting, one run of the actors while there is work (with a bound
    on running sessions, ``running``, a session with work waits parked for its place).
    Returns True once the input ended, False when the session parks with nothing waiting:
    no await lies between that check and the return."""
    while True:
        _between_runs(slot, SlotState.PARKED)
        try:
            first = commands.receive_nowait()
        except anyio.WouldBlock:
            return False
        except anyio.EndOfStream:
            return True
        async with running or nullcontext():
            _between_runs(slot, SlotState.RUNNING)
            ended = await _run_actors(actors, commands, first, doorbell)
        del first  # answered: a parked session keeps no command (nor reply)
        if ended:
            return True


def _between_runs(slot: SessionSlot, to: SlotState) -> None:
    """Parked or running, as the supervisor goes."""
    if slot.state is not SlotState.CLOSING and slot.state is not to:
        slot.move(to)


async def _run_actors(
    actors: SessionActors,
    commands: MailboxReceive[SamplerCommand],
    first: SamplerCommand,
    doorbell: Doorbell,
) -> bool:
    """One run of a session's actors, from ``first`` until the sampler parks."""
    ctx, committed = actors.ctx, actors.committed
    committed.reopen()
    async with anyio.create_task_group() as tg:
        # the executor starts with the run's first round of several calls (a lone call runs
        # in the sampler's task); its inbox is closed when the sampler's run ends
        tools = ExecutorInbox(lambda inbox: tg.start_soon(_tool_executor, ctx, inbox))
        tg.start_soon(_compactor, ctx, committed, actors.plans, actors.kept)
        ended = await actors.sampler.serve(commands, first, tools, doorbell)
    return ended


async def _tool_executor(ctx: SessionContext, inbox: MailboxReceive[RunTools]) -> None:
    await run_tool_executor(
        ctx.session_id,
        ctx.tools,
        inbox,
        ctx.publish,
        default_timeout=ctx.settings.tool_timeout,
        limiter=ctx.tool_limiter,
    )


async def read_records(store: LogStore, session_id: str) -> Sequence[Record]:
    """The session's whole log, as a reader."""
    return (await store.read(session_id, repair=False)).records


async def _compactor(
    ctx: SessionContext, committed: CompactorInbox, plans: Slot[Verdict], kept: CompactorKept
) -> None:
    await run_compactor(ctx, committed, plans, kept=kept)
