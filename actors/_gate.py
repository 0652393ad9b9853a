"""The sampler's side of compaction: apply the machine's verdicts, and never send above the limit.

The sampler decides nothing about compaction. At each round boundary it applies what the
compactor's machine said (stubs, a plan, a stop); before each request it checks the one
figure every part reads (``TokenStatus.guard``: the larger of the reported and the
character-based count, tool schemas counted once, outside usable) against the one limit
(``Accounting.limit``: the hard mark, or what a provider's refusal said fits), and waits for
the machine's next verdict only when the request would reach it, or when the machine said
to hold it. A refused request is written as a boundary of its own, so the machine hears it
like any other and counts it with the same guard and cap.
"""

from __future__ import annotations

import math

import anyio
import structlog
from stowage.core import (
    CompactionLoop,
    CompactionWaited,
    ContextLengthExceeded,
    ErrorRecord,
    FunctionCallOutput,
    Microcompacted,
    MicrocompactRecord,
    ModelRequest,
    Record,
    TurnRecord,
)
from stowage.policy import Accounting, Manual, Plan, Stop, Stubs

from ._context import SessionContext
from ._inbox import CompactorInbox
from ._journal import Journal, SessionPart
from ._mailbox import Slot
from ._messages import Verdict
from ._plans import PlanApplier
from ._refusals import Refusals

__all__ = ["Gate"]


