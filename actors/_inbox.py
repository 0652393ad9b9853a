"""The compactor's inbox: the newest committed snapshot, and the sampler's ask, if any.

Persistence puts a snapshot after each durable boundary (only the newest matters: an unread
one is replaced); the sampler puts an ``Ask`` (a manual compaction, a refused request) that
the compactor answers on the snapshot it holds. Neither put ever blocks, so the one back edge
of the actor graph cannot deadlock. ``idle`` tells the session's supervisor that the compactor
has nothing to do (no snapshot or ask unread, no summary being made), so the actors may stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ._mailbox import Doorbell
from ._messages import Ask, CommittedSnapshot

__all__ = ["CompactorInbox"]


@dataclass(eq=False)
class CompactorInbox:
    """Two coalescing slots and the bell that wakes the compactor."""

    _snapshot: CommittedSnapshot | None = None
    _ask: Ask | None = None
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

    def put(self, snapshot: CommittedSnapshot) -> None:
        """Persistence: the newest durable boundary (replaces an unread one)."""
        self._snapshot = snapshot
        self._bell.ring()

    def ask(self, ask: Ask) -> None:
        """The sampler: decide now on the last committed snapshot (replaces an unread ask)."""
        self._ask = ask
        self._bell.ring()

    def job_ended(self) -> None:
        """A summary job of the compactor ended: it may be idle now."""
        self.jobs -= 1
        if self.idle and self.on_idle is not None:
            self.on_idle()

    def close(self) -> None:
        """No more snapshots: ``next`` raises ``anyio.EndOfStream`` once the slots are read."""
        self._closed = True
        self._bell.ring()

    def reopen(self) -> None:
        """Take snapshots again (a parked session's actors start anew)."""
        self._closed = False

    async def next(self) -> tuple[CommittedSnapshot | None, Ask | None]:
        """The unread snapshot and ask (at least one of them), taken. Raises
        ``anyio.EndOfStream`` once closed with nothing unread."""
        while True:
            snapshot, ask = self._snapshot, self._ask
            if snapshot is not None or ask is not None:
                self._snapshot = self._ask = None
                return snapshot, ask
            if self._closed:
                raise anyio.EndOfStream
            self._waiting = True
            if self.idle and self.on_idle is not None:
                self.on_idle()
            try:
                await self._bell.wait()  # no await since the checks: no ring is missed
            finally:
                self._waiting = False
