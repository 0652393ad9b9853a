"""Applying what changes history and protected state outside a round: compaction plans and
the user's protected-state changes, for one sampler and only at its round boundaries.

A plan is checked before anything is written: stale plans are skipped, the summarizer's
protected updates are reviewed (forbidden ones refused and reported), and a plan whose new
projection would lose a protected entry is refused whole, the old history kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import structlog
from stowage.core import (
    CompactionError,
    CompactionRecord,
    CompactionSkipped,
    CompactionSummary,
    ErrorRecord,
    HistoryCompacted,
    ProtectedChanged,
    ProtectedRecord,
    ProtectedRefused,
    Record,
    SystemMessage,
    UpdatesReview,
    apply_compaction,
    build_projection,
    estimate_tokens,
    history_chars,
    item_chars,
    prepare_all,
    review_updates,
    verify,
)
from stowage.core import render as render_protected
from stowage.policy import compaction_shrinks

from ._context import SessionContext
from ._journal import Journal
from ._messages import Plan

__all__ = ["PlanApplier"]

# the fixed ratio of the "no larger than it found" comparison (both sides at the same one)
_CHARS_PER_TOKEN = 4.0

_log = structlog.get_logger("stowage.sampler")


class PlanApplier:
    """Compaction and protected-state writes of one session, through its journal."""

    def __init__(
        self,
        ctx: SessionContext,
        journal: Journal,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.ctx = ctx
        self.journal = journal
        self._log = log if log is not None else _log.bind(session=ctx.session_id, actor="sampler")

    async def apply(
        self,
        plan: Plan,
        *,
        user_budget_chars: int,
        chars_per_token: float,
        waited: float | None = None,
    ) -> bool:
        """Apply ``plan`` at a round boundary; False when it was stale or refused.

        ``user_budget_chars`` is what recent user words may keep; ``chars_per_token`` turns
        the new projection into the token figure the record carries (history only: tool
        schemas are outside the usable budget, as in every other figure);
        ``waited`` (seconds a request was held back for it) goes into the record.
        Raises what ``Journal.write`` raises.
        """
        state = self.journal.state
        if plan.based_on_compaction_seq != state.last_compaction_seq:
            reason = f"stale plan for round {plan.round}: history was compacted since"
            self.ctx.publish(CompactionSkipped(session_id=self.ctx.session_id, reason=reason))
            return False
        review = review_updates(state.protected, plan.protected_ops)
        protected_records = self._protected_records(plan, review)
        seq = state.last_seq + 1 + len(protected_records)
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
            reason = f"compaction for round {plan.round} not applied: {exc}"
            self._log.error("compaction_invalid", round=plan.round, error=str(exc))
            await self.journal.write(
                [ErrorRecord(seq=state.last_seq + 1, kind="compaction_invalid", message=reason)]
            )
            self.ctx.publish(CompactionSkipped(session_id=self.ctx.session_id, reason=reason))
            return False
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
        tokens_after = estimate_tokens(projection, chars_per_token)
        # what the projection holds now, on the same estimate (the plan's figure is from when
        # it was asked for; rounds may have gone on since)
        chars_before = history_chars(state.history, state.stubbed)
        protected_before = len(render_protected(state.protected))
        tokens_before = max(
            plan.tokens_before or 0,
            math.ceil((chars_before + protected_before) / chars_per_token),
        )
        kept = {entry.seq for entry in result.retained}
        replaced = [
            e
            for e in state.history
            if e.seq <= plan.covers_through
            and e.seq not in kept
            and not isinstance(e.item, SystemMessage)
        ]
        # the compactor's reason for a compaction the user asked for (see ``decide_for``):
        # applied whatever it leaves, unless ``compact_only_if_smaller`` says otherwise
        manual = plan.reason.startswith("manual compaction requested")
        no_gain = None
        if not (manual and not self.ctx.settings.compact_only_if_smaller):
            no_gain = compaction_shrinks(
                replaced_chars=history_chars(replaced, state.stubbed),
                # what the summary item costs as sent (a provider's item, not its line)
                summary_chars=item_chars(
                    CompactionSummary(text=plan.summary, provider=plan.provider_item)
                ),
                chars_per_token=chars_per_token,
            )
            # nor may it leave more history than it found (protected state the summarizer
            # added is the point of it, so it is not counted)
            history_before = math.ceil(chars_before / _CHARS_PER_TOKEN)
            history_after = math.ceil(
                history_chars(result.history, state.stubbed) / _CHARS_PER_TOKEN
            )
            if no_gain is None and history_after >= history_before:
                no_gain = (
                    f"skipped: the compacted history (~{history_after} tokens) would be no "
                    f"smaller than the history it replaces (~{history_before} tokens)"
                )
        if no_gain is not None:
            # a compaction that grows history is how a too-small window loops: never write it
            self._log.info("compaction_skipped", reason=no_gain)
            self.ctx.publish(CompactionSkipped(session_id=self.ctx.session_id, reason=no_gain))
            return False
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
            protected=review.state.snapshot(),
            estimated=plan.estimated,
            chars_per_token=chars_per_token,
            waited=waited,
            reattached=plan.reattach,
            regrounded=plan.regrounded,
            focus=plan.focus,
            provider_item=plan.provider_item,
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
        """Error records for the summarizer's refused or malformed updates, then the
        ``protected`` record of the accepted ones; seqs follow the state's last one."""
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
        await self.journal.write([*notes, refusal])
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
