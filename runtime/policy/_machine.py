"""The compaction machine: every compaction decision of a session, as one pure state machine.

``step(state, event) -> (state, actions)``. The state is a frozen value: a phase and the
figures the decision needs. Events are what the compactor hears: a durable boundary (a
committed round, a turn's input, an applied or dropped plan, a round stopped for approval,
a milestone, a request the provider refused), a manual request, a summary ready or failed.
Actions are what the shells do: stub these outputs, make a summary of this range, apply this
plan, hold the next request, stop the turn with these figures, and the notes they log.

The modes are configurations of this one machine, never separate paths, so every guard holds
in each of them:

- the seed's fixed threshold (``Accounting.threshold``): after a committed round whose
  reported usage reached it, a summary of everything the next round waits for;
- the watermarks (a known window): cap new outputs above ``tool_output_cap``, stub old ones
  in a batch past the soft mark, ask for a summary in the background at the compaction mark
  (earlier when the growth forecast says it would come back too late);
- phases (a milestone above the soft mark, ``compact_every_turns``), re-grounding
  (``reground_every``) and provider compaction (made by the summary job) in either.

Whatever the mode: no request is let go at or above the limit (the hard mark of a known
window, or what a provider's refusal said fits): the machine holds it while a summary is
made, then stubs every older output and compacts without a model, and when even that cannot
bring it under, stops the turn with the figures; a real compaction loop (``TurnLedger``)
stops the turn; no plan covers an open call; no compaction grows history.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from dataclasses import replace
from typing import Literal, NamedTuple, assert_never

from stowage.core import ConfigError, FunctionCallOutput

from ._compaction import decide_compaction
from ._machine_terms import (
    Answer,
    Apply,
    Boundary,
    Decided,
    Event,
    Hold,
    Job,
    JobKind,
    MachineState,
    Manual,
    Phase,
    Skipped,
    Step,
    Stop,
    Stub,
    Summarize,
    SummaryFailed,
    SummaryReady,
    Work,
)
from ._ruler import SUMMARY_ALLOWANCE_CHARS, Ruler, View
from ._snapshot import Plan, Snapshot
from ._tokens import TokenStatus
from ._turns import loop_message
from ._watermarks import PolicyDecision, decide

__all__ = ["MIN_GROWTH", "step"]

#: on the seed's threshold, usage must grow by this share of the threshold after a compaction
#: before another one is worth its summary request
MIN_GROWTH = 0.25


def step(state: MachineState, event: Event) -> Step:
    """The state after ``event``, and the actions it calls for. Raises nothing: every
    failure is an action (a skip, a fallback, a stop)."""
    match event:
        case Boundary():
            return _boundary(state, event.snapshot, event.now)
        case Manual():
            return _manual(state, event)
        case SummaryReady():
            return _ready(state, event)
        case SummaryFailed():
            return _failed(state, event)
        case _:  # pragma: no cover - the union is exhausted above
            assert_never(event)


# -- boundaries ------------------------------------------------------------------------------


def _boundary(state: MachineState, snap: Snapshot, now: float) -> Step:
    work = Work(state, [])
    # a refusal that taught the window (and so a smaller output reserve) needs no more when
    # what the provider counted of the request fits what it takes
    taught = _new_boundary(work, snap)
    state = work.state
    if state.phase is Phase.STOPPED:
        return work.done()  # the sampler stops the turn; nothing more is decided for it
    acc = state.accounting
    ruler = Ruler(acc)
    view = _view(state, ruler, snap)
    landed = snap.last_compaction_seq != state.seen_compaction
    if landed:
        work.set(
            seen_compaction=snap.last_compaction_seq, forecast=state.forecast.reset_to(view.tokens)
        )
    limit = state.limit()
    refused = snap.cause == "refused" and not taught
    if snap.cause == "seed" and not _over(view, limit):
        # the state a session starts from was decided on before it stopped (what was decided
        # is in the log): deciding again with a memory that starts empty would send another
        # request than the one the stopped process sent; over the limit it is decided anew
        work.set(forecast=work.state.forecast.sending(view.tokens))
        return work.done()
    if not acc.settings.auto_compact:
        if _over(view, limit) or refused:
            _stop(work, ruler.cannot_fit(view, limit or view.guard, "auto compaction is off"))
        return work.done()
    view, capped = ruler.capped(view)
    if capped is not None:
        work.add(Stub(capped))
    decision = _trigger(work.state, ruler, view, snap)
    if decision.action != "none" and acc.threshold is None:
        work.add(Decided(decision, snap.round))
    if snap.cause == "round":
        floor = (view.tokens or 0) - ruler.old_output_savings(view)
        work.set(forecast=work.state.forecast.observe(view.tokens, floor, now))
    else:
        work.set(forecast=work.state.forecast.sending(view.tokens))
    if snap.looping is not None and snap.turn_open:
        _stop_loop(work, snap)
        return work.done()
    if work.state.phase is Phase.IDLE:
        view = _phase_plan(work, ruler, view, decision, now)
    if acc.threshold is not None:
        if work.state.phase is Phase.IDLE:
            _threshold(work, ruler, view, now)
    elif acc.active:
        # stubs go on while a summary is made; a new summary only when none is
        view = _watermarks(work, ruler, view, decision, landed, now)
    if _over(view, limit) or refused:
        _relieve(work, ruler, view, limit, now, refused=refused)
    job = work.state.job
    if job is not None and (
        job.hold or not acc.settings.background_compaction or _over(view, limit)
    ):
        work.add(Hold())
    return work.done()


def _new_boundary(work: Work, snap: Snapshot) -> bool:
    """What a boundary settles before anything is decided."""
    state = work.state  # the step's input: nothing is set yet
    changes: dict[str, object] = {"latest": snap, "rounds": state.rounds.extended(snap.history)}
    if state.stubbing:
        outputs = {e.seq for e in snap.history if isinstance(e.item, FunctionCallOutput)}
        changes["stubbing"] = (state.stubbing & outputs) - snap.stubbed
    if snap.cause == "round":
        changes["strikes"] = 0  # a request went and came back: what follows is a new attempt
    phase = state.phase
    plan = state.plan
    skipped = None
    if plan is not None and (
        snap.last_compaction_seq != plan.based_on_compaction_seq
        or (snap.cause == "dropped" and snap.dropped == plan.id)
    ):
        if phase is Phase.ADVISED:
            phase = Phase.IDLE
        changes.update(plan=None, phase=phase)
        if snap.cause == "dropped":
            skipped = Skipped(snap.dropped_why or f"plan {plan.id} was not applied")
    fit, ratio = state.fit, state.ratio
    if snap.turn != state.turn or not snap.turn_open:
        fit = ratio = None
        changes.update(turn=snap.turn, fit=None, ratio=None, strikes=0)
        if phase is Phase.STOPPED:
            changes["phase"] = Phase.IDLE
    refusal = snap.refusal if snap.cause == "refused" else None
    taught = False
    if refusal is not None:
        fits = [f for f in (fit, refusal.fit) if f is not None]
        changes.update(fit=min(fits) if fits else None, ratio=refusal.ratio or ratio)
        if refusal.window is not None:
            # a stated window too small to hold anything teaches nothing: the fit guards
            with suppress(ConfigError):
                accounting = state.accounting.with_window(refusal.window)
                changes["accounting"] = accounting
                taught = accounting is not state.accounting
    work.set(**changes)
    if skipped is not None:
        work.add(skipped)
    return taught


def _view(state: MachineState, ruler: Ruler, snap: Snapshot) -> View:
    """``snap`` as the next request carries it."""
    view = ruler.view(snap, ratio=state.ratio, rounds=state.rounds)
    counted = snap.refusal.tokens if snap.cause == "refused" and snap.refusal else None
    if counted is not None and counted > view.guard:
        # the request the provider refused was as large as it counted, whatever the estimate
        view = replace(view, guard=counted, tokens=max(view.tokens or 0, counted))
    pending = tuple(sorted(state.stubbing - view.stubbed))
    if pending:
        view, _ = ruler.stubbed(view, pending, "given to the sampler")
    return view


def _over(view: View, limit: int | None) -> bool:
    return limit is not None and view.guard >= limit


def _trigger(state: MachineState, ruler: Ruler, view: View, snap: Snapshot) -> PolicyDecision:
    """The watermark the figure crossed."""
    acc = state.accounting
    if acc.threshold is None:
        return ruler.decision(view)
    reported = snap.usage.total_tokens if snap.usage is not None else None
    status = TokenStatus(
        tokens=reported, estimated=False, reported=reported, estimated_since=0, chars_per_token=4.0
    )
    scale = max(1, round(acc.threshold / acc.marks.compact))
    return decide(status, scale, acc.marks)


def _stop(work: Work, message: str, kind: Literal["loop", "overflow"] = "overflow") -> None:
    work.set(phase=Phase.STOPPED, job=None, plan=None, strikes=0)
    work.add(Stop(kind, message))


def _stop_loop(work: Work, snap: Snapshot) -> None:
    """Stop the turn: the ledger found a real compaction loop (the message names the figures)."""
    acc = work.state.accounting
    budget = acc.budget
    message = loop_message(
        snap.looping or (),
        turn=snap.turn,
        compactions=snap.turn_compactions,
        context_window=budget.context_window if budget else None,
        usable=budget.usable if budget else None,
        tool_tokens=acc.tool_tokens,
        chars_per_token=snap.status.chars_per_token,
    )
    _stop(work, message, "loop")


def _start(
    work: Work,
    view: View,
    *,
    covers_through: int,
    reason: str,
    kind: JobKind,
    urgent: bool,
    hold: bool,
    now: float,
    focus: str | None = None,
    ask_id: int = 0,
    reground: bool = False,
    tokens: int | None = None,
) -> Job:
    """Start a summary job (the shell makes it; ``SummaryReady`` or ``SummaryFailed`` ends it)."""
    state = work.state
    snap = view.snapshot
    every = state.accounting.settings.reground_every
    due = every > 0 and kind not in ("manual",) and snap.fulls_since_reground + 1 >= every
    job = Job(
        id=state.serial + 1,
        snapshot=snap,
        covers_through=covers_through,
        reason=reason,
        tokens=tokens
        if tokens is not None
        else view.tokens
        if view.tokens is not None
        else view.guard,
        estimated=view.tokens is None or snap.status.estimated,
        urgent=urgent,
        hold=hold,
        kind=kind,
        focus=focus,
        ask_id=ask_id,
        started=now,
        reground=reground or due,
        fraction=state.accounting.fraction(view.tokens),
    )
    work.set(serial=job.id, job=job, phase=Phase.SUMMARIZING)
    work.add(Summarize(job))
    if hold:
        work.add(Hold())
    return job


def _phase_plan(work: Work, ruler: Ruler, view: View, decision: PolicyDecision, now: float) -> View:
    """A full compaction at the end of a phase, in every mode."""
    snap = view.snapshot
    every = work.state.accounting.settings.compact_every_turns
    by_turns = every > 0 and not snap.turn_open and snap.turns_since_compaction >= every
    at_milestone = snap.cause == "milestone" and decision.action != "none"
    if not (by_turns or at_milestone):
        return view
    covers = ruler.cut(view, None)
    if ruler.coverable(view, covers) < 2:
        return view
    if at_milestone:
        reason = f"milestone {snap.milestone!r} reached above the soft mark"
        focus: str | None = (
            f"The phase {snap.milestone!r} has just ended: summarize it as a finished "
            "phase (what it set out to do, what it found, what it left for later)."
        )
    else:
        reason = f"{snap.turns_since_compaction} turns since the last compaction"
        focus = None
    _start(
        work,
        view,
        covers_through=covers,
        reason=reason,
        kind="phase",
        urgent=False,
        hold=True,
        now=now,
        focus=focus,
    )
    return view


def _threshold(work: Work, ruler: Ruler, view: View, now: float) -> None:
    """The seed's rule: a summary of everything once reported usage reached the threshold."""
    snap = view.snapshot
    acc = work.state.accounting
    threshold = acc.threshold
    if snap.cause != "round" or threshold is None:
        return
    tokens = snap.usage.total_tokens if snap.usage is not None else None
    decision = decide_compaction(
        tokens=tokens, threshold=threshold, history_length=len(snap.history)
    )
    if not decision.compact or tokens is None:
        return
    hold = work.state.hold_until
    if hold is not None and tokens < hold:
        return  # a summary made at this size was no smaller than what it replaced
    work.set(hold_until=None)
    base = snap.usage_after_compaction
    if base is not None and tokens - base < threshold * MIN_GROWTH:
        # what a compaction keeps (summary, recent user words) is itself over the threshold:
        # compacting again now would free almost nothing, round after round
        work.add(
            Skipped(
                f"Reported token usage {tokens} reached the compaction threshold {threshold}, "
                f"but only {tokens - base} tokens were added since the last compaction (which "
                f"left {base}); not compacting again until {int(threshold * MIN_GROWTH)} more. "
                "Lower user_budget_chars or raise the threshold."
            )
        )
        return
    cap = acc.settings.max_compactions_per_turn
    if snap.turn_open and snap.turn_compactions >= cap:
        work.add(
            Skipped(f"{snap.turn_compactions} compactions this turn already (the cap is {cap})")
        )
        return
    _start(
        work,
        view,
        covers_through=ruler.cover(view),
        reason=decision.reason,
        kind="threshold",
        urgent=True,
        hold=True,
        now=now,
        tokens=tokens,
    )


