"""The JSONL writer leases: one byte each of ``<root>/.leases.lock``, locked with a Linux
open-file-description lock, and a small record ``<root>/<session_id>.lock`` naming the holder.

Why this shape. A lease must be held for as long as its session is live, by a lock the kernel
drops when the process dies (a killed writer blocks nobody), and it must exclude a second store
object in the same process as well as other processes. A ``flock`` per session does all that,
but holds a descriptor per live session: at about 19,500 of them a process ran out of
descriptors. POSIX record locks (``lockf``) would need only one file but belong to the process,
so two stores in one process would never conflict, and closing any descriptor of the file drops
them all. Open-file-description locks (``F_OFD_SETLK``, Linux 3.15) are byte-range locks owned
by the open file description, like a ``flock``: so one descriptor per store holds every lease of
that store, two stores conflict even within one process, and the locks die with the last
descriptor (the process). Nothing else changes: no lease expires, none survives its process.

Which byte. A session's byte is the first 63 bits of the BLAKE2b hash of its id (``lease_byte``;
off_t is signed, the file stays empty: a lock may lie past the end). Two ids sharing a byte is a
false conflict, never a missed one: a second store gets ``SessionBusy`` for a session nobody
writes (with 20,000 live sessions the odds that any two share a byte are about 2 in 10^11).
Within one store, where the kernel cannot tell two leases on one byte apart, ``LeaseTable``
counts the holders of each byte and unlocks it with the last of them.

The record. ``<id>.lock`` holds ``{"owner", "pid", "host", "since", "token"}``, written by the
holder right after it locks and opened only for that write (and by a refused writer or a reader
that wants the holder's name); ``token`` counts the grants, so the next holder's token is one
more. Releasing leaves ``{"token": n}``, written before the byte is unlocked so that it never
overwrites the next holder's name. Neither file is ever deleted: a lease file deleted while a
store has it open would let another store lock the same byte of a new file. A store checks,
whenever it takes a lease, that the path still names the file it holds open.

Every root must be written by processes of one lock scheme: a process of a version that took a
``flock`` on ``<id>.lock`` does not see these locks, nor they its.

Everything here blocks; the store calls it from a worker thread.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
import stat
import struct
import threading
import time
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

from stowage.core import LeaseHolder, SessionBusy, StoreError

from ._lease import now_holder, pid_alive

__all__ = ["LEASE_FILE", "LeaseTable", "holder_of_file", "lease_byte", "lease_is_locked"]

#: the one lock file of a root; a session id cannot start with a dot, so no record is named so
LEASE_FILE = ".leases.lock"

_BUSY_READS = 20  # a new holder writes its name right after it locks: look again, briefly
_BUSY_PAUSE = 0.005
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux: type, whence, start, len, pid
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)  # Linux only
_OFD_GETLK: int | None = getattr(fcntl, "F_OFD_GETLK", None)


def lease_byte(session_id: str) -> int:
    """The byte of ``LEASE_FILE`` whose lock is the session's lease: 0 to 2**63 - 1."""
    digest = hashlib.blake2b(session_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class LeaseTable:
    """The leases one store holds, as locks on its one open description of ``LEASE_FILE``."""

    def __init__(self, root: str, owner: str) -> None:
        self.path = os.path.join(root, LEASE_FILE)
        self._owner = owner
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._holders: dict[int, int] = {}  # byte -> how many of this store's leases use it

    @property
    def descriptors(self) -> int:
        """How many descriptors the table holds open: 0 or 1."""
        return 0 if self._fd is None else 1

    def take(self, session_id: str, record: str) -> tuple[int, LeaseHolder]:
        """Lock the session's byte and name this store in ``record``: ``(token, holder)``."""
        byte = lease_byte(session_id)
        with self._mutex:
            locked = self._holders.get(byte, 0) > 0 or self._lock(byte)
            if locked:
                self._holders[byte] = self._holders.get(byte, 0) + 1
        if not locked:  # read outside the mutex: it may wait for the holder to write its name
            raise SessionBusy(session_id, _holder_of(record), where=record)
        try:
            fd = os.open(record, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            try:
                token = _int(_content(fd).get("token")) + 1
                holder = now_holder(self._owner)
                _write(fd, {
                    "owner": holder.owner,
                    "pid": holder.pid,
                    "host": holder.host,
                    "since": holder.since.isoformat(),
                    "token": token,
                })  # fmt: skip
            finally:
                os.close(fd)
        except BaseException:
            self._unlock(byte)
            raise
        return token, holder

    def release(self, session_id: str, record: str, token: int) -> None:
        """Forget the holder's name in ``record`` (keeping the token count), then unlock."""
        try:
            with suppress(OSError):
                fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
                try:
                    _write(fd, {"token": token})
                finally:
                    os.close(fd)
        finally:
            self._unlock(lease_byte(session_id))

    def close(self) -> None:
        """Close the lease file: every lock this table still holds goes with it."""
        with self._mutex:
            fd, self._fd = self._fd, None
            self._holders.clear()
        if fd is not None:
            os.close(fd)

    def _lock(self, byte: int) -> bool:
        """Lock ``byte`` on this table's description (mutex held); False if another has it."""
        for _ in range(3):
            fd = self._open()
            try:
                _set_lock(fd, fcntl.F_WRLCK, byte)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):  # another description has it
                    return False
                raise
            if self._still_named(fd):
                return True
            # the file was replaced between our open and our lock (or while we held it)
            _set_lock(fd, fcntl.F_UNLCK, byte)
            if self._holders:
                raise StoreError(
                    f"the lease file {self.path} was deleted or replaced while this store held "
                    "leases on it; a writer on the new file would not see them: close every "
                    "store of this root and never delete its lease file"
                )
            os.close(fd)
            self._fd = None
        raise StoreError(f"cannot lock {self.path}: the file keeps being replaced")

    def _unlock(self, byte: int) -> None:
        with self._mutex:
            left = self._holders.get(byte, 0) - 1
            if left > 0:
                self._holders[byte] = left
                return
            self._holders.pop(byte, None)
            if self._fd is not None:
                with suppress(OSError):  # a lock that cannot be dropped goes with close()
                    _set_lock(self._fd, fcntl.F_UNLCK, byte)

    def _open(self) -> int:
        if self._fd is not None:
            return self._fd
        if _OFD_SETLK is None:
            raise StoreError(
                "a JSONL store's writer leases need Linux open-file-description locks "
                "(fcntl.F_OFD_SETLK), which this system lacks; use a sqlite:/// store"
            )
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StoreError(f"cannot lock {self.path}: it is not a regular file")
        self._fd = fd
        return fd

    def _still_named(self, fd: int) -> bool:
        try:
            named = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        here = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (here.st_dev, here.st_ino)


def holder_of_file(root: str, session_id: str, record: str) -> LeaseHolder | None:
    """The holder of a session's lease, looked up without locking, or None. Raises nothing."""
    if not lease_is_locked(root, session_id):
        return None
    return _parse_holder(_read(record))


def lease_is_locked(root: str, session_id: str) -> bool:
    """Whether any open description locks the session's byte (``F_OFD_GETLK``; locks nothing)."""
    try:
        fd = os.open(os.path.join(root, LEASE_FILE), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if _OFD_GETLK is None:
            return False
        asked = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, lease_byte(session_id), 1, 0)
        kind: int = _FLOCK.unpack(fcntl.fcntl(fd, _OFD_GETLK, asked))[0]
        return kind != fcntl.F_UNLCK
    except OSError:
        return False
    finally:
        os.close(fd)


def _set_lock(fd: int, kind: int, byte: int) -> None:
    assert _OFD_SETLK is not None  # _open refused to open the file without it
    fcntl.fcntl(fd, _OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, byte, 1, 0))


