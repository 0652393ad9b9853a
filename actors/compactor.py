"""The compactor actor: turns committed snapshots into compaction plans.

Its only input is a ``CommittedSnapshot``, put in its slot by persistence after the round is
durable (or re-sent by the sampler for a manual compaction), so it never sees a half round and
can never interrupt a tool call. It never touches history: it hands a ``Plan`` back through a
one-slot edge and the sampler applies it at a round boundary.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import structlog
from stowage.core import (
    BeforeCompaction,
    CallLimiter,
    CompactionAbout,
    CompactionSkipped,
    CompactionVetoed,
    Event,
    FunctionCallOutput,
    Item,
    ModelGateway,
    ModelRequest,
    Settings,
    parse_summary_updates,
)
from stowage.policy import (
    CompactionDecision,
    build_summary_request,
    cache_key_for,
    decide_compaction,
    effective_threshold,
    summary_input_budget,
    summary_view,
)

from ._mailbox import Slot
from ._messages import CommittedSnapshot, Plan, PlanFailed, PlanOutcome
from ._summarizer import Breaker, summarize

__all__ = ["MIN_GROWTH", "CompactorKept", "decide_for", "run_compactor"]

#: in threshold mode, usage must grow by this share of the threshold after a compaction
#: before another one is worth its summary request
MIN_GROWTH = 0.25

_log = structlog.get_logger("stowage.compactor")


def decide_for(snapshot: CommittedSnapshot, settings: Settings) -> CompactionDecision:
    """The compaction decision for a committed snapshot; the sampler runs the same function
    to know whether it must wait for the plan before its next request."""
    tokens = snapshot.usage.total_tokens if snapshot.usage is not None else None
    if snapshot.manual:
        if len(snapshot.history) < 2:
            return CompactionDecision(compact=False, reason="nothing to compact", tokens=tokens)
        return CompactionDecision(compact=True, reason="manual compaction requested", tokens=tokens)
    if snapshot.request is not None:
        # the sampler's watermark policy (or a context overflow) asked for this plan
        request = snapshot.request
        return CompactionDecision(compact=True, reason=request.reason, tokens=request.tokens)
    if not settings.auto_compact:
        return CompactionDecision(compact=False, reason="auto compaction is off", tokens=tokens)
    threshold = effective_threshold(settings)
    if threshold is None:
        # watermark mode: only the sampler knows stubs and calibration, so it asks explicitly
        return CompactionDecision(compact=False, reason="no plan requested", tokens=tokens)
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
    """What one session's compactor keeps from one run to the next: its circuit breaker and
    the compaction instructions (``compact_prompt_file`` is read once per session)."""

    breaker: Breaker
    instructions: str | None

    @classmethod
    def for_session(cls, settings: Settings, session_id: str) -> CompactorKept:
        log = _log.bind(session=session_id, actor="compactor")
        return cls(Breaker(threshold=settings.breaker_failures), _compact_prompt(settings, log))


async def run_compactor(
    session_id: str,
    settings: Settings,
    gateway: ModelGateway,
    inbox: Slot[CommittedSnapshot],
    plans: Slot[PlanOutcome],
    publish: Callable[[Event], None],
    *,
    limiter: anyio.CapacityLimiter | None = None,
    call_limiter: CallLimiter | None = None,
    before: BeforeCompaction | None = None,
    kept: CompactorKept | None = None,
) -> None:
    """Plan compactions for committed snapshots until ``inbox`` is closed; ``before`` (a
    ``CompactionHooks.before``) sees each full compaction before its summary is asked for;
    ``kept`` carries the breaker and instructions over from an earlier run of this session's
    compactor (a parked session's actors stop and start again)."""
    log = _log.bind(session=session_id, actor="compactor")
    if kept is None:
        kept = CompactorKept.for_session(settings, session_id)
    breaker, instructions = kept.breaker, kept.instructions
    input_budget = summary_input_budget(settings)
    while True:
        try:
            snapshot = await inbox.get()
        except anyio.EndOfStream:
            return
        decision = decide_for(snapshot, settings)
        if not decision.compact:
            continue
        log.info("compaction_planning", round=snapshot.round, reason=decision.reason)
        focus = snapshot.focus
        if before is not None:
            about = CompactionAbout(
                session_id=session_id,
                round=snapshot.round,
                manual=snapshot.manual,
                reason=decision.reason,
                tokens=decision.tokens,
                focus=focus,
            )
            try:
                focus = await _before(before, about, log)
            except CompactionVetoed as veto:
                reason = f"vetoed by the before-compaction hook: {veto}"
                log.info("compaction_vetoed", round=snapshot.round, reason=reason)
                publish(CompactionSkipped(session_id=session_id, reason=reason))
                plans.put(PlanFailed(round=snapshot.round, error=reason, vetoed=True))
                continue

        def build(
            items: list[Item], snapshot: CommittedSnapshot = snapshot, focus: str | None = focus
        ) -> ModelRequest:
            request = build_summary_request(
                items,
                model=settings.compact_model or settings.model,
                focus=focus,
                protected_text=snapshot.protected_text,
                protected_updates=True,
                instructions=instructions,
                refs={
                    e.item.call_id: e.seq
                    for e in snapshot.history
                    if isinstance(e.item, FunctionCallOutput)
                },
            )
            return replace(request, cache_key=cache_key_for(settings, session_id))

        outcome = await summarize(
            summary_view(snapshot.history, snapshot.stubbed),
            build=build,
            gateway=gateway,
            breaker=breaker,
            urgent=snapshot.request is not None and snapshot.request.urgent,
            attempts=settings.max_retries + 1,
            input_budget=input_budget,
            publish=publish,
            session_id=session_id,
            log=log.bind(round=snapshot.round),
            limiter=limiter,
            call_limiter=call_limiter,
        )
        if outcome.kind == "failed":
            plans.put(PlanFailed(round=snapshot.round, error=outcome.note))
            continue
        # the updates block is cut out here; whether its ops may apply is the sampler's call
        summary, protected_ops, problems = (
            parse_summary_updates(outcome.text)
            if outcome.kind == "full"
            else (outcome.text, (), ())  # a digest proposes no protected updates
        )
        plans.put(
            Plan(
                round=snapshot.round,
                summary=summary,
                covers_through=snapshot.last_seq,
                reason=decision.reason + outcome.note,
                tokens_before=decision.tokens,
                estimated=snapshot.request is not None and snapshot.request.estimated,
                based_on_compaction_seq=snapshot.last_compaction_seq,
                kind=outcome.kind,
                protected_ops=protected_ops,
                protected_problems=problems,
            )
        )


async def _before(
    hook: BeforeCompaction, about: CompactionAbout, log: structlog.stdlib.BoundLogger
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
