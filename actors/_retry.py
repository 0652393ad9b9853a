"""Retries of transient model errors with jittered exponential backoff, honouring Retry-After."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from stowage.core import ModelError, RateLimitError

__all__ = ["backoff_delay", "call_with_retries"]

T = TypeVar("T")


def backoff_delay(
    attempt: int, *, base: float = 0.5, cap: float = 20.0, retry_after: float | None = None
) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): the server's Retry-After when given
    (plus up to 10% jitter, at least 50 ms, so a herd of sessions does not return at the same
    instant and a ``Retry-After: 0`` cannot make a busy loop), else full-jitter exponential
    backoff."""
    if retry_after is not None and retry_after >= 0:
        wait = min(cap, retry_after)
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
) -> T:
    """Call ``fn`` until it succeeds or fails ``attempts`` times with a transient error.

    A 429 (``RateLimitError``) is the provider asking us to slow down, not a failure: it does
    not count against ``attempts``. It is retried after the server's Retry-After (jittered) or a
    jittered backoff, for as long as the waits add up to at most ``rate_limit_wait`` seconds.

    Raises the last ``ModelError``; non-transient errors are raised at once.
    """
    attempt = 1
    throttled = 0
    waited = 0.0
    while True:
        try:
            return await fn()
        except RateLimitError as exc:
            throttled += 1
            # capped well below rate_limit_wait so a storm is ridden out in many short waits
            delay = backoff_delay(
                min(throttled, 6), base=base, cap=20.0, retry_after=exc.retry_after
            )
            if waited + delay > rate_limit_wait:
                raise
            waited += delay
            log.debug(f"{what}_throttled", throttled=throttled, delay=round(delay, 3))
        except ModelError as exc:
            if not exc.transient or attempt >= attempts:
                raise
            delay = backoff_delay(attempt, base=base)
            log.warning(f"{what}_retry", attempt=attempt, delay=round(delay, 3), error=str(exc))
            attempt += 1
        await anyio.sleep(delay)
