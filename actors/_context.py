"""What every actor of one session shares: ids, settings, the gateway, limits, the bus."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
from stowage.core import BeforeCompaction, CallLimiter, Event, ModelGateway, Record, Settings
from stowage.tools import ToolRegistry

from ._messages import Append
from ._queue import MailboxSend

__all__ = ["SessionContext"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionContext:
    """Wiring of one live session; built by the runtime, read by its actors."""

    session_id: str
    settings: Settings
    gateway: ModelGateway
    tools: ToolRegistry
    publish: Callable[[Event], None]
    persistence: MailboxSend[Append]
    #: model calls in flight to the endpoint: each round and each summary takes a place
    model_limiter: CallLimiter | None = None
    compaction_limiter: anyio.CapacityLimiter | None = None
    #: ``CompactionHooks.before`` of the runtime, run by the compactor
    before_compaction: BeforeCompaction | None = None
    tool_limiter: anyio.CapacityLimiter | None = None
    #: reads the session's whole log (a re-grounded summary is made from its records)
    read_log: Callable[[], Awaitable[Sequence[Record]]] | None = None
    write_timeout: float = 60.0
    #: told the window a provider stated in refusing a request as too long, when the
    #: session's window was not known (the runtime starts its next sessions with it)
    window_learned: Callable[[int], None] | None = None
