"""A SQLite write that found the disk full is said as one, whichever code SQLite gave it."""

from __future__ import annotations

import errno
import sqlite3

from stowage.storage._sqlite import disk_full_cause


def _error(name: str) -> sqlite3.OperationalError:
    """A SQLite error with the extended code ``name`` (sqlite3's own constants)."""
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorcode = getattr(sqlite3, name)
    error.sqlite_errorname = name
    return error


def test_an_io_error_on_a_nearly_full_device_is_no_space_left() -> None:
    for name in ("SQLITE_IOERR", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC"):
        error = _error(name)
        cause = disk_full_cause(error, free=4096)
        assert isinstance(cause, OSError) and cause.errno == errno.ENOSPC, name
        assert cause.__cause__ is error


def test_an_io_error_with_room_left_or_room_unknown_stays_what_sqlite_said() -> None:
    error = _error("SQLITE_IOERR_WRITE")
    assert disk_full_cause(error, free=10 * 1024 * 1024) is error
    assert disk_full_cause(error, free=None) is error


def test_other_errors_are_never_taken_for_a_full_disk() -> None:
    busy = _error("SQLITE_BUSY")
    assert disk_full_cause(busy, free=0) is busy
    refused = PermissionError(errno.EACCES, "denied")
    assert disk_full_cause(refused, free=0) is refused
