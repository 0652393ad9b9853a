"""Reading a store for the console: read-only, never a lease, never a lock, never a write.

Change detection is cheap where the store allows it: a JSONL store is a directory of files, so
the sizes and modification times of its logs say whether anything was appended; a SQLite store
is one database file (and its write-ahead log). PostgreSQL has no file to watch: the newest seq
of every session is read instead (one small query per session through the store's own reads).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

from stowage.core import LogRead, LogStore
from stowage.storage import JsonlStore

__all__ = ["StoreReader"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(eq=False)
class StoreReader:
    """The console's view of one store: sessions, their records, lease holders, a fingerprint
    that changes when anything was appended."""

    store: LogStore
    sqlite_path: str | None = None

    async def sessions(self) -> list[str]:
        """Every session id, sorted. Raises ``StoreError``."""
        return await self.store.list_sessions()

    async def read(self, session_id: str) -> LogRead:
        """Every record of a session, read without repair (a torn tail is reported, kept)."""
        return await self.store.read(session_id, repair=False)

    def holder(self, session_id: str) -> str:
        """Who holds the session's writer lease, when the store shows it without a query
        (JSONL: the lock file names its live holder); empty when free or unknown."""
        if not isinstance(self.store, JsonlStore):
            return ""
        path = self.store.root / f"{session_id}.lock"
        try:
            content = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            return ""
        pid, host = content.get("pid"), content.get("host")
        if not isinstance(pid, int) or not isinstance(host, str):
            return ""
        if host == socket.gethostname() and not _pid_alive(pid):
            return ""  # a killed writer's lock died with it
        return f"pid {pid} on {host}"

    async def fingerprint(self) -> Hashable:
        """A value that differs after any append to any session. Raises ``StoreError``."""
        if isinstance(self.store, JsonlStore):
            return _dir_fingerprint(self.store.root)
        if self.sqlite_path is not None:
            return tuple(_stat(Path(self.sqlite_path + suffix)) for suffix in ("", "-wal"))
        marks = []
        for session_id in await self.store.list_sessions():
            tail = await self.store.read_tail(session_id, repair=False)
            marks.append((session_id, tail.records[-1].seq if tail.records else 0))
        return tuple(marks)


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def _dir_fingerprint(root: Path) -> Hashable:
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return ()
    marks = []
    for entry in entries:
        if entry.name.endswith((".jsonl", ".lock")):
            try:
                st = entry.stat()
            except OSError:
                continue
            marks.append((entry.name, st.st_size, st.st_mtime_ns))
    return tuple(marks)
