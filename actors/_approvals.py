"""The sampler's approvals: the user's policy on each call, and a person's answers.

Before any call of a round runs, the policy (``stowage.tools.ToolPolicy``: the session's
sandbox, approval mode and rules) judges each on what it touches: it runs, it is refused
(it gets a "refused" output and never runs), or it waits for a person. A round whose calls
need a person's answer stops before any runs: the requests are durable ``approval`` records
and the round stays open (its calls have no outputs), so a compaction never covers it and a
resume finds it waiting. An answer is a record too; when none is awaited any more the round
runs, denied and refused calls getting their outputs instead of running.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import anyio.to_thread
import structlog
from stowage.core import ApprovalError, ApprovalRecord, FunctionCall, FunctionCallOutput
from stowage.tools import CallVerdict, ToolPolicy, call_effects, call_preview

from ._context import SessionContext
from ._journal import Journal, SessionPart

__all__ = ["Approvals", "AwaitingApproval"]


class AwaitingApproval(Exception):
    """A round's calls wait for a person's approval (the requests are written)."""


class Approvals(SessionPart):
    """Asks for approvals, checks and logs the answers."""

    __slots__ = ("policy",)

    def __init__(
        self, ctx: SessionContext, journal: Journal, log: structlog.typing.FilteringBoundLogger
    ) -> None:
        super().__init__(ctx, journal, log)
        self.policy = ToolPolicy.for_settings(ctx.settings)

    def refuse_while_awaiting(self, what: str) -> None:
        """Raises ``ApprovalError`` while any call awaits an answer (nothing is written)."""
        waiting = self.journal.state.awaiting_approval
        if waiting:
            ids = ", ".join(c.call_id for c in waiting)
            raise ApprovalError(
                f"session {self.ctx.session_id} has calls awaiting approval ({ids}): "
                f"approve or deny them before {what}"
            )

    def verdict(self, call: FunctionCall) -> CallVerdict:
        """The policy's word on ``call``, from what its tool says it touches."""
        tool = self.ctx.tools.get(call.name)
        needs = bool(getattr(tool, "needs_approval", False))
        return self.policy.judge(call.name, call_effects(tool, call), needs_approval=needs)

    def refused(self, calls: Sequence[FunctionCall]) -> dict[str, FunctionCallOutput]:
        """The "refused" output of each call the policy refuses (they never run)."""
        return self._refused([(call, self.verdict(call)) for call in calls])

    def _refused(
        self, judged: Sequence[tuple[FunctionCall, CallVerdict]]
    ) -> dict[str, FunctionCallOutput]:
        outputs = {}
        for call, verdict in judged:
            if verdict.action == "refuse":
                self._log.info("tool_call_refused", call_id=call.call_id, reason=verdict.reason)
                outputs[call.call_id] = FunctionCallOutput(
                    call_id=call.call_id, output=f"refused: {verdict.reason}", is_error=True
                )
        return outputs

    async def request(
        self, round_: int, calls: Sequence[FunctionCall]
    ) -> dict[str, FunctionCallOutput]:
        """The outputs of the round's refused calls; and, when one of its calls needs a
        person's approval, the turn stopped before any tool of the round runs: the requests
        are durable, the round stays open. Raises ``AwaitingApproval`` then."""
        # each call judged once: a verdict decodes the call's arguments
        judged = [(call, self.verdict(call)) for call in calls]
        refused = self._refused(judged)
        needing = [(c, v) for c, v in judged if c.call_id not in refused and v.action == "ask"]
        if not needing:
            return refused
        details = await anyio.to_thread.run_sync(self._details, [c for c, _ in needing])
        seq = self.journal.state.last_seq
        await self.journal.write(
            [
                ApprovalRecord(
                    seq=seq + 1 + i,
                    call_id=c.call_id,
                    decision="requested",
                    reason=v.reason,
                    detail=details[i],
                )
                for i, (c, v) in enumerate(needing)
            ],
            boundary="approval",
        )
        self._log.info("approval_requested", round=round_, calls=[c.call_id for c, _ in needing])
        raise AwaitingApproval

    def _details(self, calls: Sequence[FunctionCall]) -> list[str | None]:
        """What each call will do, as its tool previews it (files are read: off the loop)."""
        return [call_preview(self.ctx.tools.get(c.name), c) for c in calls]

    async def answer(self, call_id: str, approve: bool, reason: str | None) -> bool:
        """Log the answer for ``call_id``. True when no call of the round awaits one any more.
        Raises ``ApprovalError`` if ``call_id`` awaits no approval (nothing is written)."""
        state = self.journal.state
        waiting = [c.call_id for c in state.awaiting_approval]
        if call_id not in waiting:
            awaiting = f"; awaiting: {', '.join(waiting)}" if waiting else "; none is awaiting"
            raise ApprovalError(
                f"session {self.ctx.session_id}: call {call_id!r} awaits no approval{awaiting}"
            )
        decision: Literal["approved", "denied"] = "approved" if approve else "denied"
        await self.journal.write(
            [
                ApprovalRecord(
                    seq=state.last_seq + 1, call_id=call_id, decision=decision, reason=reason
                )
            ]
        )
        self._log.info("approval_decided", call_id=call_id, decision=decision)
        return not state.awaiting_approval

    def denied_outputs(self) -> dict[str, FunctionCallOutput]:
        """The "denied" output of every call of the open round a person denied."""
        state = self.journal.state
        denied = {
            call_id: FunctionCallOutput(
                call_id=call_id,
                output=f"denied: {reason or 'a person denied this call'}",
                is_error=True,
            )
            for call_id, reason in state.denial_reasons.items()
        }
        return {**self.refused(tuple(state.open_calls.values())), **denied}
