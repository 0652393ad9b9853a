"""The small base of every actor: bounded mailboxes, private replies and a coalescing slot."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

from ._queue import Flag, MailboxReceive, MailboxSend, open_mailbox

__all__ = ["Doorbell", "Latch", "Mailbox", "Reply", "Slot", "mailbox"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Mailbox(Generic[T]):
    """Both ends of a bounded actor inbox."""

    send: MailboxSend[T]
    receive: MailboxReceive[T]


def mailbox(capacity: int, item_type: type[T]) -> Mailbox[T]:
    """A bounded inbox: senders wait when it is full (back-pressure, never unbounded memory)."""
    send: MailboxSend[T]
    receive: MailboxReceive[T]
    send, receive = open_mailbox(capacity)
    return Mailbox(send, receive)


@dataclass(eq=False)
class Reply(Generic[T]):
    """A private one-shot answer to an ask: set once by the actor, awaited by the asker (no
    stream pair per ask: appends are hot)."""

    _event: Flag = field(default_factory=Flag)
    _value: T | None = None
    _error: BaseException | None = None

    def set(self, value: T) -> None:
        """Answer; a second answer is ignored."""
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def fail(self, error: BaseException) -> None:
        """Answer with an exception the asker will raise; a second answer is ignored."""
        if not self._event.is_set():
            self._error = error
            self._event.set()

    @property
    def done(self) -> bool:
        """Whether an answer was given."""
        return self._event.is_set()

    async def wait(self) -> T:
        """The answer; raises the exception given to ``fail``."""
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    async def wait_within(self, seconds: float) -> T:
        """The answer, given within ``seconds``; raises ``TimeoutError`` when none came."""
        if not await self._event.wait_within(seconds):
            raise TimeoutError(f"no answer within {seconds} s")
        return await self.wait()


@dataclass(eq=False)
class Slot(Generic[T]):
    """A single coalescing slot: ``put`` never blocks and replaces an unread value, so an edge
    where only the latest value matters never fills up and deadlocks."""

    _value: T | None = None
    #: made by a getter that waits, dropped when it wakes: a parked session's slots hold none
    _changed: Flag | None = None
    _closed: bool = False
    #: called each time a getter starts waiting with nothing it accepts (it went idle)
    on_idle: Callable[[], None] | None = None
    _waiting: bool = False

    @property
    def idle(self) -> bool:
        """Whether its getter waits with nothing to take: the actor reading it has no work."""
        return self._waiting and self._value is None

    def put(self, value: T) -> None:
        """Store ``value``, replacing any unread one."""
        self._value = value
        if self._changed is not None:
            self._changed.set()

    def peek(self) -> T | None:
        """The unread value, if any, without taking it."""
        return self._value

    def take(self) -> T | None:
        """Remove and return the unread value, if any."""
        value, self._value = self._value, None
        return value

    def close(self) -> None:
        """Wake every waiter; ``get`` then raises ``anyio.EndOfStream`` when empty."""
        self._closed = True
        if self._changed is not None:
            self._changed.set()

    def reopen(self) -> None:
        """Take values again after ``close`` (a parked session's actors start anew)."""
        self._closed = False

    async def get(self) -> T:
        """Wait for a value and take it. Raises ``anyio.EndOfStream`` once closed and empty."""
        return await self.get_when(lambda _: True)

    async def get_when(self, accept: Callable[[T], bool]) -> T:
        """Wait for a value ``accept`` takes, and take it; values it refuses stay put."""
        while True:
            value = self._value
            if value is not None and accept(value):
                self._value = None
                return value
            if self._closed:
                raise anyio.EndOfStream
            changed = self._changed = Flag()
            self._waiting = True
            if self.on_idle is not None:
                self.on_idle()
            try:
                await changed.wait()
            finally:
                self._waiting = False
                if self._changed is changed:
                    self._changed = None


class Latch(Flag):
    """A one-shot flag to wait on, like ``anyio.Event``, costing two fields until someone waits."""

    __slots__ = ()


@dataclass(eq=False)
class Doorbell:
    """Wakes the one task waiting on it: rung when something it may wait for happened (a
    command came, the input closed, another actor went idle). A ring with nobody waiting is
    not remembered: the waiter checks what it waits for, then waits, with no await between."""

    _event: Flag | None = None

    def ring(self) -> None:
        """Wake the waiter, if one waits."""
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Wait for the next ring."""
        event = self._event = Flag()
        try:
            await event.wait()
        finally:
            self._event = None
