"""The actors' wait primitives on asyncio itself: a flag to wait on and a bounded mailbox.

Every model call passes several messages and replies, so these sit on the hot path. anyio's
``Event`` and memory object streams look the running library up (sniffio) on each event made,
and a stream yields to the event loop on every send and receive even when it need not wait:
per call that was some 30 look-ups and 7 extra trips round the loop. The runtime runs on
asyncio, so these wait on asyncio futures directly; they keep the contract the actors rely
on (a bounded mailbox whose senders wait when it is full, ``EndOfStream`` once every send end
is closed and the buffer is read, ``BrokenResourceError`` once every receive end is closed,
anyio's exceptions throughout) and are cancelled like any await under anyio's cancel scopes.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from abc import abstractmethod
from collections import deque
from typing import ClassVar, Generic, TypeVar

import anyio
from anyio.abc import AsyncResource
from anyio.streams.memory import MemoryObjectStreamStatistics

__all__ = ["Flag", "MailboxReceive", "MailboxSend", "open_mailbox"]

T = TypeVar("T")


class Flag:
    """A one-shot flag to wait on, like ``anyio.Event``, made of nothing but a bool until someone
    waits."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def set(self) -> None:
        """Set it and wake every waiter; setting it again does nothing."""
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters, None
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def is_set(self) -> bool:
        """Whether it was set."""
        return self._set

    async def wait(self) -> None:
        """Return once it is set (at once when it already is)."""
        if not self._set:
            await self._wait(None)

    async def wait_within(self, seconds: float) -> bool:
        """Wait until it is set, ``seconds`` at most (up to ``TICK`` more); returns whether it
        is set. Every write waits with a timeout, so the timeouts share one loop timer per
        tick instead of a cancel scope with a deadline, or a timer, each."""
        if not self._set:
            await self._wait(seconds if seconds != math.inf else None)
        return self._set

    async def _wait(self, seconds: float | None) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        if self._waiters is None:
            self._waiters = [waiter]
        else:
            self._waiters.append(waiter)
        deadlines: _Deadlines | None = None
        tick = 0
        if seconds is not None:
            deadlines = _Deadlines.of(loop)
            tick = deadlines.add(loop, waiter, seconds)
        try:
            await waiter
        finally:
            if deadlines is not None:
                deadlines.remove(tick, waiter)
            if not self._set and self._waiters is not None:  # cancelled or timed out
                self._waiters.remove(waiter)


#: how late past its deadline a timed wait may end (the timer shared by the waits of a tick)
TICK = 1.0


