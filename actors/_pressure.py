"""The sampler's side of the watermark policy: microcompact, ask for plans, block, fall back.

The sampler calls it at round boundaries only: after a round is committed (``after_commit``),
before a request is sent (``before_request``), when the provider said a request did not fit
(``recover_overflow``: recalibrate from the count the provider stated, then free until the
request fits the window it stated, never skipping a step for freeing too little), and to
apply what the compactor sent back (``apply_ready_plan``,
``apply_plan_for``), so that the plan in flight and the compactions of a turn are counted in
one place. Decisions are the pure ``stowage.policy``; this module only writes records through
the session's ``Journal``, sends snapshots to the compactor through it and waits for plans.
In threshold mode (the seed rule) its own policy stays out of the way except for overflow
recovery; it still applies the plans the seed's rule waits for.

A compaction in the middle of a turn keeps the turn's newest whole tool rounds verbatim when
what it leaves still fits the target: the model keeps reading what it just asked for, instead
of asking for it again (see ``_loop_guard`` for when it does anyway).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TypeVar

import anyio
import structlog
from stowage.core import (
    PREVIEW_MIN_CHARS,
    CompactionDecided,
    CompactionError,
    CompactionLanded,
    CompactionSkipped,
    CompactionWaited,
    ContextLengthExceeded,
    ErrorRecord,
    FunctionCallOutput,
    Microcompacted,
    MicrocompactRecord,
    ModelRequest,
    entry_chars,
    item_chars,
)
from stowage.policy import (
    MIN_STUB_CHARS,
    Budget,
    PolicyDecision,
    TokenStatus,
    Watermarks,
    cache_key_for,
    calibrated_ratio,
    compaction_cut,
    decide,
    effective_threshold,
    fallback_summary,
    microcompact_batch,
    microcompact_candidates,
    ratio_from_stated,
    resolve_budget,
    rounds_to_hard_mark,
    token_status,
    tokens_after_compaction,
    turn_round_cuts,
    turn_rounds,
)

from ._context import SessionContext
from ._journal import Journal
from ._mailbox import Slot
from ._messages import Plan, PlanFailed, PlanOutcome, PlanRequest
from ._plans import PlanApplier

_N = TypeVar("_N", int, float)
__all__ = ["Pressure"]

_log = structlog.get_logger("stowage.pressure")

# share of the usable budget that kept user messages may take after a compaction
USER_SHARE = 0.25
# a compaction must be expected to free at least this share of the usable budget
_MIN_GAIN = 0.05
# characters a summary is assumed to take when choosing which of a turn's rounds to keep
_SUMMARY_ALLOWANCE_CHARS = 1200
# the most characters a no-model digest takes (``fallback_summary``'s own cap)
_FALLBACK_CHARS = 4000
# outputs shorter than this are not stubbed when freeing room for a refused request: a stub
# (~150 characters) would not be shorter
_OVERFLOW_STUB_CHARS = 200


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
        log: structlog.typing.FilteringBoundLogger | None = None,
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
        #: the ``prompt_cache_key`` the session's round requests carry
        self.cache_key = cache_key_for(settings, ctx.session_id)
        #: microcompaction acts once per crossing of the soft mark (``micro_min_free``)
        self._micro_armed = True
        # what landing before the hard mark is predicted from: the tokens of the request as
        # sent, what each recent round added to it, when recent rounds were committed, when
        # the plan in flight was asked for, how long plans took, and when a round began to
        # wait for one
        self._sent: int | None = None
        # short lists, not deques: a deque costs ~700 bytes however few it holds, and every
        # live session keeps these
        self._steps: list[int] = []  # the last 8
        self._commits: list[float] = []  # the last 6
        # tokens left after recent rounds if every old output were stubbed: what only a
        # compaction frees
        self._floors: list[int] = []  # the last 6
        self._requested_at: float | None = None
        self._plan_seconds: list[float] = []
        self._wait_started: float | None = None
        self.waited = 0.0
        self.turn_compactions = 0
        # the ratio the provider's own count gave, while recovering from its refusal; every
        # compaction then records it, so replay restarts its calibration from the same figure
        self._stated_ratio: float | None = None
        self._log = log if log is not None else _log.bind(session=ctx.session_id, actor="sampler")
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
        """The session's calibrated chars per token (while recovering from a refused request,
        the one the provider's stated count gave)."""
        if self._stated_ratio is not None:
            return self._stated_ratio
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
        now = anyio.current_time()
        if self.requested is not None and outcome.round >= self.requested:
            self.requested = None
            if self._requested_at is not None:
                self._plan_seconds = [*self._plan_seconds[-4:], now - self._requested_at]
                self._requested_at = None
        if isinstance(outcome, PlanFailed):
            if not outcome.vetoed:
                self._log.warning(
                    "compaction_unavailable", round=outcome.round, error=outcome.error
                )
            return False
        fraction = self.decision().fraction if self.budget is not None else None
        applied = await self._apply(outcome)
        if applied:
            waited = now - self._wait_started if self._wait_started is not None else 0.0
            self.ctx.publish(
                CompactionLanded(
                    session_id=self.ctx.session_id,
                    round=self.journal.state.round,
                    kind=outcome.kind,
                    fraction=fraction,
                    hard=self.marks.hard,
                    waited=waited,
                )
            )
            self._floors.clear()  # the floor is measured again from the compacted context
            await self._after_compaction(outcome)
        return applied

    async def _cap_outputs(self) -> None:
        """Outputs above ``tool_output_cap`` of the usable budget become head + tail + their
        artifact reference before any request carries them (no prefix is broken: they are
        the newest items); the log keeps them whole."""
        share = self.settings.tool_output_cap
        if not share or self.budget is None:
            return
        cap = max(PREVIEW_MIN_CHARS, int(share * self.budget.usable * self.ratio()))
        state = self.journal.state
        seqs = tuple(
            e.seq
            for e in state.history
            if isinstance(e.item, FunctionCallOutput)
            and e.seq not in state.stubbed
            and len(e.item.output) > cap
        )
        if not seqs:
            return
        before = self.status().tokens
        chosen = set(seqs)
        saved = sum(
            entry_chars(e) - entry_chars(e, chosen) for e in state.history if e.seq in chosen
        )
        after = None if before is None else max(0, before - int(saved / self.ratio()))
        reason = (
            f"{len(seqs)} tool output(s) above the cap of {cap} chars "
            f"({share:.0%} of the usable budget) shown as head and tail"
        )
        await self.journal.write(
            [
                MicrocompactRecord(
                    seq=state.last_seq + 1,
                    stubbed=seqs,
                    reason=reason,
                    tokens_before=before,
                    tokens_after=after,
                    estimated=True,
                )
            ]
        )
        self._log.info("tool_outputs_capped", stubbed=len(seqs), cap_chars=cap)
        self.ctx.publish(
            Microcompacted(
                session_id=self.ctx.session_id,
                stubbed=len(seqs),
                tokens_before=before,
                tokens_after=after,
                estimated=True,
                reason=reason,
            )
        )

    def _record_growth(self, tokens: int | None) -> None:
        """Remember what this round added to the request it sent, when it was committed, and
        its floor (the newest few of each are kept)."""
        if tokens is None:
            return
        now = anyio.current_time()
        if self._sent is not None:
            _keep_last(self._steps, max(0, tokens - self._sent), 8)
        _keep_last(self._commits, now, 6)
        _keep_last(self._floors, tokens - self._stub_savings(), 6)

    def _stub_savings(self) -> int:
        """Tokens stubbing every old output (past ``keep_rounds``) would free now."""
        state = self.journal.state
        seqs = set(microcompact_candidates(state.history, state.stubbed, self.marks.keep_rounds))
        if not seqs:
            return 0
        saved = sum(entry_chars(e) - entry_chars(e, seqs) for e in state.history if e.seq in seqs)
        return int(saved / self.ratio())

    def _floor_per_round(self) -> float | None:
        """Tokens a recent round added that stubs could not free; None before two rounds."""
        if len(self._floors) < 2:
            return None
        return max(0.0, (self._floors[-1] - self._floors[0]) / (len(self._floors) - 1))

    def _plan_rounds(self) -> int:
        """Rounds a plan asked for now takes to come back: the slowest of the recent plans
        over the recent time between rounds; 1 before a plan and two rounds were seen."""
        latency = max(self._plan_seconds, default=None)
        if latency is None or len(self._commits) < 2:
            return 1
        cadence = (self._commits[-1] - self._commits[0]) / (len(self._commits) - 1)
        return max(1, math.ceil(latency / max(cadence, 1e-6)))

    def _micro_due(self, decision: PolicyDecision) -> bool:
        """Whether to stub now. With ``micro_min_free`` 0, every round past the soft mark (the
        old way). Else once per crossing of the soft mark (``_micro_armed``): at the
        compaction mark or above, or before it once the next round may reach it at the
        largest growth of the recent rounds (the prefix is kept as long as it can be)."""
        if not self.settings.micro_min_free:
            return True
        if not self._micro_armed:
            return False
        if decision.action != "microcompact" or decision.tokens is None or self.budget is None:
            return True
        if not self._steps:
            return True
        return decision.tokens + max(self._steps) >= self.marks.compact * self.budget.usable

    def _lands_late(self, decision: PolicyDecision) -> str | None:
        """Why a plan must be asked for now: if it were asked for a round later and the next
        rounds grew as any stretch of the recent ones did, then, with the stubs
        microcompaction would make on the way, the context would reach the hard mark before
        the plan is back (the summarizer's observed latency, in rounds); None when it can
        wait. Raises nothing."""
        if decision.tokens is None or self.budget is None or not self._steps:
            return None
        step = max(self._steps)
        if step <= 0:
            return None
        rounds = self._plan_rounds()
        floor_step = self._floor_per_round()
        floor = self._floors[-1] if self._floors else decision.tokens
        recent = list(self._steps)
        # the next rounds as a repeat of any stretch of the recent ones, with the plan asked
        # for a round later: the soonest hard mark among them
        hard_in: int | None = None
        for start in range(len(recent)):
            found = rounds_to_hard_mark(
                tokens=decision.tokens,
                floor=min(floor, decision.tokens),
                steps=[recent[(start + k) % len(recent)] for k in range(rounds + 1)],
                floor_step=step if floor_step is None else min(floor_step, step),
                usable=self.budget.usable,
                marks=self.marks,
                micro_min_free=self.settings.micro_min_free,
                armed=self._micro_armed,
            )
            if found is not None and (hard_in is None or found < hard_in):
                hard_in = found
        if hard_in is None:
            return None
        return (
            f"planned early to land before the hard mark: rounds growing as the recent ones "
            f"did (up to +{step} tokens a round) reach it in {hard_in} round(s), a plan "
            f"takes ~{rounds}"
        )

    async def after_commit(self) -> None:
        """Soft mark: microcompact; compaction mark: ask for a plan in the background."""
        if not self.active:
            return
        await self._cap_outputs()
        decision = self._announce(self.decision())
        self._record_growth(decision.tokens)
        if decision.action == "none":
            self._micro_armed = True  # below the soft mark: the next crossing may stub
            return
        if self._micro_due(decision):
            stubbed = await self._microcompact(decision, self.marks.keep_rounds, batch=True)
            if stubbed is not None:
                decision = stubbed
                self._micro_armed = False
                # the floor's growth is measured again from after the stubs
                del self._floors[:-1]
        # a plan is asked for at the compaction mark, or earlier (past the soft mark) when at
        # the recent growth it would not be back before the hard mark
        late = self._lands_late(decision) if decision.action == "microcompact" else None
        early = late is not None and self.settings.background_compaction
        if late is not None and early:
            decision = replace(decision, reason=f"{decision.reason}; {late}")
        if (
            (decision.action in ("compact", "block") or early)
            and self.requested is None
            and self._worth_compacting(decision)
        ):
            self._request(decision, urgent=False)
            if not self.settings.background_compaction:
                await self._wait_for_plan(why="compaction mark, background compaction off")

    async def _wait_for_plan(self, *, why: str) -> None:
        requested = self.requested
        assert requested is not None
        started = self._wait_started = anyio.current_time()
        try:
            await self.apply_plan_for(requested)
        finally:
            self._waited(started, why)

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

    async def before_request(self) -> None:
        """Hard mark: no request goes out until compaction brought the context below it.

        Raises ``ContextLengthExceeded`` (the turn fails, the session stays) when nothing
        more can be freed and the request would still carry more than the hard mark.
        """
        if not self.active:
            return
        decision = self.decision()
        self._sent = decision.tokens
        if decision.action != "block":
            return
        await self._relieve(self._announce(decision), why="hard mark before a request")
        self._sent = self.status().tokens

    async def recover_overflow(self, error: ContextLengthExceeded, request: ModelRequest) -> None:
        """The provider refused ``request`` as too long: free room so it can be sent once more.

        The chars-per-token ratio is recalibrated from the input count the provider stated;
        then, until the request fits the window it stated (or, not stated, the budget's):
        compact (the plan in flight, else a new one that keeps only the turn's newest rounds
        that fit, dropping the oldest; a failed summary falls back), drop the oldest rounds a
        plan left after it, stub every older output, compact everything without a model. No
        step is skipped for freeing too little. An ``error`` record keeps the
        figures used. Raises ``error`` when auto compaction is off, and
        ``ContextLengthExceeded`` naming the figures when even all that does not fit.
        """
        if not self.settings.auto_compact:
            raise error
        chars = sum(item_chars(item) for item in request.input)
        stated = ratio_from_stated(chars, error.tokens, self.tool_tokens) if error.tokens else None
        ratio = stated or self.ratio()
        fit = self._overflow_fit(error, ratio)
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
        state = self.journal.state
        await self.journal.write(
            [
                ErrorRecord(
                    seq=state.last_seq + 1,
                    kind="context_length_exceeded",
                    message=f"{error}; {figures}",
                )
            ]
        )
        self._stated_ratio = stated
        started = self._wait_started = anyio.current_time()
        try:
            await self._free_to_fit(fit, f"the provider refused the request as too long: {error}")
        finally:
            self._stated_ratio = None
            self._waited(started, "context_length_exceeded")

    def _overflow_fit(self, error: ContextLengthExceeded, ratio: float) -> int | None:
        """Tokens a request may carry after the provider refused one: its stated window less
        the output asked for, else the budget's window (below what it counted, if it said),
        else half of what it counted; None when nothing is known. A hard-mark margin is kept,
        as the figure is still an estimate."""
        hard = self.marks.hard
        if error.limit is not None:
            return int((error.limit - (self.settings.max_output_tokens or 0)) * hard)
        fits: list[int] = []
        if self.budget is not None:
            fits.append(int((self.budget.usable + self.tool_tokens) * hard))
        if error.tokens is not None:
            fits.append(int(error.tokens * self.marks.target))
        return min(fits) if fits else None

    def _estimate(self) -> int:
        """Tokens of the next request, estimated from the projection at ``ratio()``."""
        protected = self.journal.protected_text()
        chars = self.journal.state.projected_chars + (len(protected) if protected else 0)
        return self.tool_tokens + math.ceil(chars / self.ratio())

    def _overflow_decision(self, fit: int | None, reason: str) -> PolicyDecision:
        tokens = self._estimate()
        usable = fit or (self.budget.usable if self.budget else max(1, tokens))
        return PolicyDecision(
            action="block",
            watermark="overflow",
            tokens=tokens,
            estimated=True,
            usable=usable,
            fraction=tokens / max(1, usable),
            reason=reason,
        )

    async def _free_to_fit(self, fit: int | None, reason: str) -> None:
        """The steps of ``recover_overflow``; stops as soon as the estimate fits ``fit``
        (with no ``fit`` known, every step is taken)."""

        def fits() -> bool:
            return fit is not None and self._estimate() <= fit

        decision = self._announce(self._overflow_decision(fit, reason))
        # 1. compaction: the plan in flight, else a new one that keeps what fits of the turn
        compacted = False
        if self.requested is not None:
            compacted = await self.apply_plan_for(self.requested)
        if not compacted or not fits():
            self._request(decision, urgent=True, target_tokens=fit)
            requested = self.requested
            assert requested is not None
            if not await self.apply_plan_for(requested):
                await self._fallback(decision, f"no plan to apply: {reason}", target_tokens=fit)
        # 2. drop the oldest of the turn's rounds the compaction kept, keeping the newest
        cuts = turn_round_cuts(self.journal.state.history)
        if not fits() and len(cuts) > 1:
            decision = self._overflow_decision(fit, reason)
            cut = self._cut(fit, keep_at_most=len(cuts) - 1)
            covers = cuts[0] if cut == self.journal.state.last_seq else cut
            await self._fallback(
                decision, f"oldest rounds dropped: {reason}", covers_through=covers
            )
        # 3. stub every older output
        if not fits():
            decision = self._overflow_decision(fit, reason)
            await self._microcompact(decision, 0, min_chars=_OVERFLOW_STUB_CHARS)
        # 4. everything
        if not fits() and self._everything_frees():
            decision = self._overflow_decision(fit, reason)
            await self._fallback(
                decision,
                f"everything compacted: {reason}",
                covers_through=self.journal.state.last_seq,
            )
        if fit is not None and not fits():
            raise ContextLengthExceeded(
                f"the refused request still carries ~{self._estimate()} tokens after compaction, "
                f"stubs and dropped rounds, above the {fit} the provider's window allows: what "
                "is left (system, protected state, the user's words) does not fit; not sending it"
            )

    def _everything_frees(self) -> bool:
        """Whether a no-model compaction of all history would leave less than there is (its
        digest replacing tool steps, answers, or a summary longer than a digest)."""
        state = self.journal.state
        protected = self.journal.protected_text()
        try:
            after = tokens_after_compaction(
                state.history,
                stubbed=state.stubbed,
                covers_through=state.last_seq,
                user_budget_chars=self.user_budget(),
                summary_chars=_FALLBACK_CHARS + (len(protected) if protected else 0),
                chars_per_token=self.ratio(),
                fixed_tokens=self.tool_tokens,
            )
        except CompactionError:  # pragma: no cover - only called at round boundaries
            return False
        return after < self._estimate()

    def _cut(self, target_tokens: int | None, *, keep_at_most: int | None = None) -> int:
        """``covers_through`` of a compaction now: mid-turn, the turn's newest rounds that fit
        ``target_tokens`` (default: the target mark) stay verbatim; else everything."""
        state = self.journal.state
        if self.budget is None or not state.turn_open:
            return state.last_seq
        target = (
            target_tokens
            if target_tokens is not None
            else int(self.marks.target * self.budget.usable)
        )
        protected = self.journal.protected_text()
        return compaction_cut(
            state.history,
            last_seq=state.last_seq,
            target_tokens=target,
            stubbed=state.stubbed,
            user_budget_chars=self.user_budget(),
            summary_chars=_SUMMARY_ALLOWANCE_CHARS + (len(protected) if protected else 0),
            chars_per_token=self.ratio(),
            fixed_tokens=self.tool_tokens,
            keep_at_most=keep_at_most,
        )

    async def _after_compaction(self, plan: Plan) -> None:
        """The target: a compaction that leaves more than ``target_after`` of the budget is
        followed by stubs of what it kept but the newest ``keep_rounds`` (the prefix changed
        anyway: they cost the prompt cache nothing more); at or above the soft mark, by stubs
        of every round but the open turn's; and, when that still leaves the context at or
        above the soft mark, by the no-model fallback, which says why. Between the target and
        the soft mark the lossy digest is not worth it: the next compaction will be a summary
        again."""
        self.turn_compactions += 1
        if not self.active or plan.kind != "full":
            return
        decision = self.decision()
        assert self.budget is not None
        fraction = decision.fraction or 0.0
        if fraction <= self.marks.target:
            return
        decision = await self._microcompact(decision, self.marks.keep_rounds) or decision
        fraction = decision.fraction or 0.0
        if fraction <= self.marks.target:
            return
        if fraction >= self.marks.soft:
            # before a lossy digest, stub what finished turns read as well (a stub can be
            # recalled; a digest cannot): only the open turn's own rounds stay whole. After a
            # plan made before this turn's rounds (one that came back late) no compaction can
            # keep them verbatim (its summary is newer than they are), so a digest now would
            # take what the model just asked for, and it would ask again.
            state = self.journal.state
            keep = min(self.marks.keep_rounds, turn_rounds(state.history) if state.turn_open else 0)
            if keep < self.marks.keep_rounds:
                decision = await self._microcompact(decision, keep) or decision
                fraction = decision.fraction or 0.0
                if fraction <= self.marks.target:
                    return
        reason = (
            f"after compaction {decision.tokens} tokens are {fraction:.0%} of the usable "
            f"{self.budget.usable}, above the target {self.marks.target:.0%}"
        )
        if fraction < self.marks.soft:
            self._skip(f"{reason} but below the soft mark {self.marks.soft:.0%}; no fallback")
        elif self._worth_compacting(decision):
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

    def _worth_compacting(self, decision: PolicyDecision) -> bool:
        """Whether a compaction of everything so far would free enough to be worth one: no
        compaction that frees nothing, and none at all past the per-turn cap. (Recovery from
        a refused request does not ask: see ``recover_overflow``.)"""
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
        if gain < _MIN_GAIN * decision.usable:
            self._skip(f"a compaction would free only {max(0, gain)} of {decision.tokens} tokens")
            return False
        return True

    def _request(
        self, decision: PolicyDecision, *, urgent: bool, target_tokens: int | None = None
    ) -> None:
        request = PlanRequest(
            reason=decision.reason,
            tokens=decision.tokens,
            estimated=decision.estimated,
            urgent=urgent,
        )
        snapshot = self.journal.snapshot(request=request)
        cut = self._cut(target_tokens)
        if cut < snapshot.last_seq:
            # the compactor summarizes only what the plan covers; the rest stays verbatim
            history = tuple(e for e in snapshot.history if e.seq <= cut)
            snapshot = replace(snapshot, history=history, last_seq=cut)
        self.requested = snapshot.round
        self._requested_at = anyio.current_time()
        self._log.info(
            "compaction_requested",
            round=snapshot.round,
            urgent=urgent,
            covers_through=snapshot.last_seq,
            kept_verbatim=len(self.journal.state.history) - len(snapshot.history),
        )
        self.journal.send_to_compactor(snapshot)

    async def _microcompact(
        self,
        decision: PolicyDecision,
        keep_rounds: int,
        *,
        min_chars: int = MIN_STUB_CHARS,
        batch: bool = False,
    ) -> PolicyDecision | None:
        """Stub old tool outputs; returns the decision after, or None if nothing was stubbed.

        ``batch``: only the oldest that free at least ``micro_min_free`` of the usable budget
        together, or none (one prefix break for a big gain); else every candidate."""
        state = self.journal.state
        if batch and self.budget is not None:
            min_free = int(self.settings.micro_min_free * self.budget.usable * self.ratio())
            seqs = microcompact_batch(
                state.history,
                state.stubbed,
                keep_rounds,
                min_free_chars=min_free,
                min_chars=min_chars,
            )
        else:
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
        # how long a request has been held back for this compaction (0: it landed in the
        # background), written into its record for ``show`` and the console
        waited = (
            anyio.current_time() - self._wait_started if self._wait_started is not None else 0.0
        )
        return await self.applier.apply(
            plan,
            user_budget_chars=self.user_budget(),
            chars_per_token=self.ratio(),
            tool_tokens=self.tool_tokens,
            waited=round(waited, 3),
        )

    async def _fallback(
        self,
        decision: PolicyDecision,
        reason: str,
        *,
        covers_through: int | None = None,
        target_tokens: int | None = None,
    ) -> None:
        """A no-model compaction through ``covers_through`` (default: what ``_cut`` gives
        for ``target_tokens``)."""
        state = self.journal.state
        cut = covers_through if covers_through is not None else self._cut(target_tokens)
        summary = fallback_summary([e.item for e in state.history if e.seq <= cut], reason=reason)
        plan = Plan(
            round=state.round,
            summary=summary,
            covers_through=cut,
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

    async def _relieve(self, decision: PolicyDecision, *, why: str) -> None:
        """Block until the context is below the hard mark: microcompact, wait for the plan in
        flight (or ask for one), fall back, stub every old output; else fail the turn.

        Raises ``ContextLengthExceeded`` as ``before_request``.
        """
        started = self._wait_started = anyio.current_time()
        waited = True  # unless a batch of stubs alone brings it down: that is not waiting
        try:
            if self.budget is not None:
                # a batch that frees micro_min_free, or nothing: rather than one stub a round
                # (a prefix break each), wait for the compaction
                decision = (
                    await self._microcompact(decision, self.marks.keep_rounds, batch=True)
                    or decision
                )
                if self._below_hard():
                    waited = False
                    return
            if self.requested is not None or self._worth_compacting(decision):
                if self.requested is None:
                    self._request(decision, urgent=True)
                requested = self.requested
                assert requested is not None
                if not await self.apply_plan_for(requested):
                    decision = self.decision() if self.budget is not None else decision
                    if not self._below_hard() and self._worth_compacting(decision):
                        await self._fallback(decision, f"no plan to apply at the {why}")
            if self._below_hard():
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
            if waited:
                self._waited(started, why)
            else:
                self._wait_started = None


def _keep_last(values: list[_N], value: _N, n: int) -> None:
    """Append ``value``, keeping only the last ``n``."""
    values.append(value)
    if len(values) > n:
        del values[0]
