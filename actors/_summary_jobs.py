"""A summary job: from the machine's ``Job`` to the ``Plan`` it asked for.

The before-compaction hook runs first (it may add focus, or refuse a manual compaction), then
the summary is made: by the provider's own compaction endpoint when the session compacts
there, else by a summary request (``summarize``: retries, a request trimmed to fit the
summary model's window, the breaker and the no-model fallback). A re-grounded summary is made
from the log's original records instead of the summary before it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog
from stowage.core import (
    BeforeCompaction,
    CompactionAbout,
    CompactionError,
    CompactionRecord,
    CompactionSkipped,
    CompactionSummary,
    CompactionVetoed,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    ItemRecord,
    ModelRequest,
    Settings,
    SummaryCheck,
    SystemMessage,
    ToolSpec,
    Usage,
    absorbed,
    entry_chars,
    parse_summary_updates,
)
from stowage.policy import (
    Accounting,
    Job,
    Plan,
    build_summary_request,
    cache_key_for,
    draw_probes,
    fit_probes,
    kept_section,
    missed_probes,
    probe_focus,
    summary_input_budget,
    summary_view,
)

from ._context import SessionContext
from ._provider_compaction import ProviderCompactions, compact_with_provider
from ._summarizer import Breaker, SummaryOutcome, summarize

__all__ = ["SummaryFailure", "Summarizer", "compact_prompt"]

# the share of the summary budget a re-grounded summary's items may take whole (the rest is
# for the instructions, protected state and what the trim of ``summarize`` needs)
_REGROUND_SHARE = 0.7


def compact_prompt(settings: Settings, log: structlog.typing.FilteringBoundLogger) -> str | None:
    """The text of ``compact_prompt_file``, read once."""
    path = settings.compact_prompt_file
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("compact_prompt_unreadable", path=str(path), error=str(exc))
        return None
    if not text:
        log.warning("compact_prompt_empty", path=str(path))
        return None
    return text


@dataclass(frozen=True, slots=True)
class SummaryFailure:
    """No plan came of a job: why, and whether a before-compaction hook refused it."""

    error: str
    vetoed: bool = False


@dataclass(eq=False, kw_only=True)
class Summarizer:
    """Turns a ``Job`` into a ``Plan``."""

    #: the session's wiring: its settings, gateway, bus, limiters, before hook and log reader
    ctx: SessionContext
    specs: tuple[ToolSpec, ...]
    breaker: Breaker
    instructions: str | None
    provider: ProviderCompactions
    log: structlog.typing.FilteringBoundLogger

    def _input_budget(self, accounting: Accounting) -> int | None:
        """Tokens the summary request's input may carry."""
        budget = summary_input_budget(accounting.settings)
        if budget is None:
            return None
        # the hard mark's margin, as for a round: the figure is an estimate
        return max(1, int((budget - accounting.schemas) * accounting.marks.hard))

    async def plan(self, job: Job, accounting: Accounting) -> Plan | SummaryFailure:
        snapshot = job.snapshot
        log = self.log.bind(round=snapshot.round)
        log.info("compaction_planning", reason=job.reason, covers_through=job.covers_through)
        focus = job.focus
        if self.ctx.before_compaction is not None:
            about = CompactionAbout(
                session_id=self.ctx.session_id,
                round=snapshot.round,
                manual=job.kind == "manual",
                reason=job.reason,
                tokens=job.tokens,
                focus=focus,
            )
            try:
                focus = await _before(self.ctx.before_compaction, about, log)
            except CompactionVetoed as veto:
                reason = f"vetoed by the before-compaction hook: {veto}"
                log.info("compaction_vetoed", reason=reason)
                self.ctx.publish(CompactionSkipped(session_id=self.ctx.session_id, reason=reason))
                return SummaryFailure(reason, vetoed=True)
        covered = tuple(e for e in snapshot.history if e.seq <= job.covers_through)
        stubbed = snapshot.stubbed
        regrounded = False
        if job.reground:
            originals = await self._originals(job, covered, log, accounting)
            if originals is not None:
                covered, stubbed = originals
                regrounded = True
        refs = {e.item.call_id: e.seq for e in covered if isinstance(e.item, FunctionCallOutput)}
        settings = self.ctx.settings
        specs = self.specs

        def build(items: list[Item], missed: str | None = None) -> ModelRequest:
            # the round request's own shape, so that the provider's prefix cache serves it
            # (``missed``: what a second ask is told the first summary left out)
            projection = list(items)
            if snapshot.protected_text:
                at = 1 if projection and isinstance(projection[0], SystemMessage) else 0
                projection.insert(at, SystemMessage(text=snapshot.protected_text))
            return build_summary_request(
                projection,
                model=settings.compact_model or settings.model,
                tools=specs,
                cache_key=cache_key_for(settings, self.ctx.session_id),
                focus="\n\n".join(t for t in (focus, missed) if t) or None,
                protected_updates=True,
                refs=refs,
                instructions=self.instructions,
                # the session's own model: the reserve its requests send (another model's own)
                max_output_tokens=None if settings.compact_model else accounting.output_reserve,
            )

        view = summary_view(covered, stubbed)
        notices: tuple[tuple[str, str], ...] = ()
        if self.provider.wanted:
            # protected state in every request, this one too (as in the summary request)
            items = [e.item for e in view]
            if snapshot.protected_text:
                at = 1 if items and isinstance(items[0], SystemMessage) else 0
                items.insert(at, SystemMessage(text=snapshot.protected_text))
            attempt = await compact_with_provider(
                items,
                gateway=self.ctx.gateway,
                # the session's own model: the item is for it to read
                model=settings.model,
                cache_key=cache_key_for(settings, self.ctx.session_id),
                kept=self.provider,
                log=log,
                limiter=self.ctx.compaction_limiter,
                call_limiter=self.ctx.model_limiter,
            )
            if attempt.compaction is not None:
                return self._plan(
                    job,
                    summary=attempt.compaction.text,
                    reason=f"{job.reason}; provider compaction (the endpoint's encrypted item)",
                    kind="full",
                    regrounded=regrounded,
                    focus=focus,
                    provider_item=attempt.compaction.item,
                    usage=attempt.compaction.usage,
                )
            notices = attempt.notices

        async def ask(builder: Callable[[list[Item]], ModelRequest]) -> SummaryOutcome:
            return await summarize(
                view,
                build=builder,
                gateway=self.ctx.gateway,
                breaker=self.breaker,
                urgent=job.urgent,
                attempts=settings.max_retries + 1,
                input_budget=self._input_budget(accounting),
                chars_per_token=snapshot.status.chars_per_token,
                publish=self.ctx.publish,
                session_id=self.ctx.session_id,
                log=log,
                limiter=self.ctx.compaction_limiter,
                call_limiter=self.ctx.model_limiter,
            )

        outcome = await ask(build)
        if outcome.kind == "failed":
            return SummaryFailure(outcome.note)
        # the updates block is cut out here; whether its ops may apply is the sampler's call
        summary, protected_ops, problems = (
            parse_summary_updates(outcome.text)
            if outcome.kind == "full"
            else (outcome.text, (), ())  # a digest proposes no protected updates
        )
        check = None
        spent = outcome.usage
        probes = self._probes(job, accounting) if outcome.kind == "full" else ()
        if probes:
            missed = missed_probes(summary, probes)
            check = SummaryCheck(probes=probes, missed_first=missed)
            if missed:
                log.info("summary_missed_probes", missed=len(missed), probes=len(probes))
                again = await ask(lambda items: build(items, probe_focus(missed)))
                if again.usage is not None:  # the second ask is paid for too
                    spent = again.usage if spent is None else spent + again.usage
                if again.kind == "full":
                    second = parse_summary_updates(again.text)
                    if len(missed_probes(second[0], probes)) <= len(missed):
                        summary, protected_ops, problems = second
                still = missed_probes(summary, probes)
                # appended as a section of their own, newest first, as many as the window
                # has room for: the rest are named on the record, never silently gone
                room = _appended_room(accounting, snapshot.status.chars_per_token)
                appended = fit_probes(still, room)
                if appended:
                    summary = f"{summary}\n\n{kept_section(appended)}"
                left_out = tuple(p for p in still if p not in appended)
                check = replace(check, asked_again=True, appended=appended, left_out=left_out)
        local = "; compacted locally: provider compaction unavailable" if notices else ""
        return self._plan(
            job,
            summary=summary,
            reason=job.reason + outcome.note + local,
            kind=outcome.kind,
            regrounded=regrounded,
            focus=focus,
            protected_ops=protected_ops,
            protected_problems=problems,
            notices=notices,
            usage=spent,
            check=check,
        )

    def _probes(self, job: Job, accounting: Accounting) -> tuple[str, ...]:
        """What the summary of ``job`` must keep (``stowage.policy.draw_probes``)."""
        snapshot = job.snapshot
        if not self.ctx.settings.check_summaries:
            return ()
        try:
            gone = absorbed(
                snapshot.history,
                covers_through=job.covers_through,
                user_budget_chars=accounting.user_budget(snapshot.status.chars_per_token),
            )
        except CompactionError:
            return ()  # a plan that does not fit its history: the sampler drops it anyway
        return draw_probes(gone, snapshot.probes)

    def _plan(
        self,
        job: Job,
        *,
        summary: str,
        reason: str,
        kind: str,
        regrounded: bool,
        focus: str | None,
        protected_ops: tuple[dict[str, Any], ...] = (),
        protected_problems: tuple[str, ...] = (),
        provider_item: dict[str, Any] | None = None,
        notices: tuple[tuple[str, str], ...] = (),
        usage: Usage | None = None,
        check: SummaryCheck | None = None,
    ) -> Plan:
        """The plan of ``job`` with this summary (the provider's item, if it made it)."""
        snapshot = job.snapshot
        return Plan(
            round=snapshot.round,
            summary=summary,
            covers_through=job.covers_through,
            reason=reason,
            tokens_before=job.tokens,
            estimated=job.estimated,
            based_on_compaction_seq=snapshot.last_compaction_seq,
            kind=kind,
            protected_ops=protected_ops,
            protected_problems=protected_problems,
            regrounded=regrounded,
            focus=focus or None,
            fraction=job.fraction,
            provider_item=provider_item,
            notices=notices,
            usage=usage,
            check=check,
        )

    async def _originals(
        self,
        job: Job,
        covered: tuple[HistoryEntry, ...],
        log: structlog.typing.FilteringBoundLogger,
        accounting: Accounting,
    ) -> tuple[tuple[HistoryEntry, ...], frozenset[int]] | None:
        """What a re-grounded summary is made from; None (said in the log) when the log cannot be
        read, and the summary is made as usual."""
        if self.ctx.read_log is None:
            return None
        try:
            records = await self.ctx.read_log()
        except Exception as exc:  # the store failing must not fail the compaction
            log.warning("reground_unreadable", error=repr(exc))
            return None
        base = job.snapshot.reground_base
        anchor: list[HistoryEntry] = [
            HistoryEntry(
                seq=r.seq, item=CompactionSummary(text=r.summary, provider=r.provider_item)
            )
            for r in records
            if isinstance(r, CompactionRecord) and r.regrounded and r.covers_through == base
        ][-1:]
        system = [e for e in covered[:1] if isinstance(e.item, SystemMessage)]
        originals = [
            HistoryEntry(seq=r.seq, item=r.item)
            for r in records
            if isinstance(r, ItemRecord)
            and base < r.seq <= job.covers_through
            and not (system and r.seq == system[0].seq)
        ]
        entries = (*system, *anchor, *originals)
        stubbed = self._stubs_to_fit(entries, job, accounting)
        log.info(
            "compaction_regrounded",
            base=base,
            originals=len(originals),
            anchored=bool(anchor),
            stubbed=len(stubbed),
        )
        return entries, stubbed

    def _stubs_to_fit(
        self, entries: Sequence[HistoryEntry], job: Job, accounting: Accounting
    ) -> frozenset[int]:
        """The outputs of ``entries`` to show as stubs so that the rest fits the summary budget:
        the oldest go first."""
        budget = self._input_budget(accounting)
        if budget is None:
            return frozenset()
        status = job.snapshot.status
        ratio = status.chars_per_token if status is not None else 4.0
        room = int(budget * ratio * _REGROUND_SHARE)
        outputs = [e for e in entries if isinstance(e.item, FunctionCallOutput)]
        chars = sum(entry_chars(e) for e in entries)
        stubbed: set[int] = set()
        for entry in outputs:  # oldest first
            if chars <= room:
                break
            chars -= entry_chars(entry) - entry_chars(entry, (entry.seq,))
            stubbed.add(entry.seq)
        return frozenset(stubbed)


