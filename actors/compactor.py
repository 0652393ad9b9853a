"""The compactor actor: where every compaction of a session is decided.

Its only input is a ``CommittedSnapshot``, put in its inbox by persistence once the batch that
ends at a boundary is durable (a committed round, a new turn's input, an applied plan), so it
never sees a half round and can never interrupt a tool call; the sampler may also ask it to
decide now on the last such snapshot (a manual compaction, a request the provider refused).
It answers each with an ``Advice`` in one coalescing slot: what to stub, which plan to apply,
whether the next request must wait, whether the turn must stop. The sampler only applies it at
a round boundary; the compactor never touches history.

Decisions are quick and pure (``Control``); a summary is a model call, so it runs as a job of
its own beside the decision loop: rounds go on while it is made, and the loop keeps answering
every new snapshot meanwhile.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import anyio
import structlog
from stowage.core import (
    BeforeCompaction,
    CallLimiter,
    CompactionAbout,
    CompactionRecord,
    CompactionSkipped,
    CompactionSummary,
    CompactionVetoed,
    Event,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    ItemRecord,
    ModelGateway,
    ModelRequest,
    Record,
    Settings,
    SystemMessage,
    ToolSpec,
    entry_chars,
    parse_summary_updates,
)
from stowage.policy import build_summary_request, cache_key_for, summary_input_budget, summary_view

from ._accounting import Accounting
from ._control import Control, SummaryJob
from ._inbox import CompactorInbox
from ._mailbox import Slot
from ._messages import Advice, Plan, PlanFailed
from ._planner import MIN_GROWTH, decide_for
from ._provider_compaction import ProviderCompactions, compact_with_provider
from ._summarizer import Breaker, summarize

__all__ = ["MIN_GROWTH", "CompactorKept", "ReadLog", "advise", "decide_for", "run_compactor"]

# the share of the summary budget a re-grounded summary's items may take whole (the rest is
# for the instructions, protected state and what the trim of ``summarize`` needs)
_REGROUND_SHARE = 0.7

#: reads a session's whole log, for a re-grounded summary (``Runtime`` gives its store's)
ReadLog: TypeAlias = Callable[[], Awaitable[Sequence[Record]]]

_log = structlog.get_logger("stowage.compactor")


def _compact_prompt(settings: Settings, log: structlog.stdlib.BoundLogger) -> str | None:
    """The text of ``compact_prompt_file``, read once; None (the built-in instructions) when
    none is set, or, with a warning, when it cannot be read or is empty."""
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


@dataclass(eq=False)
class CompactorKept:
    """What one session's compactor keeps from one run to the next (a parked session's actors
    stop and start again): its circuit breaker, the compaction instructions
    (``compact_prompt_file`` is read once per session), its policy state, and whether it
    still compacts with its provider (``compaction``)."""

    breaker: Breaker
    instructions: str | None
    control: Control
    provider: ProviderCompactions = field(default_factory=ProviderCompactions)

    @classmethod
    def for_session(
        cls,
        settings: Settings,
        session_id: str,
        specs: Sequence[ToolSpec],
        publish: Callable[[Event], None],
    ) -> CompactorKept:
        """Raises ``ConfigError`` when the settings' window leaves no usable budget."""
        log = _log.bind(session=session_id, actor="compactor")
        control = Control(Accounting(settings, specs), publish, log)
        return cls(
            Breaker(threshold=settings.breaker_failures),
            _compact_prompt(settings, log),
            control,
            ProviderCompactions.for_settings(settings),
        )


def advise(slot: Slot[Advice], advice: Advice) -> None:
    """Put ``advice`` in the sampler's slot, merged with an unread one (nothing is lost)."""
    slot.put(advice.merged_with(slot.take()))


