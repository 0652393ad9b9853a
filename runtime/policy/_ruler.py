"""What a compaction now would do, pure: the figures the compaction machine decides with.

``Ruler`` holds nothing that changes: from one snapshot (a ``View`` of it, with the stubs
decided on it so far) it says where a compaction may end, what it would leave, what it
would re-attach, which outputs to stub, what a no-model digest would be, and whether a plan
frees enough. The machine (``_machine``) keeps the state between snapshots and decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from stowage.core import (
    PREVIEW_MIN_CHARS,
    CompactionError,
    FunctionCallOutput,
    HistoryEntry,
    apply_compaction,
    history_chars,
)

from ._accounting import Accounting, stub_savings
from ._fallback import fallback_summary
from ._round_index import RoundIndex
from ._snapshot import Plan, Snapshot, Stubs
from ._turns import irreducible_tokens, reattach_seqs, safe_cover
from ._watermarks import (
    MIN_STUB_CHARS,
    PolicyDecision,
    compaction_cut,
    decide,
    microcompact_batch,
    microcompact_candidates,
    tokens_after_compaction,
    turn_round_cuts,
)

__all__ = ["FALLBACK_CHARS", "MICRO_ROUNDS", "SUMMARY_ALLOWANCE_CHARS", "Ruler", "View"]

#: a compaction below the hard mark must free room for this many rounds at the recent growth
MICRO_ROUNDS = 4
# ... but never more than this share of the usable budget for that reason
_MAX_MIN_FREE = 0.5
#: characters a summary is assumed to take when choosing which of a turn's rounds to keep
SUMMARY_ALLOWANCE_CHARS = 1200
#: the most characters a no-model digest takes (``fallback_summary``'s own cap)
FALLBACK_CHARS = 4000
# ... and at most this share of the room a request has (on a small window, or at a dense
# tokenizer's ratio, 4,000 characters would take most of it), at least _DIGEST_MIN_CHARS
_DIGEST_SHARE = 0.2
_DIGEST_MIN_CHARS = 300
# a compaction must be expected to free at least this share of the usable budget
_MIN_GAIN = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """A snapshot with the stubs decided on it so far, and its figures: ``tokens`` what the
    triggers read (None when reported usage is required and there is none), ``guard`` what
    the limit is checked on; ``rounds`` an index of the snapshot's history (or of a prefix of
    it) that the caller keeps."""

    snapshot: Snapshot
    stubbed: frozenset[int]
    tokens: int | None
    guard: int
    ratio: float
    rounds: RoundIndex = field(default=RoundIndex(), compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Ruler:
    """The measures of one session's compactions under ``accounting``."""

    accounting: Accounting

    def view(
        self, snap: Snapshot, *, ratio: float | None = None, rounds: RoundIndex | None = None
    ) -> View:
        """``snap`` as the next request would carry it; ``ratio`` (a provider's stated chars
        per token) replaces the session's own estimate; ``rounds``: an index of its history
        (or of a prefix of it) kept from an earlier boundary."""
        status = snap.status
        tokens, chars_per_token, guard = status.tokens, status.chars_per_token, status.guard
        if ratio is not None:
            chars = history_chars(snap.history, snap.stubbed)
            chars += len(snap.protected_text) if snap.protected_text else 0
            tokens = guard = math.ceil(chars / ratio)
            chars_per_token = ratio
        return View(
            snapshot=snap,
            stubbed=snap.stubbed,
            tokens=tokens,
            guard=guard,
            ratio=chars_per_token,
            rounds=(rounds or RoundIndex()).extended(snap.history),
        )

    def rounds(self, view: View) -> RoundIndex:
        """The index of the view's history (``view.rounds`` when it is of that history)."""
        return view.rounds.extended(view.snapshot.history)

    def decision(self, view: View) -> PolicyDecision:
        """The watermark the view's figure crossed (``decide``)."""
        status = replace(view.snapshot.status, tokens=view.tokens)
        return decide(status, self.accounting.usable, self.accounting.marks)

    def min_free_tokens(self, steps: Sequence[int]) -> int:
        """What a compaction (micro or full) must free below the hard mark to be worth its
        prefix break: ``micro_min_free`` of usable, and room for ``MICRO_ROUNDS`` rounds at
        the largest recent growth (``steps``; at most ``_MAX_MIN_FREE`` of usable). When
        rounds are large a compaction that buys one or two of them is a break every round or
        two; one that waits until it can buy more costs fewer breaks for the same rounds. 0
        when ``micro_min_free`` is 0 (stub every round past the soft mark)."""
        share = self.accounting.settings.micro_min_free
        if not share:
            return 0
        usable = self.accounting.usable
        growth = min(MICRO_ROUNDS * max(steps, default=0), int(_MAX_MIN_FREE * usable))
        return max(int(share * usable), growth)

    # -- where a compaction ends, and what it leaves --------------------------------------

    def cover(self, view: View) -> int:
        """The newest seq any compaction of this view may cover (never an open call)."""
        snap = view.snapshot
        return safe_cover(snap.history, snap.last_seq, snap.open_calls)

    def coverable(self, view: View, covers: int) -> int:
        """History entries a compaction through ``covers`` would take."""
        return sum(1 for e in view.snapshot.history if e.seq <= covers)

    def absorbs_newest_round(self, view: View, covers: int) -> bool:
        """Whether a compaction through ``covers`` takes the open turn's newest tool round."""
        snap = view.snapshot
        if not snap.turn_open:
            return False
        cuts = turn_round_cuts(list(snap.history))
        return bool(cuts) and covers > cuts[0]

    def after_tokens(self, view: View, covers: int, summary_chars: int) -> int | None:
        """Tokens a compaction through ``covers`` with a summary of ``summary_chars`` leaves
        (None when no compaction can end there)."""
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
        """``covers_through`` of a compaction now: never past an open call; mid-turn on the
        watermarks, the turn's newest rounds that fit ``target_tokens`` (default: the target
        mark) stay verbatim; else everything (what the turn read is re-attached instead)."""
        snap = view.snapshot
        covers = self.cover(view)
        if not self.accounting.watermarks or not snap.turn_open:
            return covers  # the seed's threshold rule compacts everything it may
        limit = self.accounting.usable
        target = (
            target_tokens
            if target_tokens is not None
            else int(self.accounting.marks.target * limit)
        )
        protected = len(snap.protected_text) if snap.protected_text else 0
        cut = compaction_cut(
            snap.history,
            last_seq=covers,
            target_tokens=target,
            stubbed=view.stubbed,
            user_budget_chars=self.accounting.user_budget(view.ratio),
            summary_chars=SUMMARY_ALLOWANCE_CHARS + protected,
            chars_per_token=view.ratio,
            keep_at_most=keep_at_most,
        )
        return min(cut, covers)

    def turn_round_cuts(self, view: View) -> list[int]:
        """Where a compaction may end to keep the turn's newest k rounds (``turn_round_cuts``),
        never past an open call."""
        covers = self.cover(view)
        return [c for c in turn_round_cuts(list(view.snapshot.history)) if c <= covers]

    def floor(self, view: View) -> int:
        """Tokens the turn cannot do without (system, protected state, its user message and
        newest round)."""
        snap = view.snapshot
        protected = len(snap.protected_text) if snap.protected_text else 0
        return irreducible_tokens(
            snap.history,
            protected_chars=protected,
            chars_per_token=view.ratio,
            stubbed=view.stubbed,
        )

    # -- stubs -------------------------------------------------------------------------------

    def capped(self, view: View) -> tuple[View, Stubs | None]:
        """Outputs above the cap shown by their artifact reference (a huge one as head + tail
        too) before any request carries them. The cap is ``tool_output_cap`` of the usable
        budget, and at least ``PREVIEW_MIN_CHARS``, but on a window too small for that half of
        the usable budget: an output the window could never hold is capped, not summarized
        away and read again until the turn stops as a loop."""
        cap = self.accounting.output_cap(view.ratio)
        if cap is None:
            return view, None
        seqs = tuple(
            e.seq
            for e in view.snapshot.history
            if isinstance(e.item, FunctionCallOutput)
            and e.seq not in view.stubbed
            and len(e.item.output) > cap
        )
        if not seqs:
            return view, None
        share = self.accounting.settings.tool_output_cap
        reason = (
            f"{len(seqs)} tool output(s) above the cap of {cap} chars "
            f"({share:.0%} of the usable budget) shown as head and tail"
            if cap >= PREVIEW_MIN_CHARS
            else f"{len(seqs)} tool output(s) above the cap of {cap} chars (half of the usable "
            "budget, which could never hold them with the rest) shown by reference"
        )
        return self.stubbed(view, seqs, reason, kind="cap")

    def stubbed(
        self,
        view: View,
        seqs: tuple[int, ...],
        reason: str,
        *,
        kind: Literal["micro", "cap"] = "micro",
    ) -> tuple[View, Stubs]:
        """The view with the outputs at ``seqs`` as stubs, and the stubs with their figures."""
        saved = stub_savings(view.snapshot.history, set(seqs) - view.stubbed, view.ratio)
        before = view.tokens
        after = None if before is None else max(0, before - saved)
        estimated = view.snapshot.status.estimated
        stubs = Stubs(
            seqs=seqs,
            reason=reason,
            tokens_before=before,
            tokens_after=after,
            estimated=estimated or kind == "cap",
            kind=kind,
        )
        view = replace(
            view,
            stubbed=view.stubbed | frozenset(seqs),
            tokens=after,
            guard=max(0, view.guard - saved),
        )
        return view, stubs

    def stub_old(
        self,
        view: View,
        keep_rounds: int,
        reason: str,
        *,
        min_chars: int = MIN_STUB_CHARS,
        batch_free: int | None = None,
    ) -> tuple[View, Stubs] | None:
        """Stub the outputs older than the newest ``keep_rounds`` tool rounds (``batch_free``:
        only when together they free that many tokens, or none); None when nothing is."""
        history = view.snapshot.history
        if batch_free is not None:
            seqs = microcompact_batch(
                history,
                view.stubbed,
                keep_rounds,
                min_free_chars=int(batch_free * view.ratio),
                min_chars=min_chars,
                rounds=self.rounds(view),
            )
        else:
            seqs = microcompact_candidates(
                history, view.stubbed, keep_rounds, min_chars=min_chars, rounds=self.rounds(view)
            )
        if not seqs:
            return None
        return self.stubbed(view, seqs, reason)

    def keep_rounds(self, view: View) -> int:
        """Tool rounds microcompaction spares: the newest ``keep_rounds``, and every round of
        the open turn (a model that decides from each request alone reads a stubbed output
        again; only the hard mark stubs those)."""
        return max(self.accounting.marks.keep_rounds, self.turn_rounds(view))

    def turn_rounds(self, view: View) -> int:
        return len(self.rounds(view).turn_rounds()) if view.snapshot.turn_open else 0

    def old_output_savings(self, view: View) -> int:
        """Tokens stubbing every old output (past the rounds spared) would free now."""
        seqs = self.rounds(view).old_outputs(view.stubbed, self.keep_rounds(view), MIN_STUB_CHARS)
        return stub_savings(view.snapshot.history, seqs, view.ratio)

    # -- plans -------------------------------------------------------------------------------

    def digest_chars(self, view: View, limit: int | None = None) -> int:
        """Characters a no-model digest may take: ``FALLBACK_CHARS``, and no more than a
        share of the room a request has (``limit``, else usable)."""
        room = limit or self.accounting.usable
        if not room:
            return FALLBACK_CHARS
        share = int(_DIGEST_SHARE * room * view.ratio)
        return max(_DIGEST_MIN_CHARS, min(FALLBACK_CHARS, share))

    def everything_frees(self, view: View, limit: int | None = None) -> bool:
        """Whether a no-model compaction of all it may cover leaves less than there is."""
        after = self.after_tokens(view, self.cover(view), self.digest_chars(view, limit))
        return after is not None and after < view.guard

    def fallback_plan(
        self, view: View, reason: str, covers_through: int | None, *, limit: int | None = None
    ) -> Plan | None:
        """A no-model compaction through ``covers_through`` (default: what ``cut`` gives),
        its digest sized to the room a request has (``limit``)."""
        snap = view.snapshot
        cut = covers_through if covers_through is not None else self.cut(view, None)
        cut = min(cut, self.cover(view))
        items = [e.item for e in snap.history if e.seq <= cut]
        if not items:
            return None
        plan = Plan(
            round=snap.round,
            summary=fallback_summary(
                items, reason=reason, max_chars=self.digest_chars(view, limit)
            ),
            covers_through=cut,
            reason=f"fallback: {reason}",
            tokens_before=view.tokens,
            estimated=True,
            based_on_compaction_seq=snap.last_compaction_seq,
            kind="fallback",
            fraction=self.accounting.fraction(view.tokens),
        )
        return self.with_reattach(view, plan)

    def with_reattach(self, view: View, plan: Plan) -> Plan:
        """``plan`` keeping what the open turn most recently read (within ``reattach_share``
        of the usable budget) verbatim, when the plan covers it."""
        snap = view.snapshot
        budget = self.accounting.reattach_chars(view.ratio)
        if not snap.turn_open or budget <= 0:
            return plan  # the seed's threshold rule keeps nothing but the user's words
        seqs = reattach_seqs(
            snap.history,
            covers_through=plan.covers_through,
            budget_chars=budget,
            stubbed=view.stubbed,
        )
        return replace(plan, reattach=seqs) if seqs else plan

    def _applied(self, view: View, plan: Plan) -> tuple[HistoryEntry, ...] | None:
        """The history ``plan`` leaves of this view (None when it cannot apply)."""
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
        return result.history

    def plan_tokens(self, view: View, plan: Plan) -> int | None:
        """Tokens of history once ``plan`` is applied to this view (with the stubs that
        follow a compaction that leaves more than the target); None when it cannot apply."""
        history = self._applied(view, plan)
        if history is None:
            return None
        snap = view.snapshot
        protected = len(snap.protected_text) if snap.protected_text else 0
        stubbed = set(view.stubbed)
        tokens = math.ceil((history_chars(history, stubbed) + protected) / view.ratio)
        usable = self.accounting.usable
        if self.accounting.watermarks and tokens > self.accounting.marks.target * usable:
            # what follows a compaction that leaves more than the target: the outputs it kept
            # but the rounds spared become stubs, in the same break
            after = replace(view, snapshot=replace(snap, history=history))
            stubbed.update(microcompact_candidates(history, stubbed, self.keep_rounds(after)))
            tokens = math.ceil((history_chars(history, stubbed) + protected) / view.ratio)
        return tokens

    def history_after(self, view: View, plan: Plan) -> int | None:
        """Characters of history (without protected state) once ``plan`` is applied."""
        history = self._applied(view, plan)
        return None if history is None else history_chars(history, view.stubbed)

    def grows(self, view: View, plan: Plan) -> str | None:
        """Why ``plan`` would leave as much history as it found or more (never applied,
        whoever asked for it: every compaction frees something), or None."""
        after = self.history_after(view, plan)
        if after is None:
            return "the plan does not fit the history it meets"
        before = history_chars(view.snapshot.history, view.stubbed)
        if after < before:
            return None
        return (
            f"the compacted history (~{math.ceil(after / 4)} tokens) would be no smaller than "
            f"the history it replaces (~{math.ceil(before / 4)} tokens)"
        )

    def frees_too_little(self, view: View, plan: Plan, steps: Sequence[int]) -> str | None:
        """Why ``plan`` is not worth its prefix break below the hard mark: it frees less than
        ``min_free_tokens``; None when it frees enough."""
        settings = self.accounting.settings
        if view.tokens is None or not settings.micro_min_free:
            return None
        after = self.plan_tokens(view, plan)
        if after is None:
            return None
        freed = view.tokens - after
        need = self.min_free_tokens(steps)
        if freed >= need:
            return None
        usable = self.accounting.usable
        return (
            f"not applied: the compaction would take {view.tokens} tokens to {after}, freeing "
            f"{freed} ({freed / max(1, usable):.0%} of the usable {usable}), less than {need} "
            f"tokens (micro_min_free {settings.micro_min_free:.0%}, or {MICRO_ROUNDS} rounds "
            "at the recent growth); below the hard mark a compaction that frees so little is "
            "not worth breaking the prompt cache"
        )

    def frees_enough(self, view: View, covers: int, steps: Sequence[int]) -> bool:
        """Whether a summary through ``covers`` (of the size a summary is assumed to take)
        is expected to free ``micro_min_free`` of usable, with the stubs that follow it."""
        if view.tokens is None or not self.accounting.settings.micro_min_free:
            return True
        probe = Plan(
            round=view.snapshot.round,
            summary="x" * SUMMARY_ALLOWANCE_CHARS,
            covers_through=covers,
            reason="probe",
            tokens_before=view.tokens,
            estimated=True,
            based_on_compaction_seq=view.snapshot.last_compaction_seq,
        )
        after = self.plan_tokens(view, self.with_reattach(view, probe))
        return after is None or view.tokens - after >= self.min_free_tokens(steps)

    def not_worth(self, view: View, decision: PolicyDecision) -> str | None:
        """Why a compaction of everything it may cover is not worth one now (the per-turn cap
        is reached, or it would free too little); None when it is."""
        snap = view.snapshot
        cap = self.accounting.settings.max_compactions_per_turn
        if snap.turn_open and snap.turn_compactions >= cap:
            return f"{snap.turn_compactions} compactions this turn already (the cap is {cap})"
        if view.tokens is None:
            return "no token figure"
        after = self.after_tokens(view, self.cover(view), 0)
        if after is None:
            return "no compaction can cover a prefix of this history"
        gain = view.tokens - after
        if gain < _MIN_GAIN * max(decision.usable, 1):
            return f"a compaction would free only {max(0, gain)} of {view.tokens} tokens"
        return None

    def cannot_fit(self, view: View, limit: int, why: str) -> str:
        """What the turn stops with when nothing brings the next request under ``limit``."""
        snap = view.snapshot
        acc = self.accounting
        usable = f"of the usable {acc.usable}" if acc.budget is not None else "(no window known)"
        schemas = f"; tool schemas take {acc.tool_tokens} more" if acc.tool_tokens else ""
        return (
            f"turn {snap.turn} stopped: the next request would carry {view.guard} tokens of "
            f"history {usable}, above the limit of {limit} (hard mark "
            f"{acc.marks.hard:.0%}{schemas}), and {why}; what this turn cannot do without "
            f"(system, protected state, its user message and newest round) is "
            f"~{self.floor(view)} tokens; not sending it"
        )
