"""Provider-native compaction: the endpoint's own ``/responses/compact`` makes the summary item.

Why a strategy beside the local summary and not in place of it: the provider's item is opaque
(encrypted), so only the Responses endpoint can read it; stowage keeps its own choice of what
stays verbatim (recent user words, re-attached tool steps, protected state rendered in every
request) and the log keeps the originals, so recall and search work as after a local one.

Once the endpoint fails a compaction (no such endpoint, any error but an input too long, an
answer with no compaction item) the session compacts locally for the rest of its life and says
so once: a warning in the log, and an ``ErrorRecord`` of kind ``provider_compaction_unavailable``
written with the local compaction that stood in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal, TypeAlias

import anyio
import structlog
from stowage.core import (
    CallLimiter,
    CompactingGateway,
    CompactionSummary,
    ContextLengthExceeded,
    HistoryEntry,
    Item,
    ModelError,
    ModelGateway,
    ModelRequest,
    ProviderCompaction,
    Settings,
)

from ._summarizer import under_summary_limits

__all__ = [
    "UNAVAILABLE_KIND", "ProviderAttempt", "ProviderCompactions", "ProviderState",
    "compact_with_provider", "stranded",
]  # fmt: skip

#: the ``kind`` of the error record that says the provider could not compact
UNAVAILABLE_KIND = "provider_compaction_unavailable"

#: ``untried``: not asked yet; ``working``: it compacted; ``unavailable``: it failed (final)
ProviderState: TypeAlias = Literal["untried", "working", "unavailable"]


def stranded(history: Sequence[HistoryEntry], wire_api: str) -> bool:
    """Whether ``history`` holds a provider's compaction item that ``wire_api`` cannot carry."""
    return wire_api != "responses" and any(
        isinstance(e.item, CompactionSummary) and e.item.provider is not None for e in history
    )


@dataclass(eq=False)
class ProviderCompactions:
    """Whether one live session compacts with its provider."""

    strategy: Literal["local", "provider", "auto"] = "local"
    wire_api: str = "chat"
    state: ProviderState = "untried"

    @classmethod
    def for_settings(cls, settings: Settings) -> ProviderCompactions:
        """Raises nothing (settings refuse "provider" on the chat wire themselves)."""
        return cls(strategy=settings.compaction, wire_api=settings.wire_api)

    @property
    def wanted(self) -> bool:
        """Whether the next full compaction asks the provider."""
        return (
            self.strategy != "local"
            and self.wire_api == "responses"
            and self.state != "unavailable"
        )

    def worked(self) -> None:
        if self.state == "unavailable":  # pragma: no cover - never asked once unavailable
            raise RuntimeError("provider compaction is unavailable for this session")
        self.state = "working"

    def failed(self, error: str) -> str:
        """Mark it unavailable for good; the one-line notice that says so. Raises nothing."""
        self.state = "unavailable"
        asked = "compaction is 'provider', but " if self.strategy == "provider" else ""
        return (
            f"{asked}the endpoint cannot compact this session's history ({error}); it is "
            "compacted locally (a summary request) for the rest of the session"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderAttempt:
    """What asking the provider gave."""

    compaction: ProviderCompaction | None = None
    notices: tuple[tuple[str, str], ...] = ()


async def compact_with_provider(
    items: Sequence[Item],
    *,
    gateway: ModelGateway,
    model: str,
    cache_key: str | None,
    kept: ProviderCompactions,
    log: structlog.typing.FilteringBoundLogger,
    limiter: anyio.CapacityLimiter | None = None,
    call_limiter: CallLimiter | None = None,
) -> ProviderAttempt:
    """Ask ``gateway`` to compact ``items`` (the history a local summary would cover), once: a
    failure falls back to local at once, and every ``ModelError`` is an outcome, never raised."""
    if not isinstance(gateway, CompactingGateway):
        message = kept.failed("the gateway has no provider-native compaction")
        log.warning(UNAVAILABLE_KIND, reason=message)
        return ProviderAttempt(notices=((UNAVAILABLE_KIND, message),))
    request = ModelRequest(
        model=model, input=tuple(items), tool_choice="none", purpose="summary", cache_key=cache_key
    )

    try:
        compaction = await under_summary_limits(
            partial(gateway.compact, request), limiter=limiter, call_limiter=call_limiter
        )
    except ContextLengthExceeded as exc:
        log.warning("provider_compaction_overflow", error=str(exc))
        return ProviderAttempt()
    except ModelError as exc:
        message = kept.failed(f"{type(exc).__name__}: {exc}")
        log.warning(UNAVAILABLE_KIND, reason=message)
        return ProviderAttempt(notices=((UNAVAILABLE_KIND, message),))
    kept.worked()
    usage = compaction.usage
    log.info(
        "provider_compacted",
        items=len(items),
        input_tokens=usage.input_tokens if usage is not None else None,
        output_tokens=usage.output_tokens if usage is not None else None,
    )
    return ProviderAttempt(compaction=compaction)
