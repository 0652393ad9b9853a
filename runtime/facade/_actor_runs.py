"""One run of a session's actors, as the runtime's supervisor drives it: the sampler serving
commands, the compactor beside it, the tool executor when a round has several calls.

Between runs a parked session holds only its doorbell's event (``next_command``): no actor,
no executor inbox, no waiter in its stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress

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
from stowage.core import LogStore, Record

from ._slots import SessionSlot, SlotState

__all__ = ["between_runs", "next_command", "read_records", "run_actors"]


async def next_command(
    commands: MailboxReceive[SamplerCommand], doorbell: Doorbell
) -> SamplerCommand:
    """The next command, waited for on the doorbell (rung by every command and by the end of
    input): a parked session then holds no waiter in its stream, only the doorbell's event
    while it waits. Raises ``anyio.EndOfStream`` once the input ended and nothing is left."""
    while True:
        with suppress(anyio.WouldBlock):
            return commands.receive_nowait()
        await doorbell.wait()  # no await since the check: no ring is missed


def between_runs(slot: SessionSlot, to: SlotState) -> None:
    """Parked or running, as the supervisor goes; a session being hibernated (closing) stays
    closing while it finishes the work already sent."""
    if slot.state is not SlotState.CLOSING:
        slot.move(to)


async def run_actors(
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
    await run_compactor(
        ctx.session_id,
        ctx.settings,
        ctx.gateway,
        committed,
        plans,
        ctx.publish,
        kept=kept,
        specs=ctx.tools.specs(),
        limiter=ctx.compaction_limiter,
        call_limiter=ctx.model_limiter,
        before=ctx.before_compaction,
        read_log=ctx.read_log,
    )