def _watermarks(
    work: Work, ruler: Ruler, view: View, decision: PolicyDecision, landed: bool, now: float
) -> View:
    """The watermark triggers: stubs past the soft mark, a summary at the compaction mark."""
    snap = view.snapshot
    if decision.action == "none":
        work.set(armed=True)
        return view
    if landed and snap.turn_compactions:
        before = work.state.phase
        view, decision = _after_compaction(work, ruler, view, decision)
        if work.state.phase is not before:
            return view  # a digest was advised
    if _micro_due(work.state, ruler, decision):
        stubbed = ruler.stub_old(
            view,
            ruler.keep_rounds(view),
            decision.reason,
            batch_free=ruler.min_free_tokens(work.state.forecast.steps),
        )
        if stubbed is not None:
            view, stubs = stubbed
            work.add(Stub(stubs))
            decision = ruler.decision(view)
            work.set(armed=False, forecast=work.state.forecast.reset_to(view.tokens))
    if work.state.phase is Phase.IDLE:
        _maybe_plan(work, ruler, view, decision, now)
    return view


def _micro_due(state: MachineState, ruler: Ruler, decision: PolicyDecision) -> bool:
    """Whether to stub now: every round past the soft mark, or once a crossing."""
    acc = state.accounting
    if not acc.settings.micro_min_free:
        return True
    if not state.armed:
        return False
    if decision.action != "microcompact" or decision.tokens is None:
        return True
    steps = state.forecast.steps
    if not steps:
        return True
    return decision.tokens + max(steps) >= acc.marks.compact * acc.usable


