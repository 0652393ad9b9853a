"""The sampler's round writes: run a round's calls and commit the round.

Outputs are written in call order with the round's ``round_committed`` record as one batch
that ends at the "round" boundary, so persistence hands the compactor its snapshot only once
the whole round is durable.
"""

from __future__ import annotations

from collections.abc import Sequence

from stowage.core import (
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    ModelResponse,
    ProgressRecord,
    ProtectedRecord,
    Record,
    RequestManifest,
    RoundCommitted,
    RoundCommittedRecord,
)
from stowage.tools import trail_ops

from ._interrupt import TurnInterrupt
from ._journal import SessionPart
from ._mailbox import Reply
from ._messages import RunTools
from ._responses import VettedUsage, cut_call_outputs, merge_outputs
from .tool_executor import ExecutorInbox
from .tool_executor import run_calls as run_here

__all__ = ["RoundWriter", "commit_record"]


def commit_record(
    round_: int,
    response: ModelResponse | None,
    first_seq: int,
    *,
    offset: int,
    interrupted: bool = False,
    usage: VettedUsage | None = None,
    manifest: RequestManifest | None = None,
    resumed: bool = False,
) -> RoundCommittedRecord:
    """The record that commits a round whose first record is ``first_seq``."""
    seq = first_seq + offset
    if usage is None:
        usage = VettedUsage(usage=response.usage if response is not None else None)
    return RoundCommittedRecord(
        seq=seq,
        round=round_,
        usage=usage.usage,
        first_seq=first_seq,
        last_seq=seq,
        interrupted=interrupted,
        truncated=response.truncated if response is not None else False,
        reported_usage=usage.rejected,
        manifest=manifest,
        resumed=resumed,
    )


class RoundWriter(SessionPart):
    """Runs a round's calls."""

    __slots__ = ()

    async def progress(self, call_id: str, text: str) -> None:
        """Make a piece of what a running call printed durable (a ``progress`` record; not a
        boundary): a resume of a process killed mid-call shows it."""
        seq = self.journal.state.last_seq + 1
        await self.journal.write([ProgressRecord(seq=seq, call_id=call_id, text=text)])

    async def commit(
        self, records: Sequence[Record], commit: RoundCommittedRecord, *, calls: int
    ) -> None:
        """Write the committed batch (``commit`` is its ``round_committed`` record); persistence
        hands the compactor its snapshot once it is durable, and the compactor's verdict is
        applied before the next request."""
        await self.journal.write(records, boundary="round")
        self.ctx.publish(
            RoundCommitted(
                session_id=self.ctx.session_id,
                round=commit.round,
                usage=commit.usage,
                calls=calls,
                truncated=commit.truncated,
            )
        )

    async def commit_outputs(
        self,
        round_: int,
        outputs: Sequence[FunctionCallOutput],
        response: ModelResponse | None,
        *,
        usage: VettedUsage | None = None,
        manifest: RequestManifest | None = None,
        resumed: bool = False,
    ) -> None:
        """Write the round's outputs, in call order, the trail of the files they touched."""
        state = self.journal.state
        first = state.last_seq + 1
        committed: list[Record] = [
            ItemRecord(seq=first + i, item=output, round=round_) for i, output in enumerate(outputs)
        ]
        if self.ctx.settings.files_touched:
            touched = trail_ops(self.ctx.tools, state.open_calls.values(), outputs)
            if touched:
                seq = first + len(committed)
                committed.append(ProtectedRecord(seq=seq, ops=tuple(touched), source="tools"))
        commit = commit_record(
            round_,
            response,
            first,
            offset=len(committed),
            usage=usage,
            manifest=manifest,
            resumed=resumed,
        )
        committed.append(commit)
        await self.commit(committed, commit, calls=len(outputs))

    async def run_tools(
        self,
        round_: int,
        response: ModelResponse,
        tools: ExecutorInbox | None,
        interrupt: TurnInterrupt | None,
        *,
        refused: dict[str, FunctionCallOutput] | None = None,
    ) -> tuple[FunctionCallOutput, ...]:
        """One output per call, in order."""
        settings = self.ctx.settings
        cut = cut_call_outputs(response, max_output_tokens=settings.max_output_tokens)
        if cut:
            self._log.warning("tool_calls_cut_off", round=round_, calls=sorted(cut))
        return await self.run_calls(
            round_, response.calls, {**(refused or {}), **cut}, tools, interrupt
        )

    async def run_calls(
        self,
        round_: int,
        calls: tuple[FunctionCall, ...],
        refused: dict[str, FunctionCallOutput],
        tools: ExecutorInbox | None,
        interrupt: TurnInterrupt | None,
    ) -> tuple[FunctionCallOutput, ...]:
        """One output per call, in call order."""
        runnable = tuple(c for c in calls if c.call_id not in refused)
        ran: tuple[FunctionCallOutput, ...] = ()
        accounting = self.journal.accounting
        output = accounting.output_budget(accounting.ratio(self.journal.state))
        if len(runnable) == 1:
            # one call: run here, in the sampler's task (the executor's hop buys nothing)
            ctx = self.ctx
            ran = await run_here(
                ctx.session_id,
                ctx.tools,
                round_,
                runnable,
                interrupt,
                ctx.publish,
                default_timeout=ctx.settings.tool_timeout,
                limiter=ctx.tool_limiter,
                output=output,
                progress=self.progress,
            )
        elif runnable:
            reply: Reply[tuple[FunctionCallOutput, ...]] = Reply()
            assert tools is not None  # only a serving sampler runs rounds
            await tools.send(
                RunTools(
                    round=round_,
                    calls=runnable,
                    reply=reply,
                    interrupt=interrupt,
                    output=output,
                    progress=self.progress,
                )
            )
            ran = await reply.wait()
        return merge_outputs(calls, refused, ran)
