"""The compactor's decisions: from one committed snapshot to an ``Advice`` for the sampler.

This is where the compaction policy runs, in every mode: the seed's threshold rule, and the
watermarks (cap new outputs above ``tool_output_cap``; at the soft mark stub old outputs in a
batch; at the compaction mark, or earlier when the growth forecast says a plan would come back
too late, ask for a summary; at the hard mark make the sampler wait, and when nothing is in
flight free what can be freed without a model). What a summary job brings back is checked
here against the newest snapshot before it is advised: the outputs the turn just read are
re-attached, and below the hard mark a plan that frees too little is not applied.

No I/O and no awaits: every method runs between two awaits of the compactor, so the state
(``Control``'s fields) only ever changes in one place. Decisions are the pure functions of
``stowage.policy``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import structlog
from stowage.core import (
    CompactionDecided,
    CompactionSkipped,
    Event,
)
from stowage.policy import (
    Forecast,
    PolicyDecision,
    loop_message,
    safe_cover,
)

from ._accounting import Accounting
from ._messages import Advice, Ask, CommittedSnapshot, Plan, PlanFailed, Stubs
from ._overflow import REASON as OVERFLOW_REASON
from ._overflow import deeper_relief
from ._planner import Planner, View, decide_for

__all__ = ["Control", "SummaryJob"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryJob:
    """A summary to ask the model for: of ``snapshot``'s history through ``covers_through``."""

    snapshot: CommittedSnapshot
    covers_through: int
    reason: str
    tokens: int | None
    estimated: bool
    urgent: bool
    kind: Literal["auto", "manual", "overflow", "phase"] = "auto"
    focus: str | None = None
    ask_id: int = 0
    started: float = 0.0
    #: make the summary from the original records since the last re-grounding
    reground: bool = False