def _maybe_plan(work: Work, ruler: Ruler, view: View, decision: PolicyDecision, now: float) -> None:
    """A summary job at the compaction mark, or earlier."""
    state = work.state
    acc = state.accounting
    if decision.tokens is None:
        return
    late = None
    if decision.action == "microcompact" and acc.settings.background_compaction:
        late = state.forecast.lands_late(
            decision.tokens,
            usable=acc.usable,
            marks=acc.marks,
            micro_min_free=acc.settings.micro_min_free,
            armed=state.armed,
        )
    if decision.action not in ("compact", "block") and late is None:
        return
    blocking = decision.action == "block"
    if view.snapshot.cause == "refused":
        return  # the provider's refusal: ``_relieve`` answers it, in its own steps
    if blocking and state.strikes:
        return  # a summary was tried at this limit already: the next steps are ``_relieve``'s
    hold = state.hold_until
    if not blocking and hold is not None and decision.tokens < hold:
        return
    work.set(hold_until=None)
    why_not = ruler.not_worth(view, decision)
    if why_not is not None:
        work.add(Skipped(why_not))
        return
    covers = ruler.cut(view, None)
    if not blocking and ruler.absorbs_newest_round(view, covers):
        # what the model just asked for would go: it would ask again, and this frees the
        # room only for that; below the hard mark the turn goes on as it is
        work.add(
            Skipped(
                f"{decision.reason}; not compacting below the hard mark: the turn's newest "
                "round does not fit beside a summary, and it is what the model just read"
            )
        )
        return
    if not blocking and not ruler.frees_enough(view, covers, state.forecast.steps):
        return  # below the hard mark a plan that frees too little is not applied: nor asked
    _start(
        work,
        view,
        covers_through=covers,
        reason=decision.reason if late is None else f"{decision.reason}; {late}",
        kind="hard" if blocking else "auto",
        urgent=blocking,
        hold=blocking,
        now=now,
    )
    if blocking:
        work.set(strikes=work.state.strikes + 1)