class Gate(SessionPart):
    """Applies one session's verdicts at round boundaries; counts the time requests waited."""

    __slots__ = (
        "_asks",
        "_basis",
        "_hold",
        "_turn_seq",
        "_wait_started",
        "applier",
        "inbox",
        "refusals",
        "verdicts",
        "waited",
    )

    def __init__(
        self,
        ctx: SessionContext,
        journal: Journal,
        applier: PlanApplier,
        verdicts: Slot[Verdict],
        inbox: CompactorInbox,
        log: structlog.typing.FilteringBoundLogger,
    ) -> None:
        super().__init__(ctx, journal, log)
        self.applier = applier
        self.verdicts = verdicts
        self.inbox = inbox
        self._asks = 0
        self._turn_seq = 0
        #: the newest boundary a verdict applied was on, and whether it said to hold
        self._basis = 0
        self._hold = False
        #: what refusals taught: what a request may carry, the provider's ratio, its window
        self.refusals = Refusals(ctx, journal, log)
        #: seconds requests were held back for compaction, in all
        self.waited = 0.0
        self._wait_started: float | None = None

    @property
    def accounting(self) -> Accounting:
        return self.journal.accounting

    def turn_started(self) -> None:
        """A turn began (or went on): a stop for an earlier turn does not apply, and what a
        refusal taught is the earlier turn's."""
        self._turn_seq = self.journal.state.last_seq
        self.refusals.turn_started()

    async def apply_ready(self) -> None:
        """Apply the machine's verdict if one is waiting; never waits for one."""
        verdict = self.verdicts.take()
        if verdict is not None:
            await self._apply(verdict)

    async def before_request(self) -> None:
        """Before a request: apply what is ready; wait for the machine while it holds the request
        or while the request would reach the limit (applying each verdict)."""
        await self.apply_ready()
        started: float | None = None
        try:
            while True:
                over = self._over()
                if not self._hold and over is None:
                    return
                if not self._hold and self._basis >= self.journal.boundary_seq:
                    # the machine saw this boundary and let it go: it is never sent anyway
                    await self._stop(Stop("overflow", over or ""))
                if started is None:
                    started = self._wait_started = anyio.current_time()
                await self._apply(await self.verdicts.get())
        finally:
            if started is not None:
                self._waited(started, "hard mark before a request")

    async def settle(self) -> None:
        """Wait for the machine's verdict on the newest boundary and apply it, and every one it
        holds for, so that what the log holds when the caller is answered is what the machine
        decided there."""
        await self.apply_ready()
        started: float | None = None
        try:
            while self._hold or self._basis < self.journal.boundary_seq:
                if self._hold and started is None:
                    started = self._wait_started = anyio.current_time()
                await self._apply(await self.verdicts.get())
        finally:
            if started is not None:
                self._waited(started, "a compaction the boundary asked for")

    def _over(self) -> str | None:
        """Why the next request may not go as it stands (its figures), or None."""
        limit = self.accounting.limit(self.refusals.fit)
        if limit is None:
            return None
        figure = self.figure()
        if figure < limit:
            return None
        return (
            f"the next request would carry {figure} tokens of history, at or above the limit "
            f"of {limit} ({self._limit_source()}); not sending it"
        )

    def _limit_source(self) -> str:
        acc = self.accounting
        parts = []
        if acc.budget is not None:
            parts.append(f"hard mark {acc.marks.hard:.0%} of the usable {acc.usable}")
        if self.refusals.fit is not None:
            parts.append(f"the provider's refusal: {self.refusals.fit}")
        return "; ".join(parts)

    def figure(self) -> int:
        """Tokens of history the next request carries."""
        protected = self.journal.protected_text()
        if self.refusals.ratio is not None:
            chars = self.journal.state.projected_chars + (len(protected) if protected else 0)
            return math.ceil(chars / self.refusals.ratio)
        return self.accounting.status(self.journal.state, protected).guard

    async def compact_now(
        self, focus: str | None, *, reground: bool = False, reason: str | None = None
    ) -> bool:
        """A manual compaction, decided by the machine; True when history was compacted."""
        await self.apply_ready()
        self._asks += 1
        ask_id = self._asks
        self.inbox.ask(Manual(ask_id, focus, reground, anyio.current_time(), reason))
        verdict = await self.verdicts.get_when(lambda v: v.answers >= ask_id)
        compacted = False
        while True:
            compacted = await self._apply(verdict) or compacted
            if not verdict.hold:
                return compacted
            verdict = await self.verdicts.get()

    async def refused(self, error: ContextLengthExceeded, request: ModelRequest) -> None:
        """The provider refused ``request`` as too long."""
        await self.refusals.refused(error, request)

    # -- applying ------------------------------------------------------------------------

    async def _apply(self, verdict: Verdict) -> bool:
        """Write what ``verdict`` says; True when a compaction was written."""
        if verdict.basis_seq >= self._basis:
            self._basis, self._hold = verdict.basis_seq, verdict.hold
        if (
            verdict.stop is not None
            and verdict.basis_seq >= self._turn_seq
            and self.journal.state.turn_open
        ):
            await self._stop(verdict.stop)
        compacted = False
        if verdict.plan is not None:
            compacted = await self._apply_plan(verdict.plan)
        for stubs in verdict.stubs:
            await self._stub(stubs)
        return compacted

    async def _stop(self, stop: Stop) -> None:
        """Close the turn as stopped, with the error record that says why, and raise it."""
        kind = "compaction_loop" if stop.kind == "loop" else "context_overflow"
        self._log.error(kind, message=stop.message)
        state = self.journal.state
        seq = state.last_seq + 1
        records: list[Record] = [ErrorRecord(seq=seq, kind=kind, message=stop.message)]
        if state.turn_open:
            records.append(TurnRecord(seq=seq + 1, turn=state.turn, phase="stopped"))
        await self.journal.write(records, boundary="turn")
        if stop.kind == "loop":
            raise CompactionLoop(stop.message)
        raise ContextLengthExceeded(stop.message)

    async def _apply_plan(self, plan: Plan) -> bool:
        state = self.journal.state
        ratio = self.refusals.ratio or self.accounting.ratio(state)
        now = anyio.current_time()
        waited = now - self._wait_started if self._wait_started is not None else 0.0
        return await self.applier.apply(
            plan, accounting=self.accounting, chars_per_token=ratio, waited=round(waited, 3)
        )

    async def _stub(self, stubs: Stubs) -> bool:
        state = self.journal.state
        outputs = {
            e.seq for e in state.history if isinstance(e.item, FunctionCallOutput)
        } - state.stubbed
        seqs = tuple(s for s in stubs.seqs if s in outputs)
        if not seqs:
            return False
        record = MicrocompactRecord(
            seq=state.last_seq + 1,
            stubbed=seqs,
            reason=stubs.reason,
            tokens_before=stubs.tokens_before,
            tokens_after=stubs.tokens_after,
            estimated=stubs.estimated,
        )
        await self.journal.write([record], boundary="applied")
        event = "tool_outputs_capped" if stubs.kind == "cap" else "microcompacted"
        self._log.info(
            event,
            stubbed=len(seqs),
            tokens_before=stubs.tokens_before,
            tokens_after=stubs.tokens_after,
            estimated=stubs.estimated,
        )
        self.ctx.publish(
            Microcompacted(
                session_id=self.ctx.session_id,
                stubbed=len(seqs),
                tokens_before=stubs.tokens_before,
                tokens_after=stubs.tokens_after,
                estimated=stubs.estimated,
                reason=stubs.reason,
            )
        )
        return True

    def _waited(self, started: float, why: str) -> None:
        self._wait_started = None
        seconds = anyio.current_time() - started
        self.waited += seconds
        self._log.info("compaction_waited", seconds=round(seconds, 4), why=why)
        self.ctx.publish(
            CompactionWaited(
                session_id=self.ctx.session_id,
                round=self.journal.state.round,
                seconds=seconds,
                reason=why,
            )
        )
