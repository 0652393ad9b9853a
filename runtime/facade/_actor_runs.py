"""One run of a session's actors, as the runtime's supervisor drives it: the sampler serving
commands, the compactor beside it, the tool executor when a round has several calls.

Between runs a parked session holds only its doorbell's event (``_next_command``): no actor,
no executor inbox, no waiter in its stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext, suppress

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

__all__ = ["read_records", "serve_commands"]


async def serve_commands(
    ctx: SessionContext,
    state: SessionState,
    slot: SessionSlot,
    commands: MailboxReceive[SamplerCommand],
    doorbell: Doorbell,
    running: anyio.CapacityLimiter | None,
) -> None:
    """Recover the session, then serve its commands until its input ends: one run of its
    actors while there is work, parked between runs (with a bound on running sessions,
    ``running``, a session with work waits parked for its place)."""
    committed = CompactorInbox(on_idle=doorbell.ring)
    plans: Slot[Verdict] = Slot()
    sampler = Sampler(ctx=ctx, state=state, committed=committed, plans=plans)
    kept = CompactorKept.for_session(ctx.settings, ctx.session_id, ctx.tools.specs())
    async with ctx.persistence:
        await sampler.recover()
        # Parked between runs: only this task waits, for the next command. A run of the
        # actors lasts while there is work, and ends when the sampler finds no command
        # waiting and the compactor idle (or the input closed).
        ended = False
        while not ended:
            _between_runs(slot, SlotState.PARKED)
            try:
                first = await _next_command(commands, doorbell)
            except anyio.EndOfStream:
                break
            async with running or nullcontext():
                _between_runs(slot, SlotState.RUNNING)
                ended = await _run_actors(
                    ctx, sampler, commands, first, committed, plans, kept, doorbell
                )
            del first  # answered: a parked session keeps no command (nor reply)


async def _next_command(
    commands: MailboxReceive[SamplerCommand], doorbell: Doorbell
) -> SamplerCommand:
    """The next command, waited for on the doorbell (rung by every command and by the end of
    input): a parked session then holds no waiter in its stream, only the doorbell's event
    while it waits. Raises ``anyio.EndOfStream`` once the input ended and nothing is left."""
    while True:
        with suppress(anyio.WouldBlock):
            return commands.receive_nowait()
        await doorbell.wait()  # no await since the check: no ring is missed


def _between_runs(slot: SessionSlot, to: SlotState) -> None:
    """Parked or running, as the supervisor goes; a session being hibernated (closing) stays
    closing while it finishes the work already sent."""
    if slot.state is not SlotState.CLOSING:
        slot.move(to)


async def _run_actors(
    ctx: SessionContext,
    sampler: Sampler,
    commands: MailboxReceive[SamplerCommand],
    first: SamplerCommand,
    committed: CompactorInbox,
    plans: Slot[Verdict],
    kept: CompactorKept,
    doorbell: Doorbell,
) -> bool:
    """One run of a session's actors, from ``first`` until the sampler parks (False) or the
    input ends (True). The executor's inbox (and the executor, if the run needs it) is made
    for the run and gone with it."""
    committed.reopen()
    async with anyio.create_task_group() as tg:
        # the executor starts with the run's first round of several calls (a lone call runs
        # in the sampler's task); its inbox is closed when the sampler's run ends
        tools = ExecutorInbox(lambda inbox: tg.start_soon(_tool_executor, ctx, inbox))
        tg.start_soon(_compactor, ctx, committed, plans, kept)
        ended = await sampler.serve(commands, first, tools, doorbell)
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
    """The session's whole log, as a reader (``recall_artifact`` pages through it, a
    re-grounded summary is made from it). This runtime holds the lease: nothing to repair,
    and a reader never cuts."""
    return (await store.read(session_id, repair=False)).records


async def _compactor(
    ctx: SessionContext,
    committed: CompactorInbox,
    plans: Slot[Verdict],
    kept: CompactorKept,
) -> None:
    await run_compactor(ctx, committed, plans, kept=kept)