async def _before(
    hook: BeforeCompaction, about: CompactionAbout, log: structlog.typing.FilteringBoundLogger
) -> str | None:
    """Run the before hook: the focus to summarize with. Raises ``CompactionVetoed`` for a manual
    compaction it refuses; any other failure or veto is logged and changes nothing."""
    try:
        extra = hook(about)
        if inspect.isawaitable(extra):
            extra = await extra
    except CompactionVetoed as veto:
        if about.manual:
            raise
        log.warning(
            "compaction_veto_ignored",
            round=about.round,
            reason=f"an automatic compaction cannot be vetoed (the window needs it): {veto}",
        )
        return about.focus
    except Exception as exc:  # a broken hook must not stop what keeps the session in its window
        log.warning("compaction_hook_failed", round=about.round, error=repr(exc))
        return about.focus
    if not extra:
        return about.focus
    text = str(extra)
    return f"{about.focus}\n{text}" if about.focus else text


#: the most of usable a summary's appended probes may take
APPENDED_SHARE = 0.1


def _appended_room(accounting: Accounting, chars_per_token: float) -> int | None:
    """Characters the probes a summary still misses may take when appended to it."""
    ceiling = accounting.usable if accounting.budget is not None else accounting.threshold
    return int(APPENDED_SHARE * ceiling * chars_per_token) if ceiling else None
