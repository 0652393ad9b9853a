"""Retries of transient model errors with jittered exponential backoff, honouring every wait
the server asked for (``ModelError.retry_after``: Retry-After and its kin, see the gateway)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from stowage.core import ModelError, RateLimitError

__all__ = ["backoff_delay", "call_with_retries"]

T = TypeVar("T")

#: the longest a jittered exponential backoff waits when the server named no wait
BACKOFF_CAP = 20.0


def backoff_delay(
    attempt: int,
    *,
    base: float = 0.5,
    cap: float = BACKOFF_CAP,
    retry_after: float | None = None,
    max_wait: float = 60.0,
) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): the server's wait (jittered, at least
    50 ms, so a herd of sessions does not return at once), else full-jitter backoff."""
    if retry_after is not None and retry_after >= 0:
        wait = min(max_wait, retry_after)
        return wait + random.uniform(0, max(0.05, wait * 0.1))
    return random.uniform(0, min(cap, base * 2 ** (attempt - 1)))


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    log: Any,
    what: str,
    base: float = 0.5,
    rate_limit_wait: float = 600.0,
    max_wait: float = 60.0,
    on_wait: Callable[[int, float, bool, ModelError], None] | None = None,
) -> T:
    """Call ``fn`` until it succeeds or fails ``attempts`` times with a transient error. A 429
    does not count against ``attempts``: its waits add up to at most ``rate_limit_wait``."""
    attempt = 1
    throttled = 0
    waited = 0.0
    while True:
        try:
            return await fn()
        except RateLimitError as exc:
            throttled += 1
            # backoff without a server wait is capped well below rate_limit_wait, so a storm
            # is ridden out in many short waits
            delay = backoff_delay(
                min(throttled, 6), base=base, retry_after=exc.retry_after, max_wait=max_wait
            )
            if waited + delay > rate_limit_wait:
                raise
            waited += delay
            if on_wait is not None:
                on_wait(throttled, delay, True, exc)
            log.debug(
                f"{what}_throttled",
                throttled=throttled,
                delay=round(delay, 3),
                retry_after=exc.retry_after,
            )
        except ModelError as exc:
            if not exc.transient or attempt >= attempts:
                raise
            delay = backoff_delay(
                attempt, base=base, retry_after=exc.retry_after, max_wait=max_wait
            )
            if on_wait is not None:
                on_wait(attempt, delay, False, exc)
            log.warning(
                f"{what}_retry",
                attempt=attempt,
                delay=round(delay, 3),
                error=type(exc).__name__,
                message=str(exc),
            )
            attempt += 1
        await anyio.sleep(delay)