class _Deadlines:
    """The timed waits of one event loop, by the tick their deadline falls in: one timer per
    tick. A tick's waiters are dropped once none is left (a set keeps the size of its busiest
    moment)."""

    __slots__ = ("_due", "_timers")

    _of_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self) -> None:
        # (no reference to the loop: it is the weak key these are kept under)
        self._due: dict[int, set[asyncio.Future[None]]] = {}
        self._timers: set[int] = set()  # the ticks whose timer is set

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Deadlines:
        deadlines = cls._of_loop.get(loop)
        if deadlines is None:
            deadlines = cls._of_loop[loop] = cls()
        return deadlines

    def add(
        self, loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None], seconds: float
    ) -> int:
        """Wake ``waiter`` once ``seconds`` passed (within a tick after)."""
        tick = math.ceil((loop.time() + seconds) / TICK)
        waiting = self._due.get(tick)
        if waiting is None:
            waiting = self._due[tick] = set()
            if tick not in self._timers:
                self._timers.add(tick)
                loop.call_at(tick * TICK, self._fire, tick)
        waiting.add(waiter)
        return tick

    def remove(self, tick: int, waiter: asyncio.Future[None]) -> None:
        """``waiter`` ended (answered, timed out or cancelled)."""
        waiting = self._due.get(tick)
        if waiting is not None:
            waiting.discard(waiter)
            if not waiting:
                del self._due[tick]

    def _fire(self, tick: int) -> None:
        self._timers.discard(tick)
        for waiter in self._due.pop(tick, ()):
            _wake(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _wake_first(waiters: list[asyncio.Future[None]]) -> None:
    while waiters:
        waiter = waiters.pop(0)
        if not waiter.done():
            waiter.set_result(None)
            return


def _wake_all(waiters: list[asyncio.Future[None]]) -> None:
    woken = waiters[:]
    waiters.clear()
    for waiter in woken:
        _wake(waiter)


class _State(Generic[T]):
    """What the ends of one mailbox share. Items only ever sit in ``buffer``: a waiter is
    woken to look again, never handed an item, so a waiter cancelled after its wake-up loses
    nothing (the next one is woken in its place)."""

    __slots__ = ("buffer", "capacity", "getters", "open_receive", "open_send", "putters")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # made by the first item and dropped once read: a parked session keeps its commands
        # mailbox, empty (an empty deque is over 600 bytes)
        self.buffer: deque[T] | None = None
        # lists, not deques: rarely more than one waiter, and a parked session keeps its
        # commands mailbox (an empty deque is ten times an empty list)
        self.getters: list[asyncio.Future[None]] = []
        self.putters: list[asyncio.Future[None]] = []
        self.open_send = 0
        self.open_receive = 0

    def used(self) -> int:
        """Items in the buffer."""
        return len(self.buffer) if self.buffer is not None else 0

    def statistics(self) -> MemoryObjectStreamStatistics:
        return MemoryObjectStreamStatistics(
            current_buffer_used=self.used(),
            max_buffer_size=self.capacity,
            open_send_streams=self.open_send,
            open_receive_streams=self.open_receive,
            tasks_waiting_send=len(self.putters),
            tasks_waiting_receive=len(self.getters),
        )


class _End(AsyncResource, Generic[T]):
    """What both ends of a mailbox do alike."""

    __slots__ = ("_closed", "_state")

    def __init__(self, state: _State[T]) -> None:
        self._state = state
        self._closed = False

    @abstractmethod
    def close(self) -> None:
        """Close this end."""

    async def aclose(self) -> None:
        self.close()

    def statistics(self) -> MemoryObjectStreamStatistics:
        return self._state.statistics()


class MailboxSend(_End[T]):
    """The send end of a bounded mailbox; raises ``BrokenResourceError`` once no receive end is
    open."""

    __slots__ = ()

    def __init__(self, state: _State[T]) -> None:
        super().__init__(state)
        state.open_send += 1

    def send_nowait(self, item: T) -> None:
        """Put ``item`` in the mailbox; raises ``anyio.WouldBlock`` when it is full."""
        state = self._state
        if self._closed:
            raise anyio.ClosedResourceError
        if not state.open_receive:
            raise anyio.BrokenResourceError
        if state.buffer is None:
            state.buffer = deque()
        elif len(state.buffer) >= state.capacity:
            raise anyio.WouldBlock
        state.buffer.append(item)
        if state.getters:
            _wake_first(state.getters)

    async def send(self, item: T) -> None:
        """Put ``item`` in the mailbox, waiting while it is full (back-pressure)."""
        state = self._state
        while True:
            try:
                self.send_nowait(item)
                return
            except anyio.WouldBlock:
                pass
            putter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            state.putters.append(putter)
            try:
                await putter
            except BaseException:
                if putter in state.putters:
                    state.putters.remove(putter)
                elif state.used() < state.capacity:
                    _wake_first(state.putters)  # woken but leaving: pass the room on
                raise

    def clone(self) -> MailboxSend[T]:
        """Another send end: the mailbox ends for its receivers once every one is closed."""
        if self._closed:
            raise anyio.ClosedResourceError
        return MailboxSend(self._state)

    def close(self) -> None:
        """Close this end; once every send end is closed, receivers end after the buffer."""
        if self._closed:
            return
        self._closed = True
        state = self._state
        state.open_send -= 1
        if not state.open_send:
            _wake_all(state.getters)
        # a sender of this end waiting for room gets ClosedResourceError (others wait again)
        _wake_all(state.putters)


class MailboxReceive(_End[T]):
    """The receive end of a bounded mailbox."""

    __slots__ = ()

    def __init__(self, state: _State[T]) -> None:
        super().__init__(state)
        state.open_receive += 1

    def receive_nowait(self) -> T:
        """The next item; raises ``anyio.WouldBlock`` when there is none yet and
        ``anyio.EndOfStream`` when there will be none."""
        state = self._state
        if self._closed:
            raise anyio.ClosedResourceError
        if state.buffer:
            item = state.buffer.popleft()
            if not state.buffer:
                state.buffer = None
            if state.putters:
                _wake_first(state.putters)
            return item
        if not state.open_send:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        """The next item, waiting for one; raises ``anyio.EndOfStream`` once every send end is
        closed."""
        state = self._state
        while True:
            try:
                return self.receive_nowait()
            except anyio.WouldBlock:
                pass
            getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            state.getters.append(getter)
            try:
                await getter
            except BaseException:
                if getter in state.getters:
                    state.getters.remove(getter)
                elif state.buffer:
                    _wake_first(state.getters)  # woken but leaving: pass the item on
                raise

    def close(self) -> None:
        """Close this end; once every receive end is closed, senders get
        ``BrokenResourceError``."""
        if self._closed:
            return
        self._closed = True
        state = self._state
        state.open_receive -= 1
        if not state.open_receive:
            _wake_all(state.putters)
        # a receiver of this end waiting for an item gets ClosedResourceError
        _wake_all(state.getters)

    def __aiter__(self) -> MailboxReceive[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


def open_mailbox(capacity: int) -> tuple[MailboxSend[T], MailboxReceive[T]]:
    """Both ends of a mailbox holding at most ``capacity`` items."""
    if capacity < 1:
        raise ValueError(f"a mailbox holds at least 1 item, not {capacity}")
    state: _State[T] = _State(capacity)
    return MailboxSend(state), MailboxReceive(state)
