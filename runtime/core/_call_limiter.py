"""The model-call limit of a runtime: calls in flight to its endpoint, rounds and summaries alike.

Summaries go first. With thousands of sessions queued for a call, a first-come-first-served
queue made a background summary wait as long as a round (seconds), so its plan came back after
its session had grown on; a summary waits only for the summaries ahead of it, and the compaction
limit (``max_compactions``) keeps them from ever holding more than that many calls.

A round that had to wait for its place applies a plan that came back meanwhile and builds its
request again before sending it (see the sampler), so the plan is in the request it sends.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import anyio

__all__ = ["CallLimiter", "CallPurpose"]

CallPurpose = Literal["round", "summary"]


@dataclass(eq=False, slots=True)
class _Waiter:
    granted: bool = False
    event: anyio.Event = field(default_factory=anyio.Event)


class CallLimiter:
    """At most ``total_tokens`` calls in flight; a waiting summary is let in before any waiting
    round, and each purpose is served first come, first served.

    A freed token passes straight to the next waiter, so a call arriving while others wait
    queues behind them. A waiter cancelled just after it was handed a token passes it on.
    """

    def __init__(self, total_tokens: int) -> None:
        if total_tokens < 1:
            raise ValueError(f"total_tokens must be >= 1, got {total_tokens}")
        self.total_tokens = total_tokens
        self._borrowed = 0
        self._queues: dict[CallPurpose, deque[_Waiter]] = {"summary": deque(), "round": deque()}

    @property
    def borrowed_tokens(self) -> int:
        """Calls in flight."""
        return self._borrowed

    def waiting(self, purpose: CallPurpose) -> int:
        """Calls of ``purpose`` waiting for a token."""
        return len(self._queues[purpose])

    async def acquire(self, purpose: CallPurpose) -> bool:
        """Take a token, waiting for one if none is free (when one is, the call goes on
        without yielding); True when it had to wait."""
        if self._borrowed < self.total_tokens:
            self._borrowed += 1
            return False
        waiter = _Waiter()
        queue = self._queues[purpose]
        queue.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release()  # handed over as it was cancelled: the next one gets it
            else:
                queue.remove(waiter)
            raise
        return True

    def release(self) -> None:
        """Give a token back: to the first waiting summary, else the first waiting round."""
        for queue in self._queues.values():
            if queue:
                waiter = queue.popleft()
                waiter.granted = True
                waiter.event.set()
                return
        self._borrowed -= 1
