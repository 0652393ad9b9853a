"""Retries of transient model errors with jittered exponential backoff, honouring Retry-After."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from ._errors import ModelError, RateLimitError

__all__ = ["backoff_delay", "call_with_retries"]

T = TypeVar("T")


def backoff_delay(
    attempt: int, *, base: float = 0.5, cap: float = 20.0, retry_after: float | None = None
) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): the server's Retry-After when given
    (plus up to 10% jitter so a herd of sessions does not return at the same instant), else
    full-jitter exponential backoff."""
    if retry_after is not None and retry_after >= 0:
        return min(cap, retry_after) * (1 + random.random() * 0.1)
    return random.uniform(0, min(cap, base * 2 ** (attempt - 1)))


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    log: Any,
    what: str,
    base: float = 0.5,
) -> T:
    """Call ``fn`` until it succeeds or fails ``attempts`` times with a transient error.

    Raises the last ``ModelError``; non-transient errors are raised at once.
    """
    attempt = 1
    while True:
        try:
            return await fn()
        except ModelError as exc:
            if not exc.transient or attempt >= attempts:
                raise
            retry_after = exc.retry_after if isinstance(exc, RateLimitError) else None
            delay = backoff_delay(attempt, base=base, retry_after=retry_after)
            log.warning(f"{what}_retry", attempt=attempt, delay=round(delay, 3), error=str(exc))
            await anyio.sleep(delay)
            attempt += 1
