"""The files of a JSONL store's root: where each session's log and lock live, and the blocking file
work (create a log, write and sync a group commit, cut a torn tail), which the store runs in a
thread (see ``_jsonl``)."""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from stowage.core import InvalidSessionId, SessionExists, StoreError, validate_session_id

from ._fdcache import FdCache

__all__ = ["FileId", "LogFiles", "LogWrite", "log_gone"]

_SUFFIX = ".jsonl"
_LOCK_SUFFIX = ".lock"
_sync_data = getattr(os, "fdatasync", os.fsync)  # data + size is all an append needs

FileId = tuple[int, int]  # (st_dev, st_ino): which file a path named when the lease was taken


@dataclass(frozen=True, slots=True, kw_only=True)
class LogWrite:
    """What a group commit writes to one session's log, and what it needs to check first."""

    session_id: str
    path: str
    data: bytes
    last_seq: int
    log_id: FileId | None
    took_lease: bool  # taken by this group commit: given back if the write fails


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a regular file rarely writes short, but it is allowed to
        view = view[os.write(fd, view) :]


class LogFiles:
    """The logs under ``root``: fsync per log, or one ``syncfs`` for a group when given."""

    def __init__(
        self, root: str, *, fds: FdCache, fsync: bool, syncfs: Callable[[int], None] | None
    ) -> None:
        self._root = root
        self._fds = fds
        self._fsync = fsync
        self._syncfs = syncfs

    def create(self, session_id: str, path: str, data: bytes) -> FileId:
        """Make the log at ``path`` holding ``data``, synced; returns its file id."""
        # Written under a temporary name and linked into place, so a crash never leaves a
        # half-created log, and link() refuses an existing name atomically.
        temp = os.path.join(self._root, f".{session_id}.{secrets.token_hex(4)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        try:
            fd = os.open(temp, flags, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create a log for session {session_id!r}: {exc}") from exc
        try:
            try:
                _write_all(fd, data)
                if self._fsync:
                    _sync_data(fd)
                os.link(temp, path)
            finally:
                with suppress(OSError):
                    os.unlink(temp)
            if self._fsync:
                self._sync_root()
        except FileExistsError:
            os.close(fd)
            raise SessionExists(f"session {session_id!r} already has a log at {path}") from None
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"cannot create {path}: {exc}") from exc
        info = os.fstat(fd)
        self._fds.adopt(session_id, fd)  # the same inode, now named path
        return info.st_dev, info.st_ino

    def write_group(self, writes: list[LogWrite]) -> dict[str, StoreError]:
        """Write and sync each log; the sessions that failed on their own file, cut back."""
        failed: dict[str, StoreError] = {}
        pinned: list[str] = []
        written: list[tuple[LogWrite, int, int]] = []  # (write, fd, size before the write)
        try:
            for write in writes:
                opener = functools.partial(_open_append, write.path)
                try:
                    fd = self._fds.acquire(write.session_id, opener)
                except FileNotFoundError:
                    failed[write.session_id] = log_gone(
                        write.session_id, write.path, "deleted or moved away"
                    )
                    continue
                except OSError as exc:
                    failed[write.session_id] = _write_failed(write, exc)
                    continue
                pinned.append(write.session_id)
                size: int | None = None
                try:
                    size = _size_of_the_same_log(write, fd)
                    _write_all(fd, write.data)
                except (OSError, StoreError) as exc:
                    if size is not None:
                        with suppress(OSError):
                            os.ftruncate(fd, size)
                    self._fds.discard(write.session_id)
                    failed[write.session_id] = _write_failed(write, exc)
                    continue
                except BaseException:
                    if size is not None:  # cut back with the others below
                        written.append((write, fd, size))
                    raise
                written.append((write, fd, size))
            if self._syncfs is not None and len(written) > 1:
                try:
                    self._syncfs(written[0][1])
                except OSError as exc:
                    # which log it was is not known: none of them is acknowledged
                    for write, fd, size in written:
                        failed[write.session_id] = self._cut_back(write, fd, size, exc)
            elif self._fsync:
                for write, fd, size in written:
                    try:
                        _sync_data(fd)
                    except OSError as exc:
                        failed[write.session_id] = self._cut_back(write, fd, size, exc)
        except BaseException:
            # Not one file's failure: cut every file back, so nothing unacknowledged survives.
            for _, fd, size in written:
                with suppress(OSError):
                    os.ftruncate(fd, size)
            for session_id in pinned:
                self._fds.discard(session_id)
            raise
        finally:
            for session_id in pinned:
                self._fds.release(session_id)
        return failed

    def _cut_back(self, write: LogWrite, fd: int, size: int, exc: OSError) -> StoreError:
        """Cut a failed log back to ``size`` and drop its descriptor; the error its session gets."""
        with suppress(OSError):
            os.ftruncate(fd, size)
        self._fds.discard(write.session_id)
        return _write_failed(write, exc)

    def make_root(self) -> None:
        """Create the root if missing; raises ``StoreError``."""
        try:
            Path(self._root).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create store root {self._root!r}: {exc}") from exc

    def list_sessions(self) -> list[str]:
        """The session ids of the logs under the root, sorted; raises ``OSError``."""
        ids: list[str] = []
        if not os.path.isdir(self._root):
            return ids
        with os.scandir(self._root) as entries:
            for entry in entries:
                if entry.name.endswith(_SUFFIX) and entry.is_file():
                    with suppress(InvalidSessionId):
                        ids.append(validate_session_id(entry.name[: -len(_SUFFIX)]))
        return sorted(ids)

    def truncate(self, path: str, size: int) -> None:
        """Cut the log at ``path`` back to ``size`` bytes (a torn tail); raises ``StoreError``."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, size)
                if self._fsync:
                    _sync_data(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"cannot cut the torn tail of {path}: {exc}") from exc

    def _sync_root(self) -> None:
        # A new file's name is durable only once its directory is synced.
        fd = os.open(self._root, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def path(self, session_id: str) -> str:
        """The log of ``session_id``; ``InvalidSessionId``, also for a link out of the root."""
        validate_session_id(session_id)
        path = os.path.join(self._root, session_id + _SUFFIX)
        # Defence in depth: the id pattern already rules out separators and dot names, but a
        # symlink planted under the root must not lead a write elsewhere either. The root is
        # resolved already and the name has no separator, so only the name itself can be a
        # link: one lstat, and the whole path resolved only when it is one.
        if os.path.islink(path) and os.path.dirname(os.path.realpath(path)) != self._root:
            raise InvalidSessionId(f"session id {session_id!r} resolves outside {self._root!r}")
        return path

    @staticmethod
    def lock_path(path: str) -> str:
        """The lock record beside the log at ``path``."""
        return path[: -len(_SUFFIX)] + _LOCK_SUFFIX


def _open_append(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)


def _size_of_the_same_log(write: LogWrite, fd: int) -> int:
    """The size of ``fd``, once it is known to be the session's log still (same file as leased)."""
    info = os.fstat(fd)
    try:
        named = os.stat(write.path, follow_symlinks=False)
    except FileNotFoundError:
        raise log_gone(write.session_id, write.path, "deleted or moved away") from None
    here = (info.st_dev, info.st_ino)
    if (named.st_dev, named.st_ino) != here or write.log_id not in (None, here):
        raise log_gone(write.session_id, write.path, "replaced by another file")
    return info.st_size


def log_gone(session_id: str, path: str, what: str) -> StoreError:
    return StoreError(
        f"session {session_id!r}: its log {path} was {what} while the session was being "
        "written; nothing of the batch was written (a reader would never see it)"
    )


def _write_failed(write: LogWrite, exc: OSError | StoreError) -> StoreError:
    if isinstance(exc, StoreError):
        return exc
    error = StoreError(f"cannot append to session {write.session_id!r} ({write.path}): {exc}")
    error.__cause__ = exc
    return error