def _after_compaction(
    work: Work, ruler: Ruler, view: View, decision: PolicyDecision
) -> tuple[View, PolicyDecision]:
    """A compaction just landed and left more than the target."""
    marks = work.state.accounting.marks
    if (decision.fraction or 0.0) <= marks.target:
        return view, decision
    for keep in _after_keeps(ruler, view, marks.keep_rounds):
        stubbed = ruler.stub_old(view, keep, decision.reason)
        if stubbed is not None:
            view, stubs = stubbed
            work.add(Stub(stubs))
            decision = ruler.decision(view)
        fraction = decision.fraction or 0.0
        if fraction <= marks.target or fraction < marks.soft:
            return view, decision
    why_not = ruler.not_worth(view, decision)
    if why_not is not None:
        work.add(Skipped(why_not))
        return view, decision
    reason = (
        f"after compaction {decision.tokens} tokens are {decision.fraction:.0%} of the "
        f"usable {work.state.accounting.usable}, above the soft mark {marks.soft:.0%}"
    )
    plan = ruler.fallback_plan(view, reason, None) if work.state.phase is Phase.IDLE else None
    if plan is not None:
        _advise(work, ruler, view, plan)
    return view, decision


def _after_keeps(ruler: Ruler, view: View, keep_rounds: int) -> Sequence[int]:
    """The rounds spared by the stubs after a compaction."""
    snap = view.snapshot
    turn = ruler.turn_rounds(view) if snap.turn_open else 0
    keeps = [ruler.keep_rounds(view)]
    if min(keep_rounds, turn) < keep_rounds:
        keeps.append(min(keep_rounds, turn))
    return keeps


