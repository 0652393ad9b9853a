"""Serving one claimed session: its queued messages, in order, each answered once.

The store does the bookkeeping in the log's own transactions (see ``PostgresStore``): the
append of a message's user item records its id, the append of its turn's ``finished`` record
marks it answered and takes it out of the inbox. So a queued message is in one of three states
when a worker looks, and each has one right move:

- not logged: run a turn with it (``Session.send(..., message_id=)``);
- logged, turn still open: a worker died (or the model failed) mid-turn; finish that turn
  (``Session.continue_turn``) without logging the input again;
- answered or given up on: a duplicate; drop it.

A turn that stops without an answer (round limit), a message the model keeps failing, and an
entry that is not a message are given up on: dropped with the reason, which the sender sees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from stowage.core import ModelError, UserMessage
from stowage.facade import Runtime, Session
from stowage.storage import PostgresStore

from ._messages import parse_message
from ._options import WorkerOptions

__all__ = ["Served", "serve_session"]


@dataclass(eq=False)
class Served:
    """A session a worker serves: how to wake it, whether it idles, what it has done."""

    session_id: str
    after: anyio.Event | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    #: event-loop time it began waiting for input with nothing queued; None while busy
    idle_since: float | None = None
    evicted: bool = False
    answered: int = 0
    attempts: dict[str, int] = field(default_factory=dict)
    _wake: anyio.Event = field(default_factory=anyio.Event)

    def arm(self) -> None:
        """Start a new look at the inbox: a wake-up from now on is not missed."""
        self._wake = anyio.Event()

    def wake(self) -> None:
        """Input was queued for it, or it must stop idling (eviction, shutdown)."""
        self._wake.set()

    def evict(self) -> None:
        """Give its place up: another session has input and this one has none."""
        self.evicted = True
        self._wake.set()

    async def linger(self, seconds: float | None) -> bool:
        """Wait idle up to ``seconds`` for a wake-up; False when none came or it was evicted."""
        if (seconds is not None and seconds <= 0) or self.evicted:
            return False
        self.idle_since = anyio.current_time()
        try:
            with anyio.move_on_after(seconds):
                await self._wake.wait()
                return not self.evicted
            return False
        finally:
            self.idle_since = None


async def serve_session(
    runtime: Runtime,
    store: PostgresStore,
    served: Served,
    options: WorkerOptions,
    idle_timeout: float | None,
    draining: Callable[[], bool],
) -> None:
    """Answer what is queued for the session until idle, evicted or draining."""
    log = structlog.get_logger("stowage.worker").bind(session=served.session_id)
    session = await runtime.open(served.session_id)
    while not draining():
        served.arm()
        queued = await store.peek_inbox(served.session_id)
        if not queued:
            if not await served.linger(idle_timeout):
                return
            continue
        for entry, status in queued:
            if draining():
                return
            await _serve_one(session, store, served, entry, status, options, log)


async def _serve_one(
    session: Session,
    store: PostgresStore,
    served: Served,
    entry: Mapping[str, Any],
    status: str | None,
    options: WorkerOptions,
    log: Any,
) -> None:
    message = parse_message(entry)
    if message is None:
        await _drop(store, served, entry, "malformed: not an object with message_id and text", log)
        return
    log = log.bind(message=message.message_id)
    if status in ("answered", "failed"):
        await _drop(store, served, entry, f"duplicate: the message is {status} already", log)
        return
    if status == "logged" and not _open_turn_is(session, message.message_id):
        await _drop(store, served, entry, "interrupted: its turn closed without an answer", log)
        return
    attempt = served.attempts[message.message_id] = served.attempts.get(message.message_id, 0) + 1
    try:
        if status == "logged":
            # logged by a worker that stopped mid-turn (or a failed try): finish that turn
            log.info("turn_resumed", attempt=attempt)
            result = await session.continue_turn()
        else:
            result = await session.send(
                message.text, pin=message.pinned, message_id=message.message_id
            )
    except ModelError as exc:
        log.warning("turn_failed", attempt=attempt, error=str(exc))
        if attempt >= options.turn_attempts:
            reason = f"the model failed it {attempt} times: {exc}"
            await _drop(store, served, entry, reason, log)
        return
    if session.state.turn_open:  # no answer was logged (the round limit, say): give it up
        await _drop(store, served, entry, f"its turn stopped: {result.stopped}", log)
        return
    # the turn's finished record is in the log: the store marked the message answered with it
    served.answered += 1
    served.attempts.pop(message.message_id, None)
    log.info("message_answered", rounds=result.rounds, stopped=result.stopped)


def _open_turn_is(session: Session, message_id: str) -> bool:
    """Whether the session's open turn is the one this message started."""
    if not session.state.turn_open:
        return False
    for item in reversed(session.history):
        if isinstance(item, UserMessage):
            return item.message_id == message_id
    return False


async def _drop(
    store: PostgresStore, served: Served, entry: Mapping[str, Any], reason: str, log: Any
) -> None:
    await store.drop_inbox(served.session_id, [entry], reason=reason)
    log.warning("message_dropped", reason=reason)
