"""The sampler's side of the watermark policy: microcompact, ask for plans, block, fall back.

The sampler calls it at round boundaries only: after a round is committed (``after_commit``),
before a request is sent (``before_request``), when the provider said a request did not fit
(``recover_overflow``), and to apply what the compactor sent back (``apply_ready_plan``,
``apply_plan_for``), so that the plan in flight and the compactions of a turn are counted in
one place. Decisions are the pure ``stowage.policy``; this module only writes records through
the session's ``Journal``, sends snapshots to the compactor through it and waits for plans.
In threshold mode (the seed rule) its own policy stays out of the way except for overflow
recovery; it still applies the plans the seed's rule waits for.
"""

from __future__ import annotations

import anyio
import structlog
from stowage.core import (
    CompactionDecided,
    CompactionError,
    CompactionSkipped,
    CompactionWaited,
    ContextLengthExceeded,
    Microcompacted,
    MicrocompactRecord,
    entry_chars,
)
from stowage.policy import (
    MIN_STUB_CHARS,
    Budget,
    PolicyDecision,
    TokenStatus,
    Watermarks,
    calibrated_ratio,
    decide,
    effective_threshold,
    fallback_summary,
    microcompact_candidates,
    resolve_budget,
    token_status,
    tokens_after_compaction,
)

from ._context import SessionContext
from ._journal import Journal
from ._mailbox import Slot
from ._messages import Plan, PlanFailed, PlanOutcome, PlanRequest
from ._plans import PlanApplier

__all__ = ["Pressure"]

_log = structlog.get_logger("stowage.pressure")

# share of the usable budget that kept user messages may take after a compaction
USER_SHARE = 0.25
# a compaction must be expected to free at least this share of the usable budget
_MIN_GAIN = 0.05