def _relieve(
    work: Work, ruler: Ruler, view: View, limit: int | None, now: float, *, refused: bool
) -> None:
    """The next request would not fit (or was refused): wait, or step on until it fits."""
    state = work.state
    if state.phase is not Phase.IDLE:
        return  # a summary is being made, or a plan is with the sampler: wait for either
    freed = any(isinstance(a, Stub | Apply) for a in work.actions)
    if not _over(view, limit) and (freed or not refused):
        return  # what this boundary stubbed already brings the request under
    snap = view.snapshot
    settings = state.accounting.settings
    capped = snap.turn_open and snap.turn_compactions >= settings.max_compactions_per_turn
    level = state.strikes
    work.set(strikes=level + 1)
    target = limit if limit is not None else view.guard
    if snap.turn_open and limit is not None and ruler.floor(view) >= limit:
        # what the turn cannot do without is over the limit by itself: absorbing its newest
        # round would only make a model that reads each request alone read it again
        why = "nothing can be freed that the turn can do without"
        _stop(work, ruler.cannot_fit(view, limit, why))
        return
    if level == 0 and not capped and _summary_relieves(work, ruler, view, target, refused, now):
        return
    if level <= 1:
        stubbed = ruler.stub_old(view, 0, f"at the limit of {target} tokens", min_chars=1)
        if stubbed is not None:
            view, stubs = stubbed
            work.add(Stub(stubs))
            if not _over(view, limit) and not refused:
                return
        if not capped and _digest(work, ruler, view, limit, target, keep_reads=True):
            return
        if stubbed is not None:
            return  # the stubs go first; their boundary decides the next step
    if level <= 2 and not capped and _digest(work, ruler, view, limit, target, keep_reads=False):
        return
    why = (
        f"the turn made {snap.turn_compactions} compactions already (the cap is "
        f"{settings.max_compactions_per_turn})"
        if capped
        else "compaction, stubs and a digest of everything cannot free more"
    )
    _stop(work, ruler.cannot_fit(view, target, why))