class Control:
    """The policy state of one session's compactor; it outlives a parked run of the actors."""

    def __init__(
        self,
        accounting: Accounting,
        publish: Callable[[Event], None],
        log: structlog.typing.FilteringBoundLogger,
    ) -> None:
        self.accounting = accounting
        self.settings = accounting.settings
        self.marks = accounting.marks
        self.publish = publish
        self.log = log
        self.forecast = Forecast()
        self.planner = Planner(accounting, log, self.forecast)
        #: microcompaction acts once per crossing of the soft mark (``micro_min_free``)
        self.armed = True
        self.job: SummaryJob | None = None
        #: a plan advised and not yet taken by the sampler: no other is asked for meanwhile
        self.pending: Plan | None = None
        #: the newest snapshot decided on (what a finished summary is checked against)
        self.latest: CommittedSnapshot | None = None
        self._seen_compaction = 0
        #: after a plan was skipped for freeing too little, none is asked for below the hard
        #: mark until the context grew past this many tokens
        self._hold_until: int | None = None

    # -- per snapshot ------------------------------------------------------------------

    def seen(self, snap: CommittedSnapshot, *, unread: bool) -> None:
        """Forget the pending plan once the sampler dealt with it: the snapshot shows a
        newer compaction, or the plan is no longer ``unread`` in the sampler's slot and a
        round or turn committed since (the sampler applies what it took before either)."""
        pending = self.pending
        if pending is None:
            return
        if snap.last_compaction_seq != pending.based_on_compaction_seq or (
            not unread and snap.cause in ("round", "turn")
        ):
            self.pending = None

    def decide(self, snap: CommittedSnapshot, now: float) -> tuple[Advice, SummaryJob | None]:
        """The verdict on a new snapshot, and a summary job to start, if one is due."""
        self.latest = snap
        if not self.accounting.active:
            return self._threshold(snap, now)
        view = self.planner.view(snap)
        landed = snap.last_compaction_seq != self._seen_compaction
        self._seen_compaction = snap.last_compaction_seq
        if landed:
            self.forecast.reset_to(view.tokens)
        stubs: list[Stubs] = []
        if snap.cause == "seed" and self.planner.decision(view).action != "block":
            # the state a session starts from was decided on before it stopped (what was
            # decided is in the log): deciding again with a memory that starts empty would
            # send another request than the one the stopped process sent; the next
            # boundary is decided as usual (at the hard mark, this one is too)
            self.forecast.sent = view.tokens
            return Advice(basis_seq=snap.last_seq), None
        view = self.planner.cap_outputs(view, stubs)
        decision = self.planner.decision(view)
        announce(decision, snap, self.log, self.publish)
        if snap.cause == "round":
            floor = (view.tokens or 0) - self.planner.old_output_savings(view)
            self.forecast.observe(view.tokens, floor, now)
        else:
            self.forecast.sent = view.tokens
        if snap.looping is not None and snap.turn_open:
            return loop_advice(snap, self.accounting), None
        phase = self._phase_plan(view, decision, now)
        if phase is not None:
            # the phase's compaction is taken here: the sampler waits for it at this boundary
            return Advice(basis_seq=snap.last_seq, stubs=tuple(stubs), block=True), phase
        if decision.action == "none":
            self.armed = True
            return Advice(basis_seq=snap.last_seq, stubs=tuple(stubs)), None
        if landed and snap.turn_compactions:
            view, decision, fallback = self._after_compaction(view, decision, stubs)
            if fallback is not None:
                return Advice(basis_seq=snap.last_seq, stubs=tuple(stubs), outcome=fallback), None
        if self._micro_due(decision):
            stubbed = self.planner.stub(
                view, decision, self.planner.keep_rounds(view), stubs, batch=True
            )
            if stubbed is not None:
                view, decision = stubbed
                self.armed = False
                self.forecast.reset_to(view.tokens)
        job = self._maybe_plan(view, decision, now)
        advice = Advice(basis_seq=snap.last_seq, stubs=tuple(stubs))
        if decision.action == "block":
            return self._relieve(view, decision, advice), job
        if self.job is not None and not self.settings.background_compaction:
            return replace(advice, block=True), job
        return advice, job

    def _threshold(self, snap: CommittedSnapshot, now: float) -> tuple[Advice, SummaryJob | None]:
        """The seed's rule: a due compaction is waited for before the next round."""
        advice = Advice(basis_seq=snap.last_seq)
        if snap.cause != "round" or self.job is not None:
            return replace(advice, block=self.job is not None and self.job.urgent), None
        decision = decide_for(snap, self.settings)
        if decision.skipped:
            self.log.info("compaction_skipped", tokens=decision.tokens, reason=decision.reason)
            self.publish(CompactionSkipped(session_id=snap.session_id, reason=decision.reason))
        if not decision.compact:
            return advice, None
        job = self._start(
            snap,
            covers_through=self.planner.cut(self.planner.view(snap), None),
            reason=decision.reason,
            tokens=decision.tokens,
            estimated=False,
            urgent=True,
            now=now,
        )
        return replace(advice, block=True), job

    # -- asks ----------------------------------------------------------------------------

    def ask(
        self, snap: CommittedSnapshot, ask: Ask, now: float
    ) -> tuple[Advice, SummaryJob | None]:
        """The answer to the sampler's ask, decided on the last committed snapshot."""
        self.latest = snap
        advice = Advice(basis_seq=snap.last_seq, answers=ask.ask_id)
        covers = safe_cover(snap.history, snap.last_seq, snap.open_calls)
        if ask.kind == "manual":
            if len([e for e in snap.history if e.seq <= covers]) < 2:
                return advice, None  # nothing to compact
            if self.job is not None:
                return advice, None  # a compaction is already being made
            job = self._start(
                snap,
                covers_through=covers,
                reason="manual compaction requested",
                tokens=snap.status.tokens if snap.status else None,
                estimated=bool(snap.status and snap.status.estimated),
                urgent=False,
                now=now,
                kind="manual",
                focus=ask.focus,
                ask_id=ask.ask_id,
                reground=ask.reground,
            )
            return replace(advice, block=True), job
        return self._overflow(snap, ask, advice, now)

    def _overflow(
        self, snap: CommittedSnapshot, ask: Ask, advice: Advice, now: float
    ) -> tuple[Advice, SummaryJob | None]:
        """Free room for a request the provider refused, one level per ask: 1 a summary
        that keeps what of the turn fits; deeper levels free room without a model
        (``deeper_relief``)."""
        view = self.planner.view(snap, ratio=ask.chars_per_token)
        if ask.level > 1:
            return deeper_relief(self.planner, view, ask, advice), None
        if self.job is not None:
            return replace(advice, block=True), None
        job = self._start(
            snap,
            covers_through=self.planner.cut(view, ask.fit),
            reason=OVERFLOW_REASON,
            tokens=view.tokens,
            estimated=True,
            urgent=True,
            now=now,
            kind="overflow",
            ask_id=ask.ask_id,
        )
        return replace(advice, block=True), job

    # -- summaries -----------------------------------------------------------------------

    def landed(self, job: SummaryJob, outcome: Plan | PlanFailed, now: float) -> Advice:
        """What to advise once ``job``'s summary came back: the plan re-attaching what the
        turn read, unless it frees too little below the hard mark; on a failure, nothing,
        or the no-model fallback when the sampler is blocked."""
        if self.job is job:
            self.job = None
        self.forecast.plan_took(now - job.started)
        snap = self.latest or job.snapshot
        advice = Advice(basis_seq=snap.last_seq, answers=job.ask_id)
        view = self.planner.view(snap)
        blocked = self.accounting.active and self.planner.decision(view).action == "block"
        if isinstance(outcome, PlanFailed):
            if (blocked or job.urgent) and not outcome.vetoed:
                plan = self.planner.fallback_plan(view, f"no plan to apply: {outcome.error}", None)
                if plan is not None:
                    return replace(advice, outcome=plan)
            return replace(advice, outcome=outcome)
        if outcome.based_on_compaction_seq != snap.last_compaction_seq:
            return replace(advice, outcome=outcome)  # stale: the sampler says so and skips it
        plan = self.planner.with_reattach(view, outcome)
        if job.kind == "auto" and self.accounting.active and not blocked:
            skipped = self.planner.frees_too_little(view, plan)
            if skipped is not None:
                self.log.info("compaction_skipped", reason=skipped)
                self.publish(CompactionSkipped(session_id=snap.session_id, reason=skipped))
                self._hold_until = (view.tokens or 0) + self.planner.min_free_tokens()
                return advice
        self.pending = plan
        return replace(advice, outcome=plan)

    def _start(
        self,
        snap: CommittedSnapshot,
        *,
        covers_through: int,
        reason: str,
        tokens: int | None,
        estimated: bool,
        urgent: bool,
        now: float,
        kind: Literal["auto", "manual", "overflow", "phase"] = "auto",
        focus: str | None = None,
        ask_id: int = 0,
        reground: bool = False,
    ) -> SummaryJob:
        every = self.settings.reground_every
        due = every > 0 and kind == "auto" and snap.fulls_since_reground + 1 >= every
        job = SummaryJob(
            snapshot=snap,
            covers_through=covers_through,
            reason=reason,
            tokens=tokens,
            estimated=estimated,
            urgent=urgent,
            kind=kind,
            focus=focus,
            ask_id=ask_id,
            started=now,
            reground=reground or due,
        )
        self.job = job
        self.log.info(
            "compaction_requested",
            round=snap.round,
            urgent=urgent,
            kind=kind,
            reground=job.reground,
            covers_through=covers_through,
            kept_verbatim=sum(1 for e in snap.history if e.seq > covers_through),
        )
        return job

    # -- the watermark policy ------------------------------------------------------------

    def _phase_plan(self, view: View, decision: PolicyDecision, now: float) -> SummaryJob | None:
        """A full compaction at the end of a phase: a milestone above the soft mark (the
        preferred place, taken there rather than a few rounds later, and the summary is told
        the phase that ended), or ``compact_every_turns`` turns finished since the last one."""
        snap = view.snapshot
        if self.job is not None or self.pending is not None:
            return None
        every = self.settings.compact_every_turns
        by_turns = every > 0 and not snap.turn_open and snap.turns_since_compaction >= every
        at_milestone = snap.cause == "milestone" and decision.action != "none"
        if not (by_turns or at_milestone):
            return None
        covers = self.planner.cut(view, None)
        if sum(1 for e in snap.history if e.seq <= covers) < 2:
            return None
        if at_milestone:
            reason = f"milestone {snap.milestone!r} reached above the soft mark"
            focus = (
                f"The phase {snap.milestone!r} has just ended: summarize it as a finished "
                "phase (what it set out to do, what it found, what it left for later)."
            )
        else:
            reason = f"{snap.turns_since_compaction} turns since the last compaction"
            focus = None
        return self._start(
            snap,
            covers_through=covers,
            reason=reason,
            tokens=decision.tokens,
            estimated=decision.estimated,
            urgent=False,
            now=now,
            kind="phase",
            focus=focus,
        )

    def _micro_due(self, decision: PolicyDecision) -> bool:
        """Whether to stub now: with ``micro_min_free`` 0, every round past the soft mark;
        else once per crossing of the soft mark, at the compaction mark or above, or before
        it once the next round may reach it at the largest recent growth."""
        if not self.settings.micro_min_free:
            return True
        if not self.armed:
            return False
        if decision.action != "microcompact" or decision.tokens is None:
            return True
        steps = self.forecast.steps
        if not steps:
            return True
        return decision.tokens + max(steps) >= self.marks.compact * self.accounting.usable

    def _maybe_plan(self, view: View, decision: PolicyDecision, now: float) -> SummaryJob | None:
        """A summary job at the compaction mark, or earlier (past the soft mark) when at the
        recent growth it would not be back before the hard mark; none while one is in flight,
        while a skipped one's hold lasts below the hard mark, or when it cannot free enough."""
        if self.job is not None or self.pending is not None or decision.tokens is None:
            return None
        late = None
        if decision.action == "microcompact" and self.settings.background_compaction:
            late = self.forecast.lands_late(
                decision.tokens,
                usable=self.accounting.usable,
                marks=self.marks,
                micro_min_free=self.settings.micro_min_free,
                armed=self.armed,
            )
        if decision.action not in ("compact", "block") and late is None:
            return None
        hold = self._hold_until
        if decision.action != "block" and hold is not None and decision.tokens < hold:
            return None
        self._hold_until = None
        if not self._worth_compacting(view, decision):
            return None
        covers = self.planner.cut(view, None)
        if decision.action != "block" and self.planner.absorbs_newest_round(view, covers):
            # what the model just asked for would go: it would ask again, and this frees the
            # room only for that; below the hard mark the turn goes on as it is
            self._skip(
                view.snapshot,
                f"{decision.reason}; not compacting below the hard mark: the turn's newest "
                "round does not fit beside a summary, and it is what the model just read",
            )
            return None
        if decision.action != "block" and not self.planner.frees_enough(view, covers):
            # below the hard mark a plan that frees too little is not applied: not asked for
            # either (microcompaction holds the context down meanwhile)
            return None
        reason = decision.reason if late is None else f"{decision.reason}; {late}"
        return self._start(
            view.snapshot,
            covers_through=covers,
            reason=reason,
            tokens=decision.tokens,
            estimated=decision.estimated,
            urgent=decision.action == "block",
            now=now,
        )

    def _worth_compacting(self, view: View, decision: PolicyDecision) -> bool:
        """Whether a compaction now is worth one (said when it is not)."""
        why_not = self.planner.not_worth(view, decision)
        if why_not is not None:
            self._skip(view.snapshot, why_not)
        return why_not is None

    def _after_compaction(
        self, view: View, decision: PolicyDecision, stubs: list[Stubs]
    ) -> tuple[View, PolicyDecision, Plan | None]:
        view, decision, plan, why_not = self.planner.after_compaction(view, decision, stubs)
        if why_not is not None:
            self._skip(view.snapshot, why_not)
        return view, decision, plan

    def _relieve(self, view: View, decision: PolicyDecision, advice: Advice) -> Advice:
        """At the hard mark: wait for the plan in flight, or apply the one advised; with
        neither, free what can be freed without a model (``Planner.relieve``)."""
        if self.job is not None:
            return replace(advice, block=True)
        if self.pending is not None:
            return advice  # the sampler applies it at this boundary (the advice carries it)
        return self.planner.relieve(view, decision, advice)

    def _skip(self, snap: CommittedSnapshot, reason: str) -> None:
        self.log.info("compaction_skipped", reason=reason)
        self.publish(CompactionSkipped(session_id=snap.session_id, reason=reason))


