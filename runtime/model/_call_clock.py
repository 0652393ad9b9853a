"""The clocks of one model call on one timer handle: the request's deadline, a stream's idle
time and the socket's silence.

aiohttp's own read timeout (``sock_read``) cancels and re-arms a timer handle on every chunk the
socket delivers, and an ``asyncio.timeout`` per read arms one more: three handles or more per
call pushed through the event loop's timer heap, where one call of the plain aiohttp loop
pushes one. ``CallClock`` keeps every limit on a single handle: progress only notes the time,
and the handle, when it fires, arms itself again at the new limit if the call moved on, or
expires it through an ``asyncio.timeout`` that has no handle of its own, so cancellation and
``TimeoutError`` follow asyncio's rules. Nothing here imports an HTTP library.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Literal

__all__ = ["CallClock", "Expiry"]

#: which limit ended a call: the request's deadline, a stream's idle time, the socket's silence
Expiry = Literal["deadline", "idle", "silence"]


class CallClock:
    """The limits of one call, which cancel it only while it waits (``async with`` the
    clock: once for a whole exchange, or once per read of a stream, never across a yield).

    Leaving a wait raises ``TimeoutError`` when ``deadline`` seconds passed since the clock
    was made, ``idle`` seconds since the wait began, or ``silence`` seconds since the later
    of the wait's start and the last ``progress`` (``first_silence`` before the first: the
    time to connect is in it); ``expired`` then says which. ``idle`` or ``silence`` None: no
    such limit. A deadline that passed between waits ends the next one at once. ``close``
    when the call is done.
    """

    def __init__(
        self,
        *,
        deadline: float,
        idle: float | None = None,
        silence: float | None = None,
        first_silence: float | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        now = self._loop.time()
        self._deadline = now + deadline
        self._silence = silence
        #: when the silence began, as far as its limit goes
        self._quiet_since = now
        if silence is not None and first_silence is not None:
            self._quiet_since += first_silence - silence
        self._idle = idle
        self._idle_since = now
        #: the wait in progress (None: the caller is not waiting, nothing is cancelled)
        self._scope: asyncio.Timeout | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for = 0.0
        #: which limit ended the call (None: none did)
        self.expired: Expiry | None = None

    def progress(self) -> None:
        """Bytes came: the silence starts again."""
        self._quiet_since = self._loop.time()

    def close(self) -> None:
        """The call is done: drop the timer handle."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _limit(self) -> float:
        limit = self._deadline
        if self._silence is not None:
            limit = min(limit, self._quiet_since + self._silence)
        if self._idle is not None:
            limit = min(limit, self._idle_since + self._idle)
        return limit

    def _arm(self, limit: float) -> None:
        self._armed_for = limit
        self._handle = self._loop.call_at(limit, self._fire)

    def _fire(self) -> None:
        # limits only move later, so the handle never fires after one of them
        self._handle = None
        if self._scope is None:
            return  # not waiting: armed again when the next wait begins
        limit = self._limit()
        if limit > self._armed_for:  # the call moved on since the handle was armed
            self._arm(limit)
            return
        if self._deadline <= limit:
            self._expire("deadline")
        elif self._idle is not None and self._idle_since + self._idle <= limit:
            self._expire("idle")
        else:
            self._expire("silence")

    def _expire(self, why: Expiry) -> None:
        assert self._scope is not None
        self.expired = why
        self._scope.reschedule(self._loop.time())  # cancels the task, as asyncio.timeout does

    async def __aenter__(self) -> CallClock:
        now = self._loop.time()
        self._idle_since = now
        self._quiet_since = max(self._quiet_since, now)
        scope = asyncio.timeout(None)
        await scope.__aenter__()
        self._scope = scope
        if self._deadline <= now:
            self._expire("deadline")
        elif self._handle is None:
            self._arm(self._limit())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        scope, self._scope = self._scope, None
        assert scope is not None
        await scope.__aexit__(kind, exc, tb)
