"""The store's descriptor cache: least recently used closed first, pinned ones never."""

from __future__ import annotations

import os
from pathlib import Path

from stowage.storage._fdcache import FdCache


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def opener(tmp_path: Path, name: str) -> int:
    return os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def test_the_least_recently_used_unpinned_descriptors_are_closed_first(tmp_path: Path) -> None:
    cache = FdCache(2)
    fds = {}
    for name in ("a", "b"):
        fds[name] = cache.acquire(name, lambda name=name: opener(tmp_path, name))
        cache.release(name)
    # "a" is used again, so "b" is now the oldest
    assert cache.acquire("a", lambda: opener(tmp_path, "a")) == fds["a"]
    cache.release("a")
    fds["c"] = cache.acquire("c", lambda: opener(tmp_path, "c"))
    cache.release("c")
    assert len(cache) == 2
    assert not is_open(fds["b"]) and is_open(fds["a"]) and is_open(fds["c"])
    cache.close_all()


def test_pinned_descriptors_stay_open_over_capacity_and_go_once_released(tmp_path: Path) -> None:
    cache = FdCache(1)
    a = cache.acquire("a", lambda: opener(tmp_path, "a"))
    b = cache.acquire("b", lambda: opener(tmp_path, "b"))
    assert len(cache) == 2 and is_open(a) and is_open(b)  # both in use: over capacity
    cache.release("b")  # "a" (older) is pinned: "b", the only unpinned one, goes
    assert len(cache) == 1 and is_open(a) and not is_open(b)
    c = cache.acquire("c", lambda: opener(tmp_path, "c"))
    cache.release("a")  # now "a" is the oldest unpinned one
    assert not is_open(a) and is_open(c) and len(cache) == 1
    cache.release("c")
    d = cache.acquire("d", lambda: opener(tmp_path, "d"))
    cache.release("d")
    assert not is_open(c) and is_open(d) and len(cache) == 1
    cache.close_all()
    assert not is_open(d) and len(cache) == 0


def test_an_eviction_closes_as_many_as_the_cache_is_over(tmp_path: Path) -> None:
    cache = FdCache(3)
    pinned = [cache.acquire(n, lambda n=n: opener(tmp_path, n)) for n in "abcde"]
    assert len(cache) == 5
    for name in "abcd":
        cache.release(name)
    # releasing "a" closes it (two over, but the only unpinned one), releasing "b" closes it
    # (one over); then the cache is at capacity and "c", "d" stay open ("e" is still pinned)
    assert len(cache) == 3
    assert [is_open(fd) for fd in pinned] == [False, False, True, True, True]
    cache.close_all()