async def run_compactor(
    session_id: str,
    settings: Settings,
    gateway: ModelGateway,
    inbox: CompactorInbox,
    advice: Slot[Advice],
    publish: Callable[[Event], None],
    *,
    kept: CompactorKept,
    specs: Sequence[ToolSpec] = (),
    limiter: anyio.CapacityLimiter | None = None,
    call_limiter: CallLimiter | None = None,
    before: BeforeCompaction | None = None,
    read_log: ReadLog | None = None,
) -> None:
    """Decide on every snapshot and ask until ``inbox`` is closed (a summary job still being
    made is finished first); ``before`` (a ``CompactionHooks.before``) sees each full
    compaction before its summary is asked for; ``specs`` are the session's tool specs, sent
    with each summary request so that it shares the rounds' cached prefix; ``read_log``
    reads the session's whole log (a re-grounded summary is made from its records)."""
    log = _log.bind(session=session_id, actor="compactor")
    control = kept.control
    summarizer = _Summarizer(
        session_id=session_id,
        settings=settings,
        gateway=gateway,
        specs=tuple(specs),
        kept=kept,
        publish=publish,
        log=log,
        limiter=limiter,
        call_limiter=call_limiter,
        before=before,
        read_log=read_log,
    )

    async def job(work: SummaryJob) -> None:
        try:
            outcome = await summarizer.plan(work)
            advise(advice, control.landed(work, outcome, anyio.current_time()))
        finally:
            inbox.job_ended()

    async with anyio.create_task_group() as tg:
        while True:
            try:
                snapshot, ask = await inbox.next()
            except anyio.EndOfStream:
                break
            # the loop's clock, which anyio.current_time reads too, without its look-ups
            now = asyncio.get_running_loop().time()
            started: SummaryJob | None = None
            if snapshot is not None:
                unread = advice.peek()
                pending = control.pending
                control.seen(snapshot, unread=unread is not None and unread.outcome is pending)
                verdict, started = control.decide(snapshot, now)
                advise(advice, verdict)
            if ask is not None:
                latest = control.latest
                if latest is None:  # pragma: no cover - the journal seeds one on start
                    advise(advice, Advice(basis_seq=0, answers=ask.ask_id))
                    continue
                verdict, asked = control.ask(latest, ask, now)
                advise(advice, verdict)
                started = started or asked
            if started is not None:
                inbox.jobs += 1
                tg.start_soon(job, started)


