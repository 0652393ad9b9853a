"""Reading a store for the console: read-only, never a lease, never a lock, never a write.

Change detection is cheap where the store allows it: a JSONL store is a directory of files, so
the sizes and modification times of its logs say whether anything was appended; a SQLite store
is one database file (and its write-ahead log). PostgreSQL has no file to watch: one query reads
every session's newest seq (``PostgresStore.last_seqs``). LISTEN/NOTIFY would need a NOTIFY in
every append of every worker, paid on the hot path for an occasional viewer; a query every
0.25 s while a page is open costs the database less.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

from stowage.core import Lineage, LogRead, LogStore, lineage_store
from stowage.storage import JsonlStore, PostgresStore

__all__ = ["StoreReader"]


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
        """Every record that counts in a session's history, read without repair (a torn tail
        is reported, kept): a fork's starts with its parent's up to the fork point, and a
        rewound branch is left out, as resume reads them."""
        return await lineage_store(self.store).read(session_id, repair=False)

    async def lineage(self, session_id: str) -> Lineage:
        """The session's lineage, read without repair: its parents' records up to the fork
        point and its own, discarded branches included (their requests were paid for), with
        where its own records start. Raises ``StoreError``."""
        return await lineage_store(self.store).lineage(session_id, repair=False)

    async def holder(self, session_id: str) -> str:
        """Who holds the session's writer lease ("pid N on HOST"), read without taking it;
        empty when it is free."""
        holder = await self.store.lease_holder(session_id)
        return "" if holder is None else f"pid {holder.pid} on {holder.host}"

    async def fingerprint(self) -> Hashable:
        """A value that differs after any append to any session. Raises ``StoreError``."""
        if isinstance(self.store, JsonlStore):
            return _dir_fingerprint(self.store.root)
        if self.sqlite_path is not None:
            return tuple(_stat(Path(self.sqlite_path + suffix)) for suffix in ("", "-wal"))
        if isinstance(self.store, PostgresStore):
            return tuple(sorted((await self.store.last_seqs()).items()))
        marks = []  # another store: the newest seq of every session, read through its API
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