class Pressure:
    """Watermark bookkeeping of one sampler: the budget, the plan in flight, time waited.

    ``journal`` is how it reads and writes the session, ``applier`` applies plans, and
    ``outcomes`` is the slot the compactor answers in. Raises ``ConfigError`` when the
    settings' window leaves no usable budget.
    """

    def __init__(
        self,
        ctx: SessionContext,
        journal: Journal,
        applier: PlanApplier,
        outcomes: Slot[PlanOutcome],
    ) -> None:
        self.ctx = ctx
        self.journal = journal
        self.applier = applier
        self.outcomes = outcomes
        settings = ctx.settings
        self.settings = settings
        self.marks = Watermarks.from_settings(settings)
        self.threshold = effective_threshold(settings)
        self.budget: Budget | None = resolve_budget(settings, ctx.tools.specs())
        self.requested: int | None = None
        self.waited = 0.0
        self.turn_compactions = 0
        self._log = _log.bind(session=ctx.session_id, actor="sampler")
        if self.threshold is not None and settings.compact_threshold is None:
            self._log.info(
                "compaction_threshold_mode", model=settings.model, threshold=self.threshold
            )

    @property
    def active(self) -> bool:
        """Whether the watermark policy runs (a budget is known and auto compaction is on)."""
        return self.budget is not None and self.settings.auto_compact

    @property
    def tool_tokens(self) -> int:
        return self.budget.tool_tokens if self.budget is not None else 0

    def user_budget(self) -> int:
        """Characters of recent user messages a compaction keeps: the setting, capped in
        watermark mode at a quarter of the usable budget, so that on a small window the kept
        words alone cannot fill what the compaction is meant to free."""
        configured = self.settings.user_budget_chars
        if self.budget is None:
            return configured
        return min(configured, int(self.budget.usable * USER_SHARE * self.ratio()))

    def ratio(self) -> float:
        """The session's calibrated chars per token."""
        return calibrated_ratio(self.journal.state, self.tool_tokens)

    def status(self) -> TokenStatus:
        """Tokens of the next request, reported + estimated."""
        protected = self.journal.protected_text()
        return token_status(
            self.journal.state,
            tool_tokens=self.tool_tokens,
            extra_chars=len(protected) if protected else 0,
            require_reported=self.settings.require_reported_usage,
        )

    def decision(self) -> PolicyDecision:
        assert self.budget is not None
        return decide(self.status(), self.budget.usable, self.marks)

    # -- hooks ---------------------------------------------------------------------------

    def turn_started(self) -> None:
        self.turn_compactions = 0

    async def apply_ready_plan(self) -> None:
        """Apply the compactor's answer if one is waiting; never waits for one."""
        outcome = self.outcomes.take()
        if outcome is not None:
            await self.apply_outcome(outcome)

    async def apply_plan_for(self, round_: int) -> bool:
        """Wait for the compactor's answer on round ``round_`` (or a later one) and apply it;
        True when history was compacted."""
        outcome = await self.outcomes.get_when(lambda o: o.round >= round_)
        return await self.apply_outcome(outcome)

    async def apply_outcome(self, outcome: PlanOutcome) -> bool:
        """Apply a plan (a failure is logged and applies nothing); True when history was
        compacted. A request the outcome answers is no longer in flight."""
        if self.requested is not None and outcome.round >= self.requested:
            self.requested = None
        if isinstance(outcome, PlanFailed):
            self._log.warning("compaction_unavailable", round=outcome.round, error=outcome.error)
            return False
        applied = await self._apply(outcome)
        if applied:
            await self._after_compaction(outcome)
        return applied

    async def after_commit(self) -> None:
        """Soft mark: microcompact; compaction mark: ask for a plan in the background."""
        if not self.active:
            return
        decision = self._announce(self.decision())
        if decision.action == "none":
            return
        decision = await self._microcompact(decision, self.marks.keep_rounds) or decision
        if (
            decision.action in ("compact", "block")
            and self.requested is None
            and self._worth_compacting(decision)
        ):
            self._request(decision, urgent=False)
            if not self.settings.background_compaction:
                await self._wait_for_plan(why="compaction mark, background compaction off")

    async def _wait_for_plan(self, *, why: str) -> None:
        requested = self.requested
        assert requested is not None
        started = anyio.current_time()
        try:
            await self.apply_plan_for(requested)
        finally:
            self._waited(started, why)

    def _waited(self, started: float, why: str) -> None:
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

    async def before_request(self) -> None:
        """Hard mark: no request goes out until compaction brought the context below it.

        Raises ``ContextLengthExceeded`` (the turn fails, the session stays) when nothing
        more can be freed and the request would still carry more than the hard mark.
        """
        if not self.active:
            return
        decision = self.decision()
        if decision.action != "block":
            return
        await self._relieve(self._announce(decision), why="hard mark before a request")

    async def recover_overflow(self, error: ContextLengthExceeded) -> None:
        """The provider refused a round as too long: compact now, blocking, so the round can
        be sent once more. Raises ``error`` when auto compaction is off."""
        if not self.settings.auto_compact:
            raise error
        self._log.warning("context_length_exceeded", error=str(error))
        status = self.status()
        usable = self.budget.usable if self.budget else max(1, status.tokens or 1)
        decision = PolicyDecision(
            action="block",
            watermark="overflow",
            tokens=status.tokens,
            estimated=status.estimated,
            usable=usable,
            fraction=status.fraction(usable),
            reason=f"the provider refused the request as too long: {error}",
        )
        await self._relieve(self._announce(decision), why="context_length_exceeded", forced=True)

    async def _after_compaction(self, plan: Plan) -> None:
        """The target: a compaction that leaves more than ``target_after`` of the budget is
        followed by the no-model fallback, which says why."""
        self.turn_compactions += 1
        if not self.active or plan.kind != "full":
            return
        decision = self.decision()
        assert self.budget is not None
        fraction = decision.fraction or 0.0
        if fraction <= self.marks.target:
            return
        reason = (
            f"after compaction {decision.tokens} tokens are {fraction:.0%} of the usable "
            f"{self.budget.usable}, above the target {self.marks.target:.0%}"
        )
        if self._worth_compacting(decision):
            await self._fallback(decision, reason)
        else:
            self._skip(f"{reason}; the fallback would free nothing more")

    # -- actions -------------------------------------------------------------------------

    def _announce(self, decision: PolicyDecision) -> PolicyDecision:
        if decision.action != "none":
            state = self.journal.state
            self._log.info(
                "compaction_decided",
                action=decision.action,
                watermark=decision.watermark,
                tokens=decision.tokens,
                estimated=decision.estimated,
                usable=decision.usable,
                fraction=round(decision.fraction or 0.0, 3),
            )
            self.ctx.publish(
                CompactionDecided(
                    session_id=self.ctx.session_id,
                    round=state.round,
                    action=decision.action,
                    watermark=decision.watermark,
                    tokens=decision.tokens,
                    estimated=decision.estimated,
                    usable=decision.usable,
                    fraction=decision.fraction,
                    reason=decision.reason,
                )
            )
        return decision

    def _skip(self, reason: str) -> None:
        self._log.info("compaction_skipped", reason=reason)
        self.ctx.publish(CompactionSkipped(session_id=self.ctx.session_id, reason=reason))

    def _worth_compacting(self, decision: PolicyDecision, *, forced: bool = False) -> bool:
        """Whether a compaction of everything so far would free enough to be worth one: no
        compaction that frees nothing, and none at all past the per-turn cap. ``forced`` (the
        provider refused a request): anything freed is worth it."""
        if self.turn_compactions >= self.settings.max_compactions_per_turn:
            self._skip(
                f"{self.turn_compactions} compactions this turn already (the cap is "
                f"{self.settings.max_compactions_per_turn})"
            )
            return False
        state = self.journal.state
        if decision.tokens is None:
            return False
        try:
            after = tokens_after_compaction(
                state.history,
                stubbed=state.stubbed,
                covers_through=state.last_seq,
                user_budget_chars=self.user_budget(),
                summary_chars=0,
                chars_per_token=self.ratio(),
                fixed_tokens=self.tool_tokens,
            )
        except CompactionError:  # pragma: no cover - only called at round boundaries
            return False
        gain = decision.tokens - after
        if gain < (1 if forced else _MIN_GAIN * decision.usable):
            self._skip(f"a compaction would free only {max(0, gain)} of {decision.tokens} tokens")
            return False
        return True

    def _request(self, decision: PolicyDecision, *, urgent: bool) -> None:
        request = PlanRequest(
            reason=decision.reason,
            tokens=decision.tokens,
            estimated=decision.estimated,
            urgent=urgent,
        )
        snapshot = self.journal.snapshot(request=request)
        self.requested = snapshot.round
        self._log.info("compaction_requested", round=snapshot.round, urgent=urgent)
        self.journal.send_to_compactor(snapshot)

    async def _microcompact(
        self, decision: PolicyDecision, keep_rounds: int, *, min_chars: int = MIN_STUB_CHARS
    ) -> PolicyDecision | None:
        """Stub old tool outputs; returns the decision after, or None if nothing was stubbed."""
        state = self.journal.state
        seqs = microcompact_candidates(
            state.history, state.stubbed, keep_rounds, min_chars=min_chars
        )
        if not seqs:
            return None
        chosen = set(seqs)
        saved = sum(
            entry_chars(e) - entry_chars(e, chosen) for e in state.history if e.seq in chosen
        )
        before = decision.tokens
        after = None if before is None else max(0, before - int(saved / self.ratio()))
        record = MicrocompactRecord(
            seq=state.last_seq + 1,
            stubbed=seqs,
            reason=decision.reason,
            tokens_before=before,
            tokens_after=after,
            estimated=decision.estimated,
        )
        await self.journal.write([record])
        self._log.info(
            "microcompacted",
            stubbed=len(seqs),
            tokens_before=before,
            tokens_after=after,
            estimated=decision.estimated,
            watermark=decision.watermark,
        )
        self.ctx.publish(
            Microcompacted(
                session_id=self.ctx.session_id,
                stubbed=len(seqs),
                tokens_before=before,
                tokens_after=after,
                estimated=decision.estimated,
                reason=decision.reason,
            )
        )
        return self.decision() if self.budget is not None else None

    async def _apply(self, plan: Plan) -> bool:
        return await self.applier.apply(
            plan,
            user_budget_chars=self.user_budget(),
            chars_per_token=self.ratio(),
            tool_tokens=self.tool_tokens,
        )

    async def _fallback(self, decision: PolicyDecision, reason: str) -> None:
        state = self.journal.state
        summary = fallback_summary([e.item for e in state.history], reason=reason)
        plan = Plan(
            round=state.round,
            summary=summary,
            covers_through=state.last_seq,
            reason=f"fallback: {reason}",
            tokens_before=decision.tokens,
            estimated=decision.estimated,
            based_on_compaction_seq=state.last_compaction_seq,
            kind="fallback",
        )
        self._log.warning("compaction_fallback", reason=reason, tokens=decision.tokens)
        if await self._apply(plan):
            self.turn_compactions += 1

    def _below_hard(self) -> bool:
        return self.budget is None or self.decision().action != "block"

    async def _relieve(self, decision: PolicyDecision, *, why: str, forced: bool = False) -> None:
        """Block until the context is below the hard mark: microcompact, wait for the plan in
        flight (or ask for one), fall back, stub every old output; else fail the turn.

        ``forced`` (the provider refused a request): compact whatever the estimate says and
        return, for one more attempt. Raises ``ContextLengthExceeded`` as ``before_request``.
        """
        started = anyio.current_time()
        try:
            if self.budget is not None:
                decision = await self._microcompact(decision, self.marks.keep_rounds) or decision
                if not forced and self._below_hard():
                    return
            if self.requested is not None or self._worth_compacting(decision, forced=forced):
                if self.requested is None:
                    self._request(decision, urgent=True)
                requested = self.requested
                assert requested is not None
                if not await self.apply_plan_for(requested):
                    decision = self.decision() if self.budget is not None else decision
                    if (forced or not self._below_hard()) and self._worth_compacting(
                        decision, forced=forced
                    ):
                        await self._fallback(decision, f"no plan to apply at the {why}")
            if forced or self._below_hard():
                return
            # last resort before refusing: every older tool output becomes a stub
            decision = await self._microcompact(self.decision(), 0, min_chars=1) or decision
            if self._below_hard():
                return
            raise ContextLengthExceeded(
                f"the next request would carry {decision.tokens} tokens, "
                f"{(decision.fraction or 0):.0%} of the usable budget, and compaction cannot "
                "free more; not sending it"
            )
        finally:
            self._waited(started, why)