def _write(fd: int, content: dict[str, Any]) -> None:
    data = json.dumps(content, separators=(",", ":")).encode() + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _content(fd: int) -> dict[str, Any]:
    try:
        value = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (ValueError, OSError):
        return {}
    return value if isinstance(value, dict) else {}


def _read(path: str) -> dict[str, Any]:
    """A record's content; ``{}`` when it is missing, unreadable or not a JSON object."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        return _content(fd)
    finally:
        os.close(fd)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _holder_of(record: str) -> LeaseHolder | None:
    """The holder a busy session's record names, or ``None`` if it names no live one in time."""
    holder = None
    for _ in range(_BUSY_READS):
        holder = _parse_holder(_read(record))
        # a name missing or of a dead process here: the new holder has not written its own yet
        if holder is not None and (holder.host != socket.gethostname() or pid_alive(holder.pid)):
            return holder
        time.sleep(_BUSY_PAUSE)
    return holder


def _parse_holder(content: dict[str, Any]) -> LeaseHolder | None:
    try:
        since = datetime.fromisoformat(str(content["since"]))
        return LeaseHolder(
            owner=str(content["owner"]),
            pid=int(content["pid"]),
            host=str(content["host"]),
            since=since if since.tzinfo is not None else since.replace(tzinfo=UTC),
        )
    except (KeyError, TypeError, ValueError):
        return None
