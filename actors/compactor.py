"""The compactor actor: the shell around the compaction machine of one session.

Every decision is ``stowage.policy.step``'s: this actor feeds it events and carries out what
it returns. Its events are a durable boundary, put in its inbox by persistence once the batch
that ends there is durable (so it never sees half a round and can never interrupt a tool
call), the sampler's manual ask, and the end of a summary job it runs. Its actions go three
ways: what the sampler applies at a round boundary (stubs, a plan, hold, stop) into one
coalescing slot as a ``Verdict``; summary jobs (a model call) into its task group, beside the
loop, which keeps answering boundaries meanwhile; notes into the log and onto the bus.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
import structlog
from stowage.core import CompactionDecided, CompactionSkipped, Event, Settings, ToolSpec
from stowage.policy import (
    Accounting,
    Action,
    Answer,
    Apply,
    Decided,
    Hold,
    Job,
    MachineState,
    Plan,
    PolicyDecision,
    Skipped,
    Stop,
    Stub,
    Stubs,
    Summarize,
    SummaryFailed,
    SummaryReady,
    step,
)
from stowage.policy import Event as MachineEvent

from ._context import SessionContext
from ._inbox import CompactorInbox
from ._mailbox import Slot
from ._messages import Verdict
from ._provider_compaction import ProviderCompactions
from ._summarizer import Breaker
from ._summary_jobs import Summarizer, SummaryFailure, compact_prompt

__all__ = ["CompactorKept", "run_compactor", "verdict_of"]

_log = structlog.get_logger("stowage.compactor")


@dataclass(eq=False)
class CompactorKept:
    """What one session's compactor keeps from one run to the next (a parked session's actors
    stop and start again)."""

    state: MachineState
    breaker: Breaker
    instructions: str | None
    provider: ProviderCompactions = field(default_factory=ProviderCompactions)

    @classmethod
    def for_session(
        cls, settings: Settings, session_id: str, specs: Sequence[ToolSpec]
    ) -> CompactorKept:
        """Raises ``ConfigError`` when the settings' window leaves no usable budget."""
        log = _log.bind(session=session_id, actor="compactor")
        return cls(
            MachineState(accounting=Accounting.of(settings, specs)),
            Breaker(threshold=settings.breaker_failures),
            compact_prompt(settings, log),
            ProviderCompactions.for_settings(settings),
        )


def verdict_of(actions: Sequence[Action], basis_seq: int) -> Verdict:
    """What of ``actions`` the sampler applies, as one verdict on ``basis_seq``."""
    if not actions:  # most boundaries: nothing to do
        return Verdict(basis_seq=basis_seq)
    stubs: list[Stubs] = []
    skipped: list[str] = []
    plan: Plan | None = None
    stop: Stop | None = None
    hold = False
    answers = 0
    for action in actions:
        match action:
            case Stub():
                stubs.append(action.stubs)
            case Apply():
                plan = action.plan
            case Stop():
                stop = action
            case Answer():
                answers = max(answers, action.ask_id)
            case Hold():
                hold = True
            case Skipped():
                skipped.append(action.reason)
    return Verdict(
        basis_seq=basis_seq,
        stubs=tuple(stubs),
        plan=plan,
        hold=hold and stop is None,
        stop=stop,
        answers=answers,
        skipped=tuple(skipped),
    )


async def run_compactor(
    ctx: SessionContext, inbox: CompactorInbox, verdicts: Slot[Verdict], *, kept: CompactorKept
) -> None:
    """Step the machine on every event until ``inbox`` is closed (a summary job still being made
    is finished first)."""
    session_id, publish = ctx.session_id, ctx.publish
    log = _log.bind(session=session_id, actor="compactor")
    summarizer = Summarizer(
        ctx=ctx,
        specs=tuple(ctx.tools.specs()),
        breaker=kept.breaker,
        instructions=kept.instructions,
        provider=kept.provider,
        log=log,
    )

    async with anyio.create_task_group() as tg:

        def handle(event: MachineEvent) -> None:
            """One step of the machine, and its actions carried out (no await: the state
            changes in one place, whichever task's event it is)."""
            kept.state, actions = step(kept.state, event)
            latest = kept.state.latest
            verdicts.put(
                verdict_of(actions, latest.last_seq if latest else 0).merged_with(verdicts.take())
            )
            for action in actions:
                match action:
                    case Summarize(job=job):
                        inbox.jobs += 1
                        tg.start_soon(run_job, job, kept.state.accounting)
                    case Decided(decision=decision, round=round_):
                        _decided(log, publish, session_id, decision, round_)
                    case Skipped(reason=reason):
                        log.info("compaction_skipped", reason=reason)
                        publish(CompactionSkipped(session_id=session_id, reason=reason))
                    case Apply(plan=plan) if plan.kind == "fallback":
                        log.warning("compaction_fallback", reason=plan.reason)

        async def run_job(job: Job, accounting: Accounting) -> None:
            log.info(
                "compaction_requested",
                round=job.snapshot.round,
                kind=job.kind,
                urgent=job.urgent,
                reground=job.reground,
                covers_through=job.covers_through,
            )
            try:
                outcome = await summarizer.plan(job, accounting)
                now = anyio.current_time()
                if isinstance(outcome, SummaryFailure):
                    handle(SummaryFailed(job.id, outcome.error, outcome.vetoed, now))
                else:
                    handle(SummaryReady(job.id, outcome, now))
            finally:
                inbox.job_ended()

        while True:
            try:
                event = await inbox.next()
            except anyio.EndOfStream:
                break
            handle(event)


def _decided(
    log: structlog.typing.FilteringBoundLogger,
    publish: Callable[[Event], None],
    session_id: str,
    decision: PolicyDecision,
    round_: int,
) -> None:
    """Log and publish a watermark crossed (``CompactionDecided``)."""
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
            session_id=session_id,
            round=round_,
            action=decision.action,
            watermark=decision.watermark,
            tokens=decision.tokens,
            estimated=decision.estimated,
            usable=decision.usable,
            fraction=decision.fraction,
            reason=decision.reason,
        )
    )
