"""The sampler's approvals: a round whose calls need a person's answer stops before any runs.

The requests are durable ``approval`` records and the round stays open (its calls have no
outputs), so a compaction never covers it and a resume finds it waiting. An answer is a
record too; when none is awaited any more the round runs, denied calls getting a "denied"
output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import structlog
from stowage.core import ApprovalError, ApprovalRecord, FunctionCall, FunctionCallOutput

from ._context import SessionContext
from ._journal import Journal

__all__ = ["Approvals", "AwaitingApproval"]


class AwaitingApproval(Exception):
    """A round's calls wait for a person's approval (the requests are written)."""


class Approvals:
    """Asks for approvals, checks and logs the answers."""

    def __init__(
        self, ctx: SessionContext, journal: Journal, log: structlog.typing.FilteringBoundLogger
    ) -> None:
        self.ctx = ctx
        self.journal = journal
        self._log = log

    def refuse_while_awaiting(self, what: str) -> None:
        """Raises ``ApprovalError`` while any call awaits an answer (nothing is written)."""
        waiting = self.journal.state.awaiting_approval
        if waiting:
            ids = ", ".join(c.call_id for c in waiting)
            raise ApprovalError(
                f"session {self.ctx.session_id} has calls awaiting approval ({ids}): "
                f"approve or deny them before {what}"
            )

    async def request(self, round_: int, calls: Sequence[FunctionCall]) -> None:
        """Stop the turn before any tool of the round runs when one of its calls needs a
        person's approval: the requests are durable, the round stays open. Raises
        ``AwaitingApproval`` then."""
        needing = [c for c in calls if self._needs_approval(c)]
        if not needing:
            return
        seq = self.journal.state.last_seq
        await self.journal.write(
            [
                ApprovalRecord(seq=seq + 1 + i, call_id=c.call_id, decision="requested")
                for i, c in enumerate(needing)
            ],
            boundary="approval",
        )
        self._log.info("approval_requested", round=round_, calls=[c.call_id for c in needing])
        raise AwaitingApproval

    async def answer(self, call_id: str, approve: bool, reason: str | None) -> bool:
        """Log the answer for ``call_id``; True when no call of the round awaits one any more.

        Raises ``ApprovalError`` if ``call_id`` awaits no approval (nothing is written).
        """
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
        return {
            call_id: FunctionCallOutput(
                call_id=call_id,
                output=f"denied: {reason or 'a person denied this call'}",
                is_error=True,
            )
            for call_id, reason in self.journal.state.denial_reasons.items()
        }

    def _needs_approval(self, call: FunctionCall) -> bool:
        return bool(getattr(self.ctx.tools.get(call.name), "needs_approval", False))
