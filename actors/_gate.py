"""The sampler's side of compaction: apply what the compactor advised, and wait when it says so.

The sampler decides nothing about compaction. Before each request it waits for the
compactor's verdict on the newest durable boundary (``settle``; the compactor answers every
snapshot at once, so this costs a task switch), applies what it says at that round boundary
(stubs, a plan), and holds the request back only while the verdict is "block" (the hard mark
with a plan in flight). A manual compaction and a request the provider refused as too long
are asks: the compactor decides on the last committed snapshot, the gate applies its answer.
"""

from __future__ import annotations

import math
from dataclasses import replace

import anyio
import structlog
from stowage.core import (
    CompactionLanded,
    CompactionLoop,
    CompactionWaited,
    ContextLengthExceeded,
    ErrorRecord,
    FunctionCallOutput,
    Microcompacted,
    MicrocompactRecord,
    ModelRequest,
    Record,
    SettingsChanged,
    SettingsChangedRecord,
    item_chars,
)
from stowage.policy import ratio_from_stated

from ._accounting import Accounting
from ._context import SessionContext
from ._inbox import CompactorInbox
from ._journal import Journal
from ._mailbox import Slot
from ._messages import Advice, Ask, Plan, PlanFailed, Stubs
from ._plans import PlanApplier

__all__ = ["Gate"]

# how many escalating asks a refused request gets (``Control._overflow``'s levels)
_OVERFLOW_LEVELS = 4


