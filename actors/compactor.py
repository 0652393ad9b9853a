"""The compactor actor: turns committed snapshots into compaction plans.

Its only input is ``RoundCommitted``, put in its slot by persistence after the round is durable
(or re-sent by the sampler for a manual compaction), so it never sees a half round and can
never interrupt a tool call. It never touches history: it hands a ``Plan`` back through a
one-slot edge and the sampler applies it at a round boundary.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog

from runtime._compaction import CompactionDecision, build_summary_request, decide_compaction
from runtime._config import Settings
from runtime._errors import ModelError
from runtime._events import CompactionFailed, Event
from runtime._gateway import ModelGateway

from ._mailbox import Slot
from ._messages import Plan, PlanFailed, PlanOutcome, RoundCommitted

__all__ = ["decide_for", "run_compactor"]

_log = structlog.get_logger("stowage.compactor")


def decide_for(snapshot: RoundCommitted, settings: Settings) -> CompactionDecision:
    """The compaction decision for a committed snapshot; the sampler runs the same function
    to know whether it must wait for the plan before its next request."""
    tokens = snapshot.usage.total_tokens if snapshot.usage is not None else None
    if snapshot.manual:
        if len(snapshot.history) < 2:
            return CompactionDecision(compact=False, reason="nothing to compact", tokens=tokens)
        return CompactionDecision(compact=True, reason="manual compaction requested", tokens=tokens)
    if not settings.auto_compact or settings.compact_threshold is None:
        return CompactionDecision(compact=False, reason="auto compaction is off", tokens=tokens)
    return decide_compaction(
        tokens=tokens, threshold=settings.compact_threshold, history_length=len(snapshot.history)
    )


async def run_compactor(
    session_id: str,
    settings: Settings,
    gateway: ModelGateway,
    inbox: Slot[RoundCommitted],
    plans: Slot[PlanOutcome],
    publish: Callable[[Event], None],
    *,
    limiter: anyio.CapacityLimiter | None = None,
) -> None:
    """Plan compactions for committed snapshots until ``inbox`` is closed."""
    log = _log.bind(session=session_id, actor="compactor")
    while True:
        try:
            snapshot = await inbox.get()
        except anyio.EndOfStream:
            return
        decision = decide_for(snapshot, settings)
        if not decision.compact:
            continue
        log.info("compaction_planning", round=snapshot.round, reason=decision.reason)
        request = build_summary_request(
            [entry.item for entry in snapshot.history],
            model=settings.model,
            focus=snapshot.focus,
        )
        try:
            if limiter is None:
                response = await gateway.create(request)
            else:
                async with limiter:
                    response = await gateway.create(request)
        except ModelError as exc:
            log.warning("compaction_failed", round=snapshot.round, error=str(exc))
            publish(
                CompactionFailed(session_id=session_id, error=str(exc), attempt=1, fallback=False)
            )
            plans.put(PlanFailed(round=snapshot.round, error=str(exc)))
            continue
        plans.put(
            Plan(
                round=snapshot.round,
                summary=response.text.strip(),
                covers_through=snapshot.last_seq,
                reason=decision.reason,
                tokens_before=decision.tokens,
                estimated=False,
                based_on_compaction_seq=snapshot.last_compaction_seq,
            )
        )