def _summary_relieves(
    work: Work, ruler: Ruler, view: View, target: int, refused: bool, now: float
) -> bool:
    """Ask for a summary that keeps what of the turn fits."""
    state = work.state
    fit = state.fit
    covers = ruler.cut(view, None if fit is None else int(fit * state.accounting.marks.target))
    after = ruler.after_tokens(view, covers, SUMMARY_ALLOWANCE_CHARS)
    if ruler.coverable(view, covers) < 2 or after is None or after >= view.guard:
        work.add(Skipped(f"a summary would free nothing of {view.guard} tokens"))
        return False
    refused = refused or view.snapshot.cause == "refused"
    why = "the provider refused the request as too long" if refused else "at the hard mark"
    _start(
        work,
        view,
        covers_through=covers,
        reason=f"{why}: {view.guard} tokens, the limit is {target}",
        kind="refusal" if refused else "hard",
        urgent=True,
        hold=True,
        now=now,
    )
    return True


def _digest(
    work: Work, ruler: Ruler, view: View, limit: int | None, target: int, *, keep_reads: bool
) -> bool:
    """Give a no-model digest of everything the turn may cover, when it frees anything."""
    if not ruler.everything_frees(view, limit):
        return False
    plan = ruler.fallback_plan(
        view,
        f"no plan brings the request under the limit of {target} tokens",
        ruler.cover(view),
        limit=limit,
    )
    if plan is None:
        return False
    if plan.reattach:
        marks = work.state.accounting.marks
        after = ruler.plan_tokens(view, plan)
        roomy = after is not None and after <= target * marks.target / marks.hard
        if not (keep_reads and roomy):
            plan = replace(plan, reattach=())
    return _advise(work, ruler, view, plan)


def _advise(work: Work, ruler: Ruler, view: View, plan: Plan) -> bool:
    """Give ``plan`` to the sampler, unless it would grow history (said); True when given."""
    grows = ruler.grows(view, plan)
    if grows is not None:
        work.add(Skipped(f"not applied: {grows}"))
        return False
    plan = replace(plan, id=work.state.serial + 1)
    work.set(serial=plan.id, plan=plan, phase=Phase.ADVISED)
    work.add(Apply(plan))
    return True


# -- asks and summaries ----------------------------------------------------------------------


def _manual(state: MachineState, event: Manual) -> Step:
    """A manual compaction, on the newest boundary."""
    work = Work(state, [Answer(event.ask_id)])
    snap = state.latest
    if snap is None or state.phase is not Phase.IDLE:
        return work.done()
    ruler = Ruler(state.accounting)
    view = _view(state, ruler, snap)
    covers = ruler.cover(view)
    if ruler.coverable(view, covers) < 2:
        work.add(Skipped("manual compaction: nothing to compact"))
        return work.done()
    _start(
        work,
        view,
        covers_through=covers,
        reason=event.reason or "manual compaction requested",
        kind="manual",
        urgent=False,
        hold=True,
        now=event.now,
        focus=event.focus,
        ask_id=event.ask_id,
        reground=event.reground,
    )
    work.add(Hold())
    return work.done()