class Gate:
    """Applies one session's advice at round boundaries; counts the time requests waited."""

    def __init__(
        self,
        ctx: SessionContext,
        journal: Journal,
        applier: PlanApplier,
        advice: Slot[Advice],
        inbox: CompactorInbox,
        log: structlog.typing.FilteringBoundLogger,
    ) -> None:
        self.ctx = ctx
        self.journal = journal
        self.accounting: Accounting = journal.accounting
        self.applier = applier
        self.advice = advice
        self.inbox = inbox
        self._log = log
        self._asks = 0
        self._turn_seq = 0
        #: the newest boundary whose verdict was applied (nothing to wait for up to it)
        self._settled = 0
        #: whether that verdict said the next request must wait for a later one
        self._blocked = False
        #: seconds requests were held back for compaction, in all
        self.waited = 0.0
        self._wait_started: float | None = None
        # the ratio the provider's own count gave, while recovering from its refusal; every
        # compaction then records it, so replay restarts its calibration from the same figure
        self._stated_ratio: float | None = None
        # a window was learned from a refusal (written once a session run)
        self._window_known = False

    def turn_started(self) -> None:
        """A turn began (or went on): a stop advised for an earlier turn does not apply."""
        self._turn_seq = self.journal.state.last_seq

    async def apply_ready(self) -> None:
        """Apply the compactor's advice if one is waiting; never waits for one."""
        advice = self.advice.take()
        if advice is not None:
            await self._apply(advice)

    async def settle(self) -> None:
        """Before a request: wait for the compactor's verdict on the newest boundary, apply
        it, and while it says "block", wait for the next one.

        Raises ``CompactionLoop`` when the turn is in a real compaction loop, and
        ``ContextLengthExceeded`` when the request cannot be brought under the hard mark
        (each after an ``error`` record).
        """
        started: float | None = None
        try:
            while self._blocked or self._settled < self.journal.boundary_seq:
                if self._blocked and started is None:
                    started = self._wait_started = anyio.current_time()
                await self._apply(await self.advice.get_when(self._on_newest_boundary))
        finally:
            if started is not None:
                self._waited(started, "hard mark before a request")

    def _on_newest_boundary(self, advice: Advice) -> bool:
        # while blocked, the next advice on the same boundary is the one awaited
        return advice.basis_seq >= self.journal.boundary_seq

    async def compact_now(self, focus: str | None, *, reground: bool = False) -> bool:
        """A manual compaction, decided by the compactor on the last committed snapshot
        (``reground``: its summary made from the original records); True when history was
        compacted."""
        await self.apply_ready()
        advice = await self._ask(Ask(ask_id=0, kind="manual", focus=focus, reground=reground))
        compacted = False
        while True:
            compacted = await self._apply(advice) or compacted
            if not advice.block:
                return compacted
            advice = await self.advice.get()

    async def recover_overflow(self, error: ContextLengthExceeded, request: ModelRequest) -> None:
        """The provider refused ``request`` as too long: free room so it can be sent once
        more. The chars-per-token ratio is recalibrated from the count the provider stated;
        then the compactor is asked, one escalating level at a time (a summary that keeps
        what of the turn fits; the oldest kept rounds dropped; every older output stubbed;
        everything compacted without a model), until the request fits the window the
        provider stated (or, not stated, the budget's). An ``error`` record keeps the figures.

        Raises ``error`` when auto compaction is off, and ``ContextLengthExceeded`` naming
        the figures when even all that does not fit.
        """
        if not self.ctx.settings.auto_compact:
            raise error
        tool_tokens = self.accounting.tool_tokens
        chars = sum(item_chars(item) for item in request.input)
        stated = ratio_from_stated(chars, error.tokens, tool_tokens) if error.tokens else None
        ratio = stated or self.accounting.ratio(self.journal.state)
        fit = self._overflow_fit(error)
        counted = f"{error.tokens} tokens" if error.tokens else "no count"
        window = f"a window of {error.limit}" if error.limit else "no window"
        source = "give" if stated else "(the session's own ratio)"
        figures = (
            f"the provider stated {counted} and {window}; {chars} characters of input "
            f"{source} {ratio:.3f} chars per token; freeing until the request carries at "
            f"most {fit if fit is not None else 'what compaction leaves'} tokens"
        )
        self._log.warning(
            "context_length_exceeded",
            error=str(error),
            stated_tokens=error.tokens,
            stated_limit=error.limit,
            chars_per_token=round(ratio, 3),
            fit=fit,
        )
        seq = self.journal.state.last_seq + 1
        records: list[Record] = [
            ErrorRecord(seq=seq, kind="context_length_exceeded", message=f"{error}; {figures}")
        ]
        learned = self._learned_window(error, seq + 1)
        if learned is not None:
            records.append(learned)
        await self.journal.write(records)
        if learned is not None:
            self._window_learned(learned)
        started = self._wait_started = anyio.current_time()
        self._stated_ratio = stated
        try:
            for level in range(1, _OVERFLOW_LEVELS + 1):
                # the provider's word outranks the estimate: the first level always runs
                if level > 1 and fit is not None and self._estimate(ratio) <= fit:
                    return
                ask = Ask(ask_id=0, kind="overflow", fit=fit, level=level, chars_per_token=stated)
                advice = await self._ask(ask)
                while True:
                    await self._apply(advice)
                    if not advice.block:
                        break
                    advice = await self.advice.get()
            if fit is not None and self._estimate(ratio) > fit:
                raise ContextLengthExceeded(
                    f"the refused request still carries ~{self._estimate(ratio)} tokens after "
                    f"compaction, stubs and dropped rounds, above the {fit} the provider's "
                    "window allows: what is left (system, protected state, the user's words) "
                    "does not fit; not sending it"
                )
        finally:
            self._stated_ratio = None
            self._waited(started, "context_length_exceeded")

    # -- applying ------------------------------------------------------------------------

    async def _ask(self, ask: Ask) -> Advice:
        self._asks += 1
        ask_id = self._asks
        self.inbox.ask(replace(ask, ask_id=ask_id))
        return await self.advice.get_when(lambda a: a.answers >= ask_id)

    async def _apply(self, advice: Advice) -> bool:
        """Write what ``advice`` says; True when something was written (a new boundary)."""
        if advice.basis_seq >= self._settled:
            self._settled, self._blocked = advice.basis_seq, advice.block
        wrote = False
        if (
            advice.stop is not None
            and advice.basis_seq >= self._turn_seq
            and self.journal.state.turn_open
        ):
            await self._stop(advice)
        outcome = advice.outcome
        if isinstance(outcome, PlanFailed):
            if not outcome.vetoed:
                self._log.warning(
                    "compaction_unavailable", round=outcome.round, error=outcome.error
                )
        elif isinstance(outcome, Plan):
            wrote = await self._apply_plan(outcome)
        for stubs in advice.stubs:
            wrote = await self._stub(stubs) or wrote
        return wrote

    async def _stop(self, advice: Advice) -> None:
        message = advice.stop or ""
        kind = "compaction_loop" if advice.stop_kind == "loop" else "context_overflow"
        self._log.error(kind, message=message)
        seq = self.journal.state.last_seq + 1
        await self.journal.write([ErrorRecord(seq=seq, kind=kind, message=message)])
        if advice.stop_kind == "loop":
            raise CompactionLoop(message)
        raise ContextLengthExceeded(message)

    async def _apply_plan(self, plan: Plan) -> bool:
        state = self.journal.state
        ratio = self._stated_ratio or self.accounting.ratio(state)
        now = anyio.current_time()
        waited = now - self._wait_started if self._wait_started is not None else 0.0
        applied = await self.applier.apply(
            plan,
            user_budget_chars=self.accounting.user_budget(ratio),
            chars_per_token=ratio,
            waited=round(waited, 3),
        )
        if applied:
            self.ctx.publish(
                CompactionLanded(
                    session_id=self.ctx.session_id,
                    round=state.round,
                    kind=plan.kind,
                    fraction=plan.fraction,
                    hard=self.accounting.marks.hard,
                    waited=waited,
                )
            )
        return applied

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

    # -- figures -------------------------------------------------------------------------

    def _estimate(self, ratio: float) -> int:
        """Tokens of the next request, tool schemas included, at ``ratio``."""
        protected = self.journal.protected_text()
        chars = self.journal.state.projected_chars + (len(protected) if protected else 0)
        return self.accounting.tool_tokens + math.ceil(chars / ratio)

    def _learned_window(
        self, error: ContextLengthExceeded, seq: int
    ) -> SettingsChangedRecord | None:
        """The window the provider stated, as a ``settings_changed`` record, when the session
        runs on an assumed threshold because its window is not known; None otherwise (or once
        the session learned one)."""
        if error.limit is None or error.limit <= 0 or self._window_known:
            return None
        # a threshold the user chose, or none at all (the window is known: an option, the
        # registry, the endpoint): nothing to learn
        if self.ctx.settings.compact_threshold is not None or self.accounting.threshold is None:
            return None
        self._window_known = True
        return SettingsChangedRecord(
            seq=seq, changes={"context_window": [None, error.limit]}, source="provider"
        )

    def _window_learned(self, record: SettingsChangedRecord) -> None:
        """Say so, and tell the runtime: its next sessions on this endpoint and model start
        with the window, and this one runs with it from its next resume (a live session keeps
        the rules it started with; each refusal until then is recovered from as this one)."""
        window = record.changes["context_window"][1]
        self._log.warning(
            "context_window_learned",
            window=window,
            source="the provider's refusal",
            fix="set --context-window N, or context_window in the model's profile, to start "
            "with it",
        )
        self.ctx.publish(
            SettingsChanged(
                session_id=self.ctx.session_id, changes=record.changes, source=record.source
            )
        )
        if self.ctx.window_learned is not None:
            self.ctx.window_learned(window)

    def _overflow_fit(self, error: ContextLengthExceeded) -> int | None:
        """Tokens a request may carry after the provider refused one: its stated window less
        the output asked for, else the budget's window (below what it counted, if it said),
        else half of what it counted; None when nothing is known. A hard-mark margin is kept,
        as the figure is still an estimate."""
        marks = self.accounting.marks
        if error.limit is not None:
            return int((error.limit - (self.ctx.settings.max_output_tokens or 0)) * marks.hard)
        fits: list[int] = []
        budget = self.accounting.budget
        if budget is not None:
            fits.append(int((budget.usable + budget.tool_tokens) * marks.hard))
        if error.tokens is not None:
            fits.append(int(error.tokens * marks.target))
        return min(fits) if fits else None

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
