"""Applying what changes history and protected state outside a round: compaction plans and
the user's protected-state changes, for one sampler and only at its round boundaries.

A plan is checked before anything is written: stale plans are skipped, the summarizer's
protected updates are reviewed (forbidden ones refused and reported), and a plan whose new
projection would lose a protected entry is refused whole, the old history kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog
from stowage.core import (
    CompactionRecord,
    CompactionSkipped,
    ErrorRecord,
    HistoryCompacted,
    ProtectedChanged,
    ProtectedRecord,
    ProtectedRefused,
    Record,
    UpdatesReview,
    apply_compaction,
    build_projection,
    estimate_tokens,
    prepare_all,
    review_updates,
    verify,
)
from stowage.core import render as render_protected

from ._messages import Plan

if TYPE_CHECKING:
    from .sampler import Sampler

__all__ = ["PlanApplier"]

_log = structlog.get_logger("stowage.sampler")


class PlanApplier:
    """The sampler's compaction and protected-state writes."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self._log = _log.bind(session=sampler.ctx.session_id, actor="sampler")

    async def apply(self, plan: Plan) -> bool:
        """Apply ``plan`` at a round boundary; False when it was stale or refused."""
        state = self.sampler.state
        if plan.based_on_compaction_seq != state.last_compaction_seq:
            reason = f"stale plan for round {plan.round}: history was compacted since"
            self.sampler.ctx.publish(
                CompactionSkipped(session_id=self.sampler.ctx.session_id, reason=reason)
            )
            return False
        review = review_updates(state.protected, plan.protected_ops)
        protected_records = self._protected_records(plan, review)
        seq = state.last_seq + 1 + len(protected_records)
        user_budget = self.sampler._pressure.user_budget()
        result = apply_compaction(
            state.history,
            summary=plan.summary,
            summary_seq=seq,
            covers_through=plan.covers_through,
            user_budget_chars=user_budget,
        )
        projection = build_projection(
            result.history,
            stubbed=state.stubbed,
            protected_text=render_protected(review.state) or None,
        )
        # the check the design promises: no compaction may lose a protected entry
        lost = (*verify(state.protected, projection), *verify(review.state, projection))
        if lost:
            await self._refuse_plan(plan, review, protected_records, tuple({e.id: 0 for e in lost}))
            return False
        tokens_after = self.sampler._pressure.tool_tokens + estimate_tokens(
            projection, self.sampler._pressure.ratio()
        )
        record = CompactionRecord(
            seq=seq,
            kind="full" if plan.kind == "full" else "fallback",
            summary=plan.summary,
            covers_through=plan.covers_through,
            retained=result.retained,
            reason=plan.reason,
            tokens_before=plan.tokens_before,
            tokens_after=tokens_after,
            removed=result.removed,
            round=state.round,
            turn=state.turn,
            user_budget_chars=user_budget,
            protected=review.state.snapshot(),
            estimated=plan.estimated,
            chars_per_token=self.sampler._pressure.ratio(),
        )
        await self.sampler._persist([*protected_records, record])
        self._publish_protected(plan, review, applied=True)
        self._log.info(
            "history_compacted",
            tokens_before=plan.tokens_before,
            tokens_after=tokens_after,
            removed=result.removed,
            retained=len(result.retained),
            reason=plan.reason,
        )
        self.sampler.ctx.publish(
            HistoryCompacted(
                session_id=self.sampler.ctx.session_id,
                kind=record.kind,
                tokens_before=plan.tokens_before,
                tokens_after=tokens_after,
                estimated=plan.estimated,
                removed=result.removed,
                retained=len(result.retained),
                reason=plan.reason,
                summary=plan.summary,
                covers_through=plan.covers_through,
                round=state.round,
            )
        )
        return True

    async def protect(self, ops: Sequence[dict[str, object]]) -> None:
        """The user's change: all or nothing, checked before anything is written.

        Raises ``ProtectedStateViolation`` naming the entry when an op cannot apply.
        """
        _, canonical = prepare_all(self.sampler.state.protected, ops, "user")
        if not canonical:
            return  # every op repeats what is already there
        await self.sampler._persist(
            [ProtectedRecord(seq=self.sampler.state.last_seq + 1, ops=canonical, source="user")]
        )
        self._log.info("protected_changed", source="user", ops=len(canonical))
        self.sampler.ctx.publish(
            ProtectedChanged(
                session_id=self.sampler.ctx.session_id, source="user", ops=len(canonical)
            )
        )

    def _protected_records(self, plan: Plan, review: UpdatesReview) -> list[Record]:
        """Error records for the summarizer's refused or malformed updates, then the
        ``protected`` record of the accepted ones; seqs follow the state's last one."""
        first = self.sampler.state.last_seq + 1
        notes = [("protected_updates_malformed", p) for p in plan.protected_problems]
        notes += [("protected_refused", f"{r.entry}: {r.reason}") for r in review.refused]
        records: list[Record] = [
            ErrorRecord(seq=first + n, kind=kind, message=message)
            for n, (kind, message) in enumerate(notes)
        ]
        if review.ops:
            records.append(
                ProtectedRecord(seq=first + len(records), ops=review.ops, source="summarizer")
            )
        return records

    def _publish_protected(self, plan: Plan, review: UpdatesReview, *, applied: bool) -> None:
        """Events for what the summarizer's updates did, once the records are durable."""
        session_id = self.sampler.ctx.session_id
        refusals = [("", problem) for problem in plan.protected_problems]
        refusals += [(r.entry, r.reason) for r in review.refused]
        for entry, reason in refusals:
            self._log.warning("protected_refused", entry=entry, reason=reason)
            self.sampler.ctx.publish(
                ProtectedRefused(
                    session_id=session_id, source="summarizer", entry=entry, reason=reason
                )
            )
        if applied and review.ops:
            self._log.info("protected_changed", source="summarizer", ops=len(review.ops))
            self.sampler.ctx.publish(
                ProtectedChanged(session_id=session_id, source="summarizer", ops=len(review.ops))
            )

    async def _refuse_plan(
        self,
        plan: Plan,
        review: UpdatesReview,
        protected_records: Sequence[Record],
        missing: tuple[str, ...],
    ) -> None:
        """Keep the old history: log why (naming the entries) and tell subscribers."""
        notes = [r for r in protected_records if isinstance(r, ErrorRecord)]
        reason = (
            f"compaction for round {plan.round} refused: it would lose protected "
            f"{', '.join(missing)}"
        )
        refusal = ErrorRecord(
            seq=self.sampler.state.last_seq + 1 + len(notes),
            kind="compaction_refused",
            message=reason,
        )
        await self.sampler._persist([*notes, refusal])
        self._publish_protected(plan, review, applied=False)
        self._log.error("compaction_refused", entries=missing, round=plan.round)
        for entry in missing:
            self.sampler.ctx.publish(
                ProtectedRefused(
                    session_id=self.sampler.ctx.session_id,
                    source="summarizer",
                    entry=entry,
                    reason=reason,
                    plan_refused=True,
                )
            )
