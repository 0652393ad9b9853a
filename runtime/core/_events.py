"""Typed events: what a session did, for subscribers (CLI, console, tests, metrics).

Events are facts already true when published (a ``RoundCommitted`` event follows the durable
write). Subscribers are plain callables; one that raises is logged and dropped, never allowed to
break the session that published.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ._records import Usage

__all__ = [
    "MilestoneReached", "CompactionLanded", "SettingsChanged", "AssistantDelta", "AttemptAbandoned",
    "CompactionDecided", "CompactionFailed", "CompactionSkipped", "CompactionWaited", "Event",
    "EventBus", "HistoryCompacted", "LogRepaired", "Microcompacted", "ProtectedChanged",
    "ProtectedRefused", "RoundCommitted", "RoundStarted", "SessionFailedEvent", "SessionHibernated",
    "SessionLeaseLostEvent", "SessionRehydrated", "Subscriber", "ToolFinished", "ToolStarted",
    "TurnFinished",
]  # fmt: skip


def _log_subscriber_failed(subscriber: Subscriber) -> None:
    # structlog (and the rich it pulls in) is imported only when there is something to log:
    # the events are imported by every command, ``stowage list`` among them
    import structlog

    structlog.get_logger("stowage.events").exception(
        "subscriber_failed", subscriber=repr(subscriber)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundStarted:
    """A model request is about to be sent."""

    session_id: str
    round: int
    items: int
    tokens: int | None
    estimated: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantDelta:
    """Streamed assistant text."""

    session_id: str
    round: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptAbandoned:
    """A model request of ``round`` failed after it was sent: what it streamed is not the
    round's. ``attempt`` counts the requests sent for the round (1 for the first);
    ``streamed_chars`` is the text already published of it as ``AssistantDelta`` (a reader
    that showed it drops it: the round's text starts again with the next attempt); ``error``
    is the failure's type (``IncompleteResponse`` for a cut stream, ``ResponseTooLarge``...)
    and ``reason`` the same in a few words (``stream cut``); ``next`` what follows: ``retry`` (the same request again), ``compact`` (the provider
    refused it as too long: sent again after compaction, or the turn stops) or ``none`` (the
    turn fails with that error)."""

    session_id: str
    round: int
    attempt: int
    error: str
    reason: str
    streamed_chars: int
    next: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStarted:
    """A tool call began (its function_call is already durable)."""

    session_id: str
    round: int
    call_id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFinished:
    """A tool call ended; ``is_error`` when the output is an error the model will read."""

    session_id: str
    round: int
    call_id: str
    name: str
    is_error: bool
    output_chars: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundCommitted:
    """A round is durable: outputs and the ``round_committed`` record are on disk."""

    session_id: str
    round: int
    usage: Usage | None
    calls: int
    #: the response was stopped by the output limit
    truncated: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnFinished:
    """The model answered without tool calls."""

    session_id: str
    turn: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryCompacted:
    """History was replaced by a summary (``kind`` full, or fallback without a model call):
    ``tokens_before`` and ``tokens_after`` are in use when it was applied and after;
    ``decided_tokens`` the figure it was decided on (the seed's threshold: reported usage)."""

    session_id: str
    kind: str
    tokens_before: int | None
    tokens_after: int | None
    estimated: bool
    removed: int
    retained: int
    reason: str
    summary: str
    covers_through: int
    round: int
    decided_tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Microcompacted:
    """Old tool outputs became stubs in the projection."""

    session_id: str
    stubbed: int
    tokens_before: int | None
    tokens_after: int | None
    estimated: bool
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionDecided:
    """The watermark policy chose an action: ``microcompact``, ``compact`` (in the background)
    or ``block`` (no request until compaction brought the context down), with its figures."""

    session_id: str
    round: int
    action: str
    watermark: str | None
    tokens: int | None
    estimated: bool
    usable: int
    fraction: float | None
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionWaited:
    """The sampler held a request back for ``seconds`` while compaction brought it down."""

    session_id: str
    round: int
    seconds: float
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionLanded:
    """A compaction was applied with the context at ``fraction`` of the usable budget (None:
    unknown) against a hard mark of ``hard``; ``waited`` is how long a round was held back
    for it (0: it landed in the background)."""

    session_id: str
    round: int
    kind: str
    fraction: float | None
    hard: float
    waited: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRetrying:
    """A model call (``purpose`` round or summary) failed transiently and waits ``delay``
    seconds before trying again: ``rate_limited`` for a 429 (the server asked to slow down;
    it does not count as a failed attempt), else ``attempt`` is the attempt that failed."""

    session_id: str
    purpose: str
    attempt: int
    delay: float
    rate_limited: bool
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MilestoneReached:
    """A phase of the work ended (``Session.milestone``, ``stowage milestone``, or the model's
    ``mark_milestone`` call): its ``name`` and ``note``, at ``round`` of ``turn``."""

    session_id: str
    name: str
    note: str | None
    source: str
    round: int
    turn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionSkipped:
    """A compaction was considered and not done, with why (e.g. a stale plan)."""

    session_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionFailed:
    """A compaction attempt failed; ``fallback`` says whether the no-model path took over."""

    session_id: str
    error: str
    attempt: int
    fallback: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedChanged:
    """Protected state changed; ``source`` is ``user`` or ``summarizer``."""

    session_id: str
    source: str
    ops: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedRefused:
    """A protected-state change was refused: ``entry`` names the entry at stake (an id such
    as ``c1``, or the kind it would have added to; empty for a malformed updates block).
    ``plan_refused`` when the whole compaction was refused and the old history stays."""

    session_id: str
    source: str
    entry: str
    reason: str
    plan_refused: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LogRepaired:
    """A torn last line was cut off the log on open."""

    session_id: str
    path: str
    line: int
    bytes_removed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFailedEvent:
    """The session stopped on an error; other sessions go on."""

    session_id: str
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionLeaseLostEvent:
    """The session lost its writer lease and stopped without writing more; others go on.

    ``error`` says how it was found out (a renewal or an append refused) and by whom it was
    taken over, when the store knows.
    """

    session_id: str
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionHibernated:
    """An idle session's actors stopped and its memory was dropped; its log is all that is left."""

    session_id: str
    idle: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRehydrated:
    """A hibernated session was rebuilt from its log (newest compaction + tail)."""

    session_id: str
    records: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingsChanged:
    """A continued session runs with other settings than it was created with (an explicit
    override, or a window found since); ``changes`` maps each field to ``[old, new]``."""

    session_id: str
    changes: dict[str, Any]
    source: str


Event: TypeAlias = (
    MilestoneReached
    | RoundStarted
    | AssistantDelta
    | AttemptAbandoned
    | ToolStarted
    | ToolFinished
    | RoundCommitted
    | TurnFinished
    | HistoryCompacted
    | Microcompacted
    | CompactionSkipped
    | CompactionFailed
    | CompactionDecided
    | CompactionWaited
    | CompactionLanded
    | ModelRetrying
    | ProtectedChanged
    | ProtectedRefused
    | LogRepaired
    | SessionFailedEvent
    | SessionLeaseLostEvent
    | SessionHibernated
    | SessionRehydrated
    | SettingsChanged
)

Subscriber: TypeAlias = Callable[[Event], None]


@dataclass(eq=False)
class EventBus:
    """Fan-out of events to subscribers, synchronously, in publish order."""

    _subscribers: list[Subscriber] = field(default_factory=list)

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add a subscriber; returns a function that removes it."""
        self._subscribers.append(subscriber)
        return lambda: (
            self._subscribers.remove(subscriber) if subscriber in self._subscribers else None
        )

    def publish(self, event: Event) -> None:
        """Deliver ``event`` to every subscriber; a subscriber that raises is logged and removed."""
        for subscriber in tuple(self._subscribers):
            try:
                subscriber(event)
            except Exception:  # a subscriber must never break the session that published
                _log_subscriber_failed(subscriber)
                self._subscribers.remove(subscriber)