@dataclass(eq=False, kw_only=True)
class _Summarizer:
    """Turns a ``SummaryJob`` into a ``Plan``: the before hook, the summary request, its
    retries and fallbacks (``summarize``), the protected-updates block cut out."""

    session_id: str
    settings: Settings
    gateway: ModelGateway
    specs: tuple[ToolSpec, ...]
    kept: CompactorKept
    publish: Callable[[Event], None]
    log: structlog.typing.FilteringBoundLogger
    limiter: anyio.CapacityLimiter | None
    call_limiter: CallLimiter | None
    before: BeforeCompaction | None
    read_log: ReadLog | None = None

    def _input_budget(self) -> int | None:
        """Tokens the summary request's input may carry: the summary model's window less
        its output reserve, less the tool schemas it carries (for the prompt cache)."""
        budget = summary_input_budget(self.settings)
        if budget is None:
            return None
        return max(1, budget - self.kept.control.accounting.tool_tokens)

    async def plan(self, job: SummaryJob) -> Plan | PlanFailed:
        snapshot = job.snapshot
        log = self.log.bind(round=snapshot.round)
        log.info("compaction_planning", reason=job.reason, covers_through=job.covers_through)
        focus = job.focus
        if self.before is not None:
            about = CompactionAbout(
                session_id=self.session_id,
                round=snapshot.round,
                manual=job.kind == "manual",
                reason=job.reason,
                tokens=job.tokens,
                focus=focus,
            )
            try:
                focus = await _before(self.before, about, log)
            except CompactionVetoed as veto:
                reason = f"vetoed by the before-compaction hook: {veto}"
                log.info("compaction_vetoed", reason=reason)
                self.publish(CompactionSkipped(session_id=self.session_id, reason=reason))
                return PlanFailed(round=snapshot.round, error=reason, vetoed=True)
        covered = tuple(e for e in snapshot.history if e.seq <= job.covers_through)
        stubbed = snapshot.stubbed
        regrounded = False
        if job.reground:
            originals = await self._originals(job, covered, log)
            if originals is not None:
                covered, stubbed = originals
                regrounded = True
        refs = {e.item.call_id: e.seq for e in covered if isinstance(e.item, FunctionCallOutput)}
        settings = self.settings
        specs = self.specs

        def build(items: list[Item]) -> ModelRequest:
            # the round request's own shape, so that the provider's prefix cache serves it
            projection = list(items)
            if snapshot.protected_text:
                at = 1 if projection and isinstance(projection[0], SystemMessage) else 0
                projection.insert(at, SystemMessage(text=snapshot.protected_text))
            return build_summary_request(
                projection,
                model=settings.compact_model or settings.model,
                tools=specs,
                cache_key=cache_key_for(settings, self.session_id),
                focus=focus,
                protected_updates=True,
                refs=refs,
                instructions=self.kept.instructions,
            )

        view = summary_view(covered, stubbed)
        notices: tuple[tuple[str, str], ...] = ()
        if self.kept.provider.wanted:
            # protected state in every request, this one too (as in the summary request)
            items = [e.item for e in view]
            if snapshot.protected_text:
                at = 1 if items and isinstance(items[0], SystemMessage) else 0
                items.insert(at, SystemMessage(text=snapshot.protected_text))
            attempt = await compact_with_provider(
                items,
                gateway=self.gateway,
                # the session's own model: the item is for it to read
                model=settings.model,
                cache_key=cache_key_for(settings, self.session_id),
                kept=self.kept.provider,
                log=log,
                limiter=self.limiter,
                call_limiter=self.call_limiter,
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
                )
            notices = attempt.notices
        outcome = await summarize(
            view,
            build=build,
            gateway=self.gateway,
            breaker=self.kept.breaker,
            urgent=job.urgent,
            attempts=settings.max_retries + 1,
            input_budget=self._input_budget(),
            publish=self.publish,
            session_id=self.session_id,
            log=log,
            limiter=self.limiter,
            call_limiter=self.call_limiter,
        )
        if outcome.kind == "failed":
            return PlanFailed(round=snapshot.round, error=outcome.note)
        # the updates block is cut out here; whether its ops may apply is the sampler's call
        summary, protected_ops, problems = (
            parse_summary_updates(outcome.text)
            if outcome.kind == "full"
            else (outcome.text, (), ())  # a digest proposes no protected updates
        )
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
        )

    def _plan(
        self,
        job: SummaryJob,
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
    ) -> Plan:
        """The plan of ``job`` with this summary (the provider's item, if it made it)."""
        snapshot = job.snapshot
        status = snapshot.status
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
            fraction=None
            if status is None
            else self.kept.control.accounting.fraction(status.tokens),
            provider_item=provider_item,
            notices=notices,
        )

    async def _originals(
        self,
        job: SummaryJob,
        covered: tuple[HistoryEntry, ...],
        log: structlog.typing.FilteringBoundLogger,
    ) -> tuple[tuple[HistoryEntry, ...], frozenset[int]] | None:
        """What a re-grounded summary is made from: the leading system message, the summary
        of the newest re-grounded compaction (everything before its ``covers_through``), and
        every original item the log holds after that through ``job.covers_through``; with
        the outputs to show as stubs: as many outputs are whole as fit the summary budget,
        newest first. None (said in the log) when the log cannot be read: the summary is
        then made as usual, from the summary before it."""
        if self.read_log is None:
            return None
        try:
            records = await self.read_log()
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
        stubbed = self._stubs_to_fit(entries, job)
        log.info(
            "compaction_regrounded",
            base=base,
            originals=len(originals),
            anchored=bool(anchor),
            stubbed=len(stubbed),
        )
        return entries, stubbed

    def _stubs_to_fit(self, entries: Sequence[HistoryEntry], job: SummaryJob) -> frozenset[int]:
        """The outputs of ``entries`` to show as stubs so that the rest fits the summary
        budget (with room for the instructions): the oldest go first."""
        budget = self._input_budget()
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
    """Run the before hook: the focus to summarize with (the hook's text added to the one
    asked for). Raises ``CompactionVetoed`` for a manual compaction the hook refuses; any other
    failure of the hook, and a veto of an automatic compaction, is logged and changes nothing."""
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
