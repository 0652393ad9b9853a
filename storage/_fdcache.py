"""A bounded LRU of open append descriptors, shared by the store's worker threads."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

__all__ = ["FdCache"]


@dataclass(eq=False, slots=True)
class _Entry:
    fd: int
    pins: int = 0
    doomed: bool = False


class FdCache:
    """Descriptors by key, least recently used closed first once over ``capacity``."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def acquire(self, key: str, opener: Callable[[], int]) -> int:
        """The descriptor for ``key``, pinned until ``release``; ``opener`` makes one if absent."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                entry.pins += 1
                return entry.fd
        fd = opener()  # outside the lock: open() may block on a slow disk
        with self._lock:
            self._entries[key] = _Entry(fd=fd, pins=1)
            self._evict()
        return fd

    def adopt(self, key: str, fd: int) -> None:
        """Keep an already open ``fd`` for ``key`` (unpinned); closes any previous one."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._drop(old)
            self._entries[key] = _Entry(fd=fd)
            self._evict()

    def release(self, key: str) -> None:
        """Unpin ``key``; closes it if it was discarded or the cache is over capacity."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.pins -= 1
            if entry.doomed and entry.pins == 0:
                del self._entries[key]
                os.close(entry.fd)
            self._evict()

    def discard(self, key: str) -> None:
        """Forget ``key``: closed now, or on its last release if it is pinned."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            if entry.pins == 0:
                del self._entries[key]
                os.close(entry.fd)
            else:
                entry.doomed = True

    def close_all(self) -> None:
        """Close every descriptor, pinned or not; the cache is empty afterwards."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            with suppress(OSError):
                os.close(entry.fd)

    def _drop(self, entry: _Entry) -> None:
        if entry.pins == 0:
            os.close(entry.fd)
        else:  # pragma: no cover - adopt is only used for fresh keys
            entry.doomed = True

    def _evict(self) -> None:
        # Called with the lock held. Pinned entries are skipped, so the cache may stay over
        # capacity while more than ``capacity`` writes are in flight at once. The oldest
        # entries are looked at only until enough are found: with thousands of sessions every
        # append evicts one, and a copy of all keys each time was most of an append's cost.
        excess = len(self._entries) - self._capacity
        if excess <= 0:
            return
        victims = []
        for key, entry in self._entries.items():
            if entry.pins == 0:
                victims.append(key)
                if len(victims) == excess:
                    break
        for key in victims:
            os.close(self._entries.pop(key).fd)
