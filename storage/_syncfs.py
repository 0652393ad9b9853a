"""``syncfs(2)``: make everything written to one filesystem durable with one call."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

from stowage.core import ConfigError

__all__ = ["load_syncfs"]

#: the first kernel whose syncfs reports writeback errors to its caller
_REPORTS_ERRORS = (5, 8)


def _kernel(release: str) -> tuple[int, int]:
    """(major, minor) of a release string such as ``6.18.44-fc-v1272``; (0, 0) if unreadable."""
    parts = release.split(".", 2)
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


def load_syncfs(platform: str = sys.platform, release: str | None = None) -> Callable[[int], None]:
    """The ``syncfs`` of this system, called with a descriptor of a file on the filesystem to
    sync; it raises ``OSError`` when the kernel reports a failure.

    Raises ``ConfigError`` saying why (not Linux, a kernel before 5.8, no ``syncfs`` in the C
    library) and what to use instead.
    """
    if not platform.startswith("linux"):
        raise ConfigError(f"durability 'syncfs' needs Linux (this is {platform}); use 'fsync'")
    release = release if release is not None else os.uname().release
    if _kernel(release) < _REPORTS_ERRORS:
        raise ConfigError(
            f"durability 'syncfs' needs Linux 5.8 or later (this is {release}): earlier kernels "
            "do not report a failed write from syncfs; use 'fsync'"
        )
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError) as exc:
        raise ConfigError(
            f"durability 'syncfs': the C library has no syncfs ({exc}); use 'fsync'"
        ) from exc
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int

    def syncfs(fd: int) -> None:
        if function(fd) != 0:  # ctypes lets go of the GIL for the call
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs: {os.strerror(errno)}")

    return syncfs
