"""Applying what changes history and protected state outside a round: compaction plans and
the user's protected-state changes, for one sampler and only at its round boundaries.

A plan is checked before anything is written: stale plans are skipped, the summarizer's
protected updates are reviewed (forbidden ones refused and reported), and a plan whose new
projection would lose a protected entry, or would be no smaller than what it replaces, is
refused whole, the old history kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stowage.core import (
    CompactionError,
    CompactionFigures,
    CompactionLanded,
    CompactionRecord,
    CompactionSkipped,
    ErrorRecord,
    HistoryCompacted,
    ProtectedChanged,
    ProtectedRecord,
    ProtectedRefused,
    ProtectedState,
    Record,
    UpdatesReview,
    apply_compaction,
    build_projection,
    history_chars,
    prepare_all,
    review_updates,
    verify,
)
from stowage.core import render as render_protected
from stowage.policy import Accounting, Plan

from ._journal import SessionPart

__all__ = ["PlanApplier"]


class PlanApplier(SessionPart):
    """Compaction and protected-state writes of one session, through its journal."""

    __slots__ = ()

    async def apply(
        self,
        plan: Plan,
        *,
        accounting: Accounting,
        chars_per_token: float,
        waited: float | None = None,
    ) -> bool:
        """Apply ``plan`` at a round boundary; False when not, with an ``error`` record the machine
        hears as a boundary (so a request waiting for room takes the next step)."""
        state = self.journal.state
        if plan.based_on_compaction_seq != state.last_compaction_seq:
            return await self._drop(plan, "compaction_stale", "history was compacted since")
        review = review_updates(state.protected, plan.protected_ops)
        protected_records = self._protected_records(plan, review)
        seq = state.last_seq + 1 + len(protected_records)
        user_budget_chars = accounting.user_budget(chars_per_token)
        try:
            result = apply_compaction(
                state.history,
                summary=plan.summary,
                summary_seq=seq,
                covers_through=plan.covers_through,
                user_budget_chars=user_budget_chars,
                reattach=plan.reattach,
                provider_item=plan.provider_item,
            )
        except CompactionError as exc:
            # a plan that does not fit the history it meets is a bug, not a reason to fail
            # the session: it is logged and not applied, the history stays as it is
            self._log.error("compaction_invalid", round=plan.round, error=str(exc))
            return await self._drop(plan, "compaction_invalid", str(exc))
        # what the compaction carries: the lines touched since the last one join the trail,
        # shown in the room the compacted history leaves
        history_after = history_chars(result.history, state.stubbed)
        # a turn compacted again is short of room: the trail gives its room up to it
        again = state.ledger is not None and state.ledger.compactions > 0
        shown = (
            0 if again else _trail_room(accounting, review.state, history_after, chars_per_token)
        )
        carried = review.state.carried(shown)
        protected_text = render_protected(carried) or None
        projection = build_projection(
            result.history, stubbed=state.stubbed, protected_text=protected_text
        )
        # the check the design promises: no compaction may lose a protected entry
        lost = (*verify(state.protected.carried(shown), projection), *verify(carried, projection))
        if lost:
            await self._refuse_plan(plan, review, protected_records, tuple({e.id: 0 for e in lost}))
            return False
        # the figures before and after: in use before, as every view shows it (the status
        # figure: reported usage and what was added since); after, the estimate at the
        # session's ratio, as the next status will be
        protected_before = self.journal.protected_text()
        status = accounting.status(state, protected_before)
        estimated = status.estimated or status.floored
        tokens_before = status.guard
        if chars_per_token != status.chars_per_token:  # a provider's count, after a refusal
            chars = state.projected_chars + len(protected_before or "")
            tokens_before, estimated = math.ceil(chars / chars_per_token), True
        tokens_after = math.ceil((history_after + len(protected_text or "")) / chars_per_token)
        # every compaction frees something, whoever asked for it (protected state the
        # summarizer added is the point of it: it is not counted)
        if history_after >= state.projected_chars:
            why = (
                f"the compacted history (~{math.ceil(history_after / chars_per_token)} tokens) "
                "would be no smaller than the history it replaces "
                f"(~{math.ceil(state.projected_chars / chars_per_token)} tokens)"
            )
            return await self._drop(plan, "compaction_no_smaller", why)
        usable = accounting.usable if accounting.budget is not None else None
        record = CompactionRecord(
            seq=seq,
            kind="full" if plan.kind == "full" else "fallback",
            summary=plan.summary,
            covers_through=plan.covers_through,
            retained=result.retained,
            reason=plan.reason,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            removed=result.removed,
            round=state.round,
            turn=state.turn,
            turn_open=state.turn_open,
            user_budget_chars=user_budget_chars,
            protected=carried.snapshot(),
            estimated=estimated,
            chars_per_token=chars_per_token,
            waited=waited,
            reattached=plan.reattach,
            regrounded=plan.regrounded,
            focus=plan.focus,
            provider_item=plan.provider_item,
            check=plan.check,
            figures=CompactionFigures(
                decided_tokens=plan.tokens_before,
                usable=usable,
                tool_tokens=accounting.tool_tokens,
                hard=accounting.marks.hard if usable is not None else None,
            ),
            usage=plan.usage,
        )
        await self.journal.write([*protected_records, record], boundary="applied")
        self._publish_protected(plan, review, applied=True)
        self._log.info(
            "history_compacted",
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            removed=result.removed,
            retained=len(result.retained),
            reason=plan.reason,
        )
        self.ctx.publish(
            HistoryCompacted(
                session_id=self.ctx.session_id,
                kind=record.kind,
                tokens_before=tokens_before,
                tokens_after=tokens_after,
                estimated=estimated,
                removed=result.removed,
                retained=len(result.retained),
                reason=plan.reason,
                summary=plan.summary,
                covers_through=plan.covers_through,
                round=state.round,
                decided_tokens=plan.tokens_before,
            )
        )
        self.ctx.publish(
            CompactionLanded(
                session_id=self.ctx.session_id,
                round=state.round,
                kind=plan.kind,
                fraction=record.figures.share(tokens_before) if record.figures else None,
                hard=accounting.marks.hard,
                waited=waited or 0.0,
            )
        )
        return True

    async def _drop(self, plan: Plan, kind: str, why: str) -> bool:
        """Keep the old history."""
        reason = f"compaction for round {plan.round} not applied: {why}"
        self._log.info("compaction_skipped", reason=reason)
        state = self.journal.state
        await self.journal.write(
            [ErrorRecord(seq=state.last_seq + 1, kind=kind, message=reason)],
            boundary="dropped",
            dropped=(plan.id, reason),
        )
        self.ctx.publish(CompactionSkipped(session_id=self.ctx.session_id, reason=reason))
        return False

    async def protect(self, ops: Sequence[dict[str, object]]) -> None:
        """The user's change: all or nothing, checked before anything is written."""
        _, canonical = prepare_all(self.journal.state.protected, ops, "user")
        if not canonical:
            return  # every op repeats what is already there
        await self.journal.write(
            [ProtectedRecord(seq=self.journal.state.last_seq + 1, ops=canonical, source="user")],
            boundary="applied",
        )
        self._log.info("protected_changed", source="user", ops=len(canonical))
        self.ctx.publish(
            ProtectedChanged(session_id=self.ctx.session_id, source="user", ops=len(canonical))
        )

    def _protected_records(self, plan: Plan, review: UpdatesReview) -> list[Record]:
        """Error records for the summarizer's refused updates, then the ``protected`` record."""
        first = self.journal.state.last_seq + 1
        notes = list(plan.notices)
        notes += [("protected_updates_malformed", p) for p in plan.protected_problems]
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
        session_id = self.ctx.session_id
        refusals = [("", problem) for problem in plan.protected_problems]
        refusals += [(r.entry, r.reason) for r in review.refused]
        for entry, reason in refusals:
            self._log.warning("protected_refused", entry=entry, reason=reason)
            self.ctx.publish(
                ProtectedRefused(
                    session_id=session_id, source="summarizer", entry=entry, reason=reason
                )
            )
        if applied and review.ops:
            self._log.info("protected_changed", source="summarizer", ops=len(review.ops))
            self.ctx.publish(
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
            seq=self.journal.state.last_seq + 1 + len(notes),
            kind="compaction_refused",
            message=reason,
        )
        await self.journal.write([*notes, refusal], boundary="dropped", dropped=(plan.id, reason))
        self._publish_protected(plan, review, applied=False)
        self._log.error("compaction_refused", entries=missing, round=plan.round)
        for entry in missing:
            self.ctx.publish(
                ProtectedRefused(
                    session_id=self.ctx.session_id,
                    source="summarizer",
                    entry=entry,
                    reason=reason,
                    plan_refused=True,
                )
            )


#: the most of usable the trail of files touched may take, however much room there is
TRAIL_SHARE = 0.05


def _trail_room(
    accounting: Accounting, state: ProtectedState, history_chars: int, chars_per_token: float
) -> int | None:
    """Characters the trail of touched files may take in the protected message after a compaction;
    a turn that fits its window is never pushed over it by the trail."""
    ceiling = accounting.usable if accounting.budget is not None else accounting.threshold
    if not ceiling:
        return None
    others = len(render_protected(state.carried(0)))
    room = accounting.settings.target_after * ceiling * chars_per_token - history_chars - others
    return max(0, int(min(room, TRAIL_SHARE * ceiling * chars_per_token)))