class _Landing(NamedTuple):
    """A summary job that ended, and the newest boundary it ended on, as the machine sees it."""

    work: Work
    job: Job
    snap: Snapshot
    ruler: Ruler
    view: View
    limit: int | None


def _landing(state: MachineState, job_id: int, now: float) -> _Landing | None:
    """Job ``job_id`` ended (its asker answered, the machine idle again); None when it is not the
    job in flight."""
    job = state.job
    if job is None or job.id != job_id or state.phase is not Phase.SUMMARIZING:
        return None
    work = Work(state, [Answer(job.ask_id)] if job.ask_id else [])
    work.set(job=None, phase=Phase.IDLE, forecast=state.forecast.plan_took(now - job.started))
    snap = work.state.latest or job.snapshot
    ruler = Ruler(work.state.accounting)
    view = _view(work.state, ruler, snap)
    return _Landing(work, job, snap, ruler, view, work.state.limit())


def _ready(state: MachineState, event: SummaryReady) -> Step:
    """A summary came back: checked against the newest boundary, re-attaching what the turn read;
    none that grows history is ever applied."""
    landing = _landing(state, event.job_id, event.now)
    if landing is None:
        return state, ()
    work, job, snap, ruler, view, limit = landing
    blocked = _over(view, limit)
    plan = event.plan
    if plan.based_on_compaction_seq != snap.last_compaction_seq:
        work.add(Skipped(f"stale plan for round {plan.round}: history was compacted since"))
        return _unblock(work, ruler, view, limit, event.now)
    if plan.covers_through > ruler.cover(view):
        work.add(Skipped(f"plan for round {plan.round} covers a call still open"))
        return _unblock(work, ruler, view, limit, event.now)
    plan = ruler.with_reattach(view, plan)
    acc = work.state.accounting
    if job.kind == "auto" and acc.active and not blocked:
        too_little = ruler.frees_too_little(view, plan, work.state.forecast.steps)
        if too_little is not None:
            work.add(Skipped(too_little))
            work.set(
                hold_until=(view.tokens or 0) + ruler.min_free_tokens(work.state.forecast.steps)
            )
            return work.done()
    if not _advise(work, ruler, view, plan):
        # not asked for again until the context grew by what a compaction must free
        if acc.threshold is not None:
            reported = snap.usage.total_tokens if snap.usage is not None else 0
            work.set(hold_until=reported + int(acc.threshold * MIN_GROWTH))
        else:
            steps = work.state.forecast.steps
            work.set(hold_until=(view.tokens or 0) + ruler.min_free_tokens(steps))
        return _unblock(work, ruler, view, limit, event.now)
    return work.done()


def _failed(state: MachineState, event: SummaryFailed) -> Step:
    """A summary failed: the digest stands in when the next request waits for it."""
    landing = _landing(state, event.job_id, event.now)
    if landing is None:
        return state, ()
    work, job, _, ruler, view, limit = landing
    if event.vetoed:
        work.add(Skipped(event.error))
        return _unblock(work, ruler, view, limit, event.now)
    if job.urgent or _over(view, limit):
        plan = ruler.fallback_plan(view, f"no plan to apply: {event.error}", None, limit=limit)
        if plan is not None and _advise(work, ruler, view, plan):
            return work.done()
        return _unblock(work, ruler, view, limit, event.now)
    work.add(Skipped(f"compaction failed: {event.error}"))
    return work.done()


def _unblock(work: Work, ruler: Ruler, view: View, limit: int | None, now: float) -> Step:
    """No plan came of a summary: a request held at the limit takes the next step."""
    if _over(view, limit):
        _relieve(work, ruler, view, limit, now, refused=False)
    return work.done()
