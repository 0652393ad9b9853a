"""The JSONL writer lease: an exclusive ``flock`` on ``<root>/<session_id>.lock``, beside the log.

The lock is the kernel's, so it dies with the process that held it (a lock file left by a
killed process blocks nobody). The file's bytes only tell a refused writer who holds the lock:
``{"owner", "pid", "host", "since", "token"}``; ``token`` counts the grants, so the next
holder's token is one more. Lock files are never deleted: deleting one while another process
has it open would let two writers lock two different files. Releasing leaves ``{"token": n}``.

Everything here blocks; the store calls it from a worker thread.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

from stowage.core import LeaseHolder, SessionBusy, StoreError

from ._lease import now_holder, pid_alive

__all__ = ["holder_of_file", "release", "take"]

_BUSY_READS = 20  # a new holder writes its name right after it locks: look again, briefly
_BUSY_PAUSE = 0.005


def take(session_id: str, path: str, owner: str) -> tuple[int, int, LeaseHolder]:
    """Lock ``path`` for ``owner``: ``(descriptor, token, holder)``; the descriptor is the lock.

    Raises ``SessionBusy`` naming the holder when another descriptor (any process, this one
    included) has it, and ``OSError`` when the lock file cannot be opened or written.
    """
    for _ in range(3):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SessionBusy(session_id, _holder_of(fd), where=path) from None
            if os.stat(path, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
                os.close(fd)  # someone replaced the file between our open and our lock
                continue
            token = _int(_content(fd).get("token")) + 1
            holder = now_holder(owner)
            _write(fd, {
                "owner": holder.owner,
                "pid": holder.pid,
                "host": holder.host,
                "since": holder.since.isoformat(),
                "token": token,
            })  # fmt: skip
            return fd, token, holder
        except BaseException:
            with suppress(OSError):
                os.close(fd)
            raise
    raise StoreError(f"cannot lock {path}: the file keeps being replaced")


def holder_of_file(path: str) -> LeaseHolder | None:
    """The holder a lock file names, read without locking (a reader must never make a writer
    busy), or None: no file, released (only a token left), or a holder on this host whose
    process is gone (its flock died with it). Raises nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        content = _content(fd)
    finally:
        os.close(fd)
    pid, host, owner = content.get("pid"), content.get("host"), content.get("owner")
    if not isinstance(pid, int) or not isinstance(host, str) or not isinstance(owner, str):
        return None
    if host == socket.gethostname() and not pid_alive(pid):
        return None
    try:
        since = datetime.fromisoformat(str(content.get("since")))
    except ValueError:
        since = datetime.fromtimestamp(0, UTC)
    return LeaseHolder(owner=owner, pid=pid, host=host, since=since)


def release(fd: int, token: int) -> None:
    """Unlock: forget the holder's name (keeping the token count), then close the descriptor."""
    try:
        with suppress(OSError):
            _write(fd, {"token": token})
    finally:
        os.close(fd)  # the lock goes with the last descriptor of this open file


def _write(fd: int, content: dict[str, Any]) -> None:
    data = json.dumps(content, separators=(",", ":")).encode() + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _content(fd: int) -> dict[str, Any]:
    try:
        value = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _holder_of(fd: int) -> LeaseHolder | None:
    """The holder named in a busy lock file, or ``None`` if it names no live one in time."""
    holder = None
    for _ in range(_BUSY_READS):
        holder = _parse_holder(_content(fd))
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
