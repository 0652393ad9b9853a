"""The clocks of one model call: the request's deadline and a stream's idle time."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Literal

__all__ = ["CallClock", "Expiry"]

#: which limit ended a call: the request's deadline, a stream's idle time
Expiry = Literal["deadline", "idle"]


class CallClock:
    """The limits of one call, which cancel it only while it waits, never across a yield."""

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
