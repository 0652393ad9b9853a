"""The clocks of one model call: the request's deadline and a stream's idle time.

Each wait runs under one ``asyncio.timeout`` at the nearer of the two, so cancellation and
``TimeoutError`` follow asyncio's rules; the socket's silence is aiohttp's own read timeout
(``sock_read``). A clock that kept all three limits on one self-re-arming timer handle, where
aiohttp re-arms one on every chunk, measured within the noise of this one in the CPU a model
call costs (docs/benchmarks/2026-12-07-cpu-per-call.md), so the simple one stays. Nothing here
imports an HTTP library.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Literal

__all__ = ["CallClock", "Expiry"]

#: which limit ended a call: the request's deadline, a stream's idle time
Expiry = Literal["deadline", "idle"]


class CallClock:
    """The limits of one call, which cancel it only while it waits (``async with`` the
    clock: once for a whole exchange, or once per read of a stream, never across a yield).

    Leaving a wait raises ``TimeoutError`` when ``deadline`` seconds passed since the clock
    was made or ``idle`` seconds since the wait began (``idle`` None: no such limit);
    ``expired`` then says which. A deadline that passed between waits ends the next one at
    once.
    """

    def __init__(self, *, deadline: float, idle: float | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + deadline
        self._idle = idle
        #: the wait in progress and the limit it runs to (None: the caller is not waiting)
        self._scope: asyncio.Timeout | None = None
        self._limit: Expiry = "deadline"
        #: which limit ended the call (None: none did)
        self.expired: Expiry | None = None

    async def __aenter__(self) -> CallClock:
        when, self._limit = self._deadline, "deadline"
        if self._idle is not None and self._loop.time() + self._idle < when:
            when, self._limit = self._loop.time() + self._idle, "idle"
        scope = asyncio.timeout_at(when)
        await scope.__aenter__()
        self._scope = scope
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        scope, self._scope = self._scope, None
        assert scope is not None
        try:
            await scope.__aexit__(kind, exc, tb)
        except TimeoutError:
            self.expired = self._limit
            raise
