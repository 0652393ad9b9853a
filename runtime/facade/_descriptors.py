"""How near the process is to its limit of open descriptors, checked before a session starts.

A process out of descriptors fails wherever it opens the next one: a log, a lease record, a
model connection, a tool's pipe, as ``EMFILE`` in whichever session was unlucky. So the
runtime looks before it starts a session (create, open, resume, fork, or a wake from
hibernation) and refuses it with ``DescriptorLimitReached``, naming the limit and the fix, once
the descriptors in use come within a reserve of the limit: the reserve is for the sessions
already live, whose model calls, tools and log writes open descriptors for a moment. A live
JSONL session holds none of its own (see ``stowage.storage``'s writer leases), so the check
bites only when something else holds them. ``Runtime.descriptors`` reports the same figures.

Counting is not free: listing ``/proc/self/fd`` took about 1.8 ms with 600 open here, which
at 25,000 session starts would be 45 s. So a runtime's ``DescriptorBudget`` counts again only
when the starts since its last count could have used up the room it saw (at ``_PER_START``
descriptors each), when a second has passed, when the limit changed, or after a refusal; far
from the limit that is about once a second, near it every start.
"""

from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import dataclass

from stowage.core import DescriptorLimitReached

__all__ = [
    "DescriptorBudget", "DescriptorUse", "check_room", "descriptor_use", "reserve_for",
    "starts_before_recount",
]  # fmt: skip

_FD_DIR = "/proc/self/fd"  # Linux; elsewhere the count is unknown and nothing is refused
_PER_START = 8  # descriptors a session start may open for a while: its log, record, connection
_RECOUNT_EVERY = 1.0  # seconds: what else the process opens meanwhile is not counted by starts


@dataclass(frozen=True, slots=True, kw_only=True)
class DescriptorUse:
    """Descriptors the process has open and may open: ``None`` where unknown or unlimited."""

    in_use: int | None
    #: the soft ``RLIMIT_NOFILE`` (what ``open`` is held to); None: unlimited
    limit: int | None

    @property
    def reserve(self) -> int | None:
        """Descriptors kept for the sessions already live (see ``reserve_for``)."""
        return None if self.limit is None else reserve_for(self.limit)


def reserve_for(limit: int) -> int:
    """The descriptors a new session may not take: a tenth of ``limit``, at least 64."""
    return max(64, limit // 10)


def descriptor_use() -> DescriptorUse:
    """The process's figures now (one directory listing). Raises nothing."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        in_use: int | None = len(os.listdir(_FD_DIR)) - 1  # the listing's own descriptor
    except OSError:
        in_use = None
    return DescriptorUse(in_use=in_use, limit=None if soft == resource.RLIM_INFINITY else soft)


def check_room(session_id: str, use: DescriptorUse) -> None:
    """Raises ``DescriptorLimitReached`` when ``use`` leaves no more than the reserve free for
    starting ``session_id``."""
    if use.in_use is None or use.limit is None:
        return
    reserve = reserve_for(use.limit)
    if use.in_use + reserve >= use.limit:
        raise DescriptorLimitReached(
            session_id, in_use=use.in_use, limit=use.limit, reserve=reserve
        )


def starts_before_recount(use: DescriptorUse) -> float:
    """How many session starts may follow a count of ``use`` before the room it left."""
    if use.in_use is None or use.limit is None:
        return math.inf
    room = use.limit - reserve_for(use.limit) - use.in_use
    return max(0, room // _PER_START)


class DescriptorBudget:
    """One runtime's check before each session start, counting only when it must (see the
    module docstring). Not thread-safe: the runtime calls it from its event loop."""

    def __init__(self) -> None:
        self._seen: DescriptorUse | None = None
        self._seen_at = 0.0
        self._starts = 0

    def check(self, session_id: str) -> None:
        """Raises ``DescriptorLimitReached`` when ``session_id`` may not start now."""
        now = time.monotonic()
        seen = self._seen
        if (
            seen is None
            or now - self._seen_at >= _RECOUNT_EVERY
            or self._starts >= starts_before_recount(seen)
            or resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            != (seen.limit or resource.RLIM_INFINITY)
        ):
            seen = self._seen = descriptor_use()
            self._seen_at, self._starts = now, 0
        try:
            check_room(session_id, seen)
        except BaseException:
            self._seen = None  # sessions may close meanwhile: count again on the next start
            raise
        self._starts += 1
