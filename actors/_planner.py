"""What a compaction now would do, pure: the figures the compactor's decisions are made of.

``Planner`` holds no state that changes: from one snapshot (a ``View`` of it, with the stubs
advised on it so far) it says where a compaction may end, what it would leave, what it would
re-attach, which outputs to stub, what a no-model digest would be, and whether a plan frees
enough. ``Control`` decides with these figures and keeps the state between snapshots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import structlog
from stowage.core import (
    PREVIEW_MIN_CHARS,
    CompactionError,
    FunctionCallOutput,
    Settings,
    apply_compaction,
    history_chars,
)
from stowage.policy import (
    MIN_STUB_CHARS,
    CompactionDecision,
    Forecast,
    PolicyDecision,
    TokenStatus,
    compaction_cut,
    decide,
    decide_compaction,
    effective_threshold,
    fallback_summary,
    irreducible_tokens,
    microcompact_batch,
    microcompact_candidates,
    reattach_seqs,
    safe_cover,
    tokens_after_compaction,
    turn_round_cuts,
    turn_rounds,
)

from ._accounting import Accounting, stub_savings
from ._messages import Advice, CommittedSnapshot, Plan, Stubs

__all__ = ["MICRO_ROUNDS", "MIN_GROWTH", "Planner", "View", "decide_for"]

#: in threshold mode, usage must grow by this share of the threshold after a compaction
#: before another one is worth its summary request
MIN_GROWTH = 0.25
#: a compaction below the hard mark must free room for this many rounds at the recent growth
MICRO_ROUNDS = 4
# ... but never more than this share of the usable budget for that reason
_MAX_MIN_FREE = 0.5
# characters a summary is assumed to take when choosing which of a turn's rounds to keep
_SUMMARY_ALLOWANCE_CHARS = 1200
# the most characters a no-model digest takes (``fallback_summary``'s own cap)
_FALLBACK_CHARS = 4000
# a compaction must be expected to free at least this share of the usable budget
_MIN_GAIN = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """A snapshot with the stubs advised on it so far, and its token figure."""

    snapshot: CommittedSnapshot
    stubbed: frozenset[int]
    tokens: int | None
    ratio: float


class Planner:
    """The figures of one session's compactions; ``log`` says when a digest is made."""

    def __init__(
        self,
        accounting: Accounting,
        log: structlog.typing.FilteringBoundLogger,
        forecast: Forecast | None = None,
    ) -> None:
        self.accounting = accounting
        #: the compactor's growth forecast (read only: what recent rounds added)
        self.forecast = forecast
        self.settings = accounting.settings
        self.marks = accounting.marks
        self.log = log

    def view(self, snap: CommittedSnapshot, *, ratio: float | None = None) -> View:
        status = snap.status
        tokens = status.tokens if status is not None else None
        chars_per_token = status.chars_per_token if status is not None else 4.0
        if ratio is not None and status is not None:
            chars = history_chars(snap.history, snap.stubbed)
            chars += len(snap.protected_text) if snap.protected_text else 0
            tokens, chars_per_token = math.ceil(chars / ratio), ratio
        return View(snapshot=snap, stubbed=snap.stubbed, tokens=tokens, ratio=chars_per_token)

    def decision(self, view: View) -> PolicyDecision:
        status = view.snapshot.status or TokenStatus(
            tokens=None, estimated=True, reported=None, estimated_since=0, chars_per_token=4.0
        )
        return decide(replace(status, tokens=view.tokens), self.accounting.usable, self.marks)

    def min_free_tokens(self) -> int:
        """What a compaction (micro or full) must free below the hard mark to be worth its
        prefix break: ``micro_min_free`` of usable, and room for ``MICRO_ROUNDS`` rounds at
        the largest recent growth (at most ``_MAX_MIN_FREE`` of usable). When rounds are
        large a compaction that buys one or two of them is a break every round or two; one
        that waits until it can buy more costs fewer breaks for the same rounds. 0 when
        ``micro_min_free`` is 0 (stub every round past the soft mark)."""
        share = self.settings.micro_min_free
        if not share:
            return 0
        usable = self.accounting.usable
        steps = self.forecast.steps if self.forecast is not None else ()
        growth = min(MICRO_ROUNDS * max(steps, default=0), int(_MAX_MIN_FREE * usable))
        return max(int(share * usable), growth)

    def absorbs_newest_round(self, view: View, covers: int) -> bool:
        """Whether a compaction through ``covers`` takes the open turn's newest tool round."""
        snap = view.snapshot
        if not snap.turn_open:
            return False
        cuts = turn_round_cuts(list(snap.history))
        return bool(cuts) and covers > cuts[0]

    def after_tokens(self, view: View, covers: int, summary_chars: int) -> int | None:
        snap = view.snapshot
        protected = len(snap.protected_text) if snap.protected_text else 0
        try:
            return tokens_after_compaction(
                snap.history,
                stubbed=view.stubbed,
                covers_through=covers,
                user_budget_chars=self.accounting.user_budget(view.ratio),
                summary_chars=summary_chars + protected,
                chars_per_token=view.ratio,
            )
        except CompactionError:
            return None

    def cut(self, view: View, target_tokens: int | None, *, keep_at_most: int | None = None) -> int:
        """``covers_through`` of a compaction now: never past an open call; mid-turn, the
        turn's newest rounds that fit ``target_tokens`` (default: the target mark) stay
        verbatim; else everything (what the turn read is re-attached instead)."""
        snap = view.snapshot
        covers = safe_cover(snap.history, snap.last_seq, snap.open_calls)
        limit = self.accounting.budget.usable if self.accounting.budget else None
        if limit is None or not snap.turn_open:
            return covers  # the seed's threshold rule compacts everything it may
        target = target_tokens if target_tokens is not None else int(self.marks.target * limit)
        cut = self.turn_cut(view, covers, target, keep_at_most)
        return min(cut, covers)

    def turn_cut(self, view: View, covers: int, target: int, keep_at_most: int | None) -> int:
        snap = view.snapshot
        protected = len(snap.protected_text) if snap.protected_text else 0
        return compaction_cut(
            snap.history,
            last_seq=covers,
            target_tokens=target,
            stubbed=view.stubbed,
            user_budget_chars=self.accounting.user_budget(view.ratio),
            summary_chars=_SUMMARY_ALLOWANCE_CHARS + protected,
            chars_per_token=view.ratio,
            keep_at_most=keep_at_most,
        )

    def cap_outputs(self, view: View, stubs: list[Stubs]) -> View:
        """Outputs above the cap are shown by their artifact reference (a huge one as head +
        tail too) before any request carries them. The cap is ``tool_output_cap`` of the
        usable budget, and at least ``PREVIEW_MIN_CHARS``, but on a window too small for that
        half of the usable budget: an output the window could never hold is capped, not
        summarized away and read again until the turn stops as a loop."""
        cap = self.accounting.output_cap(view.ratio)
        if cap is None:
            return view
        share = self.settings.tool_output_cap
        seqs = tuple(
            e.seq
            for e in view.snapshot.history
            if isinstance(e.item, FunctionCallOutput)
            and e.seq not in view.stubbed
            and len(e.item.output) > cap
        )
        if not seqs:
            return view
        reason = (
            f"{len(seqs)} tool output(s) above the cap of {cap} chars "
            f"({share:.0%} of the usable budget) shown as head and tail"
            if cap >= PREVIEW_MIN_CHARS
            else f"{len(seqs)} tool output(s) above the cap of {cap} chars (half of the usable "
            "budget, which could never hold them with the rest) shown by reference"
        )
        return self.stubbed(view, seqs, reason, stubs, kind="cap")

    def stubbed(
        self,
        view: View,
        seqs: tuple[int, ...],
        reason: str,
        stubs: list[Stubs],
        *,
        kind: Literal["micro", "cap"] = "micro",
    ) -> View:
        saved = stub_savings(view.snapshot.history, set(seqs) - view.stubbed, view.ratio)
        before = view.tokens
        after = None if before is None else max(0, before - saved)
        estimated = view.snapshot.status.estimated if view.snapshot.status else True
        stubs.append(
            Stubs(
                seqs=seqs,
                reason=reason,
                tokens_before=before,
                tokens_after=after,
                estimated=estimated or kind == "cap",
                kind=kind,
            )
        )
        return replace(view, stubbed=view.stubbed | frozenset(seqs), tokens=after)

    def stub(
        self,
        view: View,
        decision: PolicyDecision,
        keep_rounds: int,
        stubs: list[Stubs],
        *,
        min_chars: int = MIN_STUB_CHARS,
        batch: bool = False,
    ) -> tuple[View, PolicyDecision] | None:
        """Stub old tool outputs (``batch``: only a batch that frees ``min_free_tokens``, or
        none); the view and decision after, or None when nothing was stubbed."""
        history = view.snapshot.history
        if batch:
            seqs = microcompact_batch(
                history,
                view.stubbed,
                keep_rounds,
                min_free_chars=int(self.min_free_tokens() * view.ratio),
                min_chars=min_chars,
            )
        else:
            seqs = microcompact_candidates(history, view.stubbed, keep_rounds, min_chars=min_chars)
        if not seqs:
            return None
        view = self.stubbed(view, seqs, decision.reason, stubs)
        return view, self.decision(view)

    def keep_rounds(self, view: View) -> int:
        """Tool rounds microcompaction spares: the newest ``keep_rounds``, and every round of
        the open turn (a model that decides from each request alone reads a stubbed output
        again; only the hard mark stubs those)."""
        snap = view.snapshot
        turn = turn_rounds(snap.history) if snap.turn_open else 0
        return max(self.marks.keep_rounds, turn)

    def old_output_savings(self, view: View) -> int:
        """Tokens stubbing every old output (past the rounds spared) would free now."""
        seqs = microcompact_candidates(view.snapshot.history, view.stubbed, self.keep_rounds(view))
        return stub_savings(view.snapshot.history, seqs, view.ratio)

    def cannot_fit(self, snap: CommittedSnapshot, view: View, decision: PolicyDecision) -> str:
        protected = len(snap.protected_text) if snap.protected_text else 0
        floor = irreducible_tokens(
            snap.history, protected_chars=protected, chars_per_token=view.ratio
        )
        usable = self.accounting.usable
        return (
            f"the next request would carry {decision.tokens} tokens, {(decision.fraction or 0):.0%} "
            f"of the usable {usable} (hard mark {self.marks.hard:.0%}), and compaction cannot "
            f"free more: what this turn cannot do without (system, protected state, its user "
            f"message and newest round) is ~{floor} tokens; not sending it"
        )

    def everything_frees(self, view: View) -> bool:
        """Whether a no-model compaction of all it may cover leaves less than there is."""
        snap = view.snapshot
        covers = safe_cover(snap.history, snap.last_seq, snap.open_calls)
        after = self.after_tokens(view, covers, _FALLBACK_CHARS)
        return after is not None and view.tokens is not None and after < view.tokens

    def fallback_plan(self, view: View, reason: str, covers_through: int | None) -> Plan | None:
        """A no-model compaction through ``covers_through`` (default: what ``_cut`` gives)."""
        snap = view.snapshot
        cut = covers_through if covers_through is not None else self.cut(view, None)
        items = [e.item for e in snap.history if e.seq <= cut]
        if not items:
            return None
        self.log.warning("compaction_fallback", reason=reason, tokens=view.tokens)
        plan = Plan(
            round=snap.round,
            summary=fallback_summary(items, reason=reason),
            covers_through=cut,
            reason=f"fallback: {reason}",
            tokens_before=view.tokens,
            estimated=True,
            based_on_compaction_seq=snap.last_compaction_seq,
            kind="fallback",
        )
        return self.with_reattach(view, plan)

    def with_reattach(self, view: View, plan: Plan) -> Plan:
        """``plan`` keeping what the open turn most recently read (within ``reattach_share``
        of the usable budget) verbatim, when the plan covers it."""
        snap = view.snapshot
        if not snap.turn_open or self.accounting.budget is None:
            return plan  # the seed's threshold rule keeps nothing but the user's words
        seqs = reattach_seqs(
            snap.history,
            covers_through=plan.covers_through,
            budget_chars=self.accounting.reattach_chars(view.ratio),
            stubbed=view.stubbed,
        )
        return replace(plan, reattach=seqs) if seqs else plan

    def frees_too_little(self, view: View, plan: Plan) -> str | None:
        """Why ``plan`` is not worth its prefix break below the hard mark: it frees less than
        ``min_free_tokens``; None when it frees enough."""
        if view.tokens is None or not self.settings.micro_min_free:
            return None
        after = self.plan_tokens(view, plan)
        if after is None:
            return None
        freed = view.tokens - after
        need = self.min_free_tokens()
        if freed >= need:
            return None
        return (
            f"not applied: the compaction would take {view.tokens} tokens to {after}, freeing "
            f"{freed} ({freed / max(1, self.accounting.usable):.0%} of the usable "
            f"{self.accounting.usable}), less than {need} tokens (micro_min_free "
            f"{self.settings.micro_min_free:.0%}, or {MICRO_ROUNDS} rounds at the recent "
            "growth); below the hard mark a compaction that frees so little is not worth "
            "breaking the prompt cache"
        )

    def plan_tokens(self, view: View, plan: Plan) -> int | None:
        snap = view.snapshot
        try:
            result = apply_compaction(
                snap.history,
                summary=plan.summary,
                summary_seq=snap.last_seq + 1,
                covers_through=plan.covers_through,
                user_budget_chars=self.accounting.user_budget(view.ratio),
                reattach=plan.reattach,
                provider_item=plan.provider_item,
            )
        except CompactionError:
            return None
        protected = len(snap.protected_text) if snap.protected_text else 0
        stubbed = set(view.stubbed)
        tokens = math.ceil((history_chars(result.history, stubbed) + protected) / view.ratio)
        if tokens > self.marks.target * self.accounting.usable:
            # what follows a compaction that leaves more than the target: the outputs it kept
            # but the rounds spared become stubs (``after_compaction``), in the same break
            after = replace(view, snapshot=replace(snap, history=result.history))
            stubbed.update(
                microcompact_candidates(result.history, stubbed, self.keep_rounds(after))
            )
            tokens = math.ceil((history_chars(result.history, stubbed) + protected) / view.ratio)
        return tokens

    def frees_enough(self, view: View, covers: int) -> bool:
        """Whether a summary through ``covers`` (of the size a summary is assumed to take)
        is expected to free ``micro_min_free`` of usable, with the stubs that follow it."""
        if view.tokens is None or not self.settings.micro_min_free:
            return True
        probe = Plan(
            round=view.snapshot.round,
            summary="x" * _SUMMARY_ALLOWANCE_CHARS,
            covers_through=covers,
            reason="probe",
            tokens_before=view.tokens,
            estimated=True,
            based_on_compaction_seq=view.snapshot.last_compaction_seq,
        )
        after = self.plan_tokens(view, self.with_reattach(view, probe))
        return after is None or view.tokens - after >= self.min_free_tokens()

    def not_worth(self, view: View, decision: PolicyDecision) -> str | None:
        """Why a compaction of everything it may cover is not worth one now (the per-turn cap
        is reached, or it would free too little); None when it is."""
        snap = view.snapshot
        if snap.turn_compactions >= self.settings.max_compactions_per_turn:
            return (
                f"{snap.turn_compactions} compactions this turn already (the cap is "
                f"{self.settings.max_compactions_per_turn})"
            )
        if decision.tokens is None:
            return "no token figure"
        after = self.after_tokens(view, safe_cover(snap.history, snap.last_seq, snap.open_calls), 0)
        if after is None:
            return "no compaction can cover a prefix of this history"
        gain = decision.tokens - after
        if gain < _MIN_GAIN * decision.usable:
            return f"a compaction would free only {max(0, gain)} of {decision.tokens} tokens"
        return None

    def after_compaction(
        self, view: View, decision: PolicyDecision, stubs: list[Stubs]
    ) -> tuple[View, PolicyDecision, Plan | None, str | None]:
        """A compaction just landed and left more than the target: stub what it kept but the
        rounds spared; at or above the soft mark, every round but the open turn's; and when
        that still leaves the soft mark crossed, the no-model fallback (or why not). Between
        the target and the soft mark the lossy digest is not worth it."""
        target, soft = self.marks.target, self.marks.soft
        if (decision.fraction or 0.0) <= target:
            return view, decision, None, None
        stubbed = self.stub(view, decision, self.keep_rounds(view), stubs)
        if stubbed is not None:
            view, decision = stubbed
        if (decision.fraction or 0.0) <= target or (decision.fraction or 0.0) < soft:
            return view, decision, None, None
        snap = view.snapshot
        keep = min(self.marks.keep_rounds, turn_rounds(snap.history) if snap.turn_open else 0)
        if keep < self.marks.keep_rounds:
            stubbed = self.stub(view, decision, keep, stubs)
            if stubbed is not None:
                view, decision = stubbed
        if (decision.fraction or 0.0) < soft:
            return view, decision, None, None
        why_not = self.not_worth(view, decision)
        if why_not is not None:
            return view, decision, None, why_not
        reason = (
            f"after compaction {decision.tokens} tokens are {decision.fraction:.0%} of the "
            f"usable {self.accounting.usable}, above the soft mark {soft:.0%}"
        )
        return view, decision, self.fallback_plan(view, reason, None), None

    def relieve(self, view: View, decision: PolicyDecision, advice: Advice) -> Advice:
        """At the hard mark with no plan to wait for: stub every older output, then compact
        without a model; when even that cannot bring the request under the hard mark, the
        advice stops the turn with the figures."""
        stubs = list(advice.stubs)
        stubbed = self.stub(view, decision, 0, stubs, min_chars=1)
        if stubbed is not None:
            view, decision = stubbed
        advice = replace(advice, stubs=tuple(stubs))
        if decision.action != "block":
            return advice
        if self.everything_frees(view):
            reason = f"no plan to apply at the hard mark: {decision.reason}"
            plan = self.fallback_plan(view, reason, None)
            if plan is not None:
                return replace(advice, outcome=plan)
        stop = self.cannot_fit(view.snapshot, view, decision)
        return replace(advice, stop=stop, stop_kind="overflow")