def announce(
    decision: PolicyDecision,
    snap: CommittedSnapshot,
    log: structlog.typing.FilteringBoundLogger,
    publish: Callable[[Event], None],
) -> None:
    """Log and publish a decision that does something (``CompactionDecided``)."""
    if decision.action == "none":
        return
    log.info(
        "compaction_decided",
        action=decision.action,
        watermark=decision.watermark,
        tokens=decision.tokens,
        estimated=decision.estimated,
        usable=decision.usable,
        fraction=round(decision.fraction or 0.0, 3),
    )
    publish(
        CompactionDecided(
            session_id=snap.session_id,
            round=snap.round,
            action=decision.action,
            watermark=decision.watermark,
            tokens=decision.tokens,
            estimated=decision.estimated,
            usable=decision.usable,
            fraction=decision.fraction,
            reason=decision.reason,
        )
    )


def loop_advice(snap: CommittedSnapshot, accounting: Accounting) -> Advice:
    """Stop the turn: the ledger found a real compaction loop (the message names the
    figures)."""
    budget = accounting.budget
    message = loop_message(
        snap.looping or (),
        turn=snap.turn,
        compactions=snap.turn_compactions,
        context_window=budget.context_window if budget else None,
        usable=budget.usable if budget else None,
        tool_tokens=accounting.tool_tokens,
        chars_per_token=snap.status.chars_per_token if snap.status else 4.0,
    )
    return Advice(basis_seq=snap.last_seq, stop=message, stop_kind="loop")
