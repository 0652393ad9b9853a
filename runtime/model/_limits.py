"""Shared limits of a runtime: model calls in flight per endpoint.

A runtime talks to one endpoint through one gateway, so wrapping that gateway is what makes the
limit "per endpoint": round requests of every session and the compactors' summary requests all
queue on the same limiter instead of stampeding the provider (or the connection pool).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from stowage.core import ModelGateway, ModelRequest, ModelResponse, StreamEvent

__all__ = ["LimitedGateway"]


class LimitedGateway:
    """A ``ModelGateway`` that lets at most ``limiter.total_tokens`` calls be in flight.

    A streamed call holds its token until the stream ends or is closed. Raises what the wrapped
    gateway raises.
    """

    def __init__(self, inner: ModelGateway, limiter: anyio.CapacityLimiter) -> None:
        self.inner = inner
        self.limiter = limiter

    async def create(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call, once a token is free."""
        async with self.limiter:
            return await self.inner.create(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """One streamed call, once a token is free; the token is held until the stream ends."""
        # on behalf of a private token, not the task: an abandoned stream may be closed by
        # the event loop's generator finaliser, in another task than the one that borrowed
        borrower = object()
        await self.limiter.acquire_on_behalf_of(borrower)
        try:
            async for event in self.inner.stream(request):
                yield event
        finally:
            self.limiter.release_on_behalf_of(borrower)

    async def aclose(self) -> None:
        """Close the wrapped gateway."""
        await self.inner.aclose()