def decide_for(snapshot: CommittedSnapshot, settings: Settings) -> CompactionDecision:
    """The seed's threshold rule on a committed round: compact when the reported usage
    reached the threshold, unless too little was added since the last compaction for another
    one to free anything (said: ``skipped``)."""
    tokens = snapshot.usage.total_tokens if snapshot.usage is not None else None
    if not settings.auto_compact:
        return CompactionDecision(compact=False, reason="auto compaction is off", tokens=tokens)
    threshold = effective_threshold(settings)
    if threshold is None:
        return CompactionDecision(compact=False, reason="watermark mode", tokens=tokens)
    decision = decide_compaction(
        tokens=tokens, threshold=threshold, history_length=len(snapshot.history)
    )
    base = snapshot.usage_after_compaction
    if decision.compact and tokens is not None and base is not None:
        grown = tokens - base
        if grown < threshold * MIN_GROWTH:
            # what a compaction keeps (summary, recent user words) is itself over the
            # threshold: compacting again now would free almost nothing, round after round
            return CompactionDecision(
                compact=False,
                reason=(
                    f"Reported token usage {tokens} reached the compaction threshold "
                    f"{threshold}, but only {grown} tokens were added since the last compaction "
                    f"(which left {base}); not compacting again until {int(threshold * MIN_GROWTH)} "
                    "more. Lower user_budget_chars or raise the threshold."
                ),
                tokens=tokens,
                skipped=True,
            )
    return decision
