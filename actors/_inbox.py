"""The compactor's inbox: the newest durable boundary, and the sampler's manual ask, if any.

Persistence puts a boundary after each durable batch (only the newest matters: an unread one
is replaced, and the newest carries everything the machine reads); the sampler puts a
``Manual`` ask, which the machine answers on the newest boundary it has seen. Neither put
ever blocks, so the one back edge of the actor graph cannot deadlock. ``idle`` tells the
session's supervisor that the compactor has nothing to do (nothing unread, no summary being
made), so the actors may stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio
from stowage.policy import Boundary, Manual, Snapshot

from ._mailbox import Doorbell

__all__ = ["CompactorInbox"]


@dataclass(eq=False)
class CompactorInbox:
    """Two coalescing slots and the bell that wakes the compactor."""

    _snapshot: Snapshot | None = None
    _ask: Manual | None = None
    _closed: bool = False
    _waiting: bool = False
    #: summaries being made (the compactor's own jobs): it is not idle while one is
    jobs: int = 0
    #: called when the compactor goes idle (the supervisor's doorbell)
    on_idle: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self._bell = Doorbell()

    @property
    def idle(self) -> bool:
        """Whether the compactor waits with nothing to read and no summary in the making."""
        return self._waiting and self._snapshot is None and self._ask is None and not self.jobs

    def put(self, snapshot: Snapshot) -> None:
        """Persistence: the newest durable boundary (replaces an unread one)."""
        self._snapshot = snapshot
        self._bell.ring()

    def ask(self, ask: Manual) -> None:
        """The sampler: a manual compaction (replaces an unread ask)."""
        self._ask = ask
        self._bell.ring()

    def job_ended(self) -> None:
        """A summary job of the compactor ended: it may be idle now."""
        self.jobs -= 1
        if self.idle and self.on_idle is not None:
            self.on_idle()

    def close(self) -> None:
        """No more boundaries: ``next`` raises ``anyio.EndOfStream`` once the slots are read."""
        self._closed = True
        self._bell.ring()

    def reopen(self) -> None:
        """Take boundaries again (a parked session's actors start anew)."""
        self._closed = False

    async def next(self) -> Boundary | Manual:
        """The next event: the unread boundary first (an ask is answered on the newest one),
        then the ask; each taken. Raises ``anyio.EndOfStream`` once closed with nothing
        unread."""
        while True:
            snapshot, ask = self._snapshot, self._ask
            if snapshot is not None:
                self._snapshot = None
                return Boundary(snapshot, anyio.current_time())
            if ask is not None:
                self._ask = None
                return ask
            if self._closed:
                raise anyio.EndOfStream
            self._waiting = True
            if self.idle and self.on_idle is not None:
                self.on_idle()
            try:
                await self._bell.wait()  # no await since the checks: no ring is missed
            finally:
                self._waiting = False
