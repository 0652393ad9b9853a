"""A single-file store for one machine: SQLite in WAL mode, reached through worker threads.

One connection, one operation at a time: SQLite has a single writer anyway, and a group commit
(``append_batches``) is one transaction, so batching across sessions is where the speed is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, TypeVar

import anyio
import anyio.to_thread
from stowage.core import (
    ConfigError,
    LogRead,
    Record,
    SessionExists,
    SessionNotFound,
    StoreError,
    validate_session_id,
)

from ._sql import PlannedBatch, check_continues, decode_rows, plan_batch

__all__ = ["SqliteStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    tail_from INTEGER NOT NULL DEFAULT 1
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS records (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""


class SqliteStore:
    """Session logs as rows of one SQLite file (created if missing).

    ``durability="fsync"`` runs with ``synchronous=FULL`` (every commit synced); ``"none"`` with
    ``synchronous=OFF``. Raises ``ConfigError`` for an unknown durability.
    """

    def __init__(self, path: Path | str, *, durability: Literal["fsync", "none"] = "fsync") -> None:
        if durability not in ("fsync", "none"):
            raise ConfigError(f"durability must be 'fsync' or 'none', got {durability!r}")
        self._path = str(path)
        self._synchronous = "FULL" if durability == "fsync" else "OFF"
        self._conn: sqlite3.Connection | None = None
        self._lock = anyio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"SqliteStore({self._path!r})"

    # -- LogStore ---------------------------------------------------------------------------

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """Start a log; raises ``InvalidSessionId``, ``SessionExists``, ``StoreError``."""
        batch = plan_batch(session_id, records, create=True)

        def run(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO sessions (session_id, last_seq, tail_from) VALUES (?, ?, ?)",
                    (session_id, batch.last_seq or 0, batch.tail_from or 1),
                )
            except sqlite3.IntegrityError:
                raise SessionExists(
                    f"session {session_id!r} already exists in {self._path}"
                ) from None
            conn.executemany("INSERT INTO records VALUES (?, ?, ?)", batch.rows)

        await self._run(run, write=True)

    async def append(self, session_id: str, records: Sequence[Record]) -> None:
        """Append one batch; raises ``SessionNotFound``, ``StoreError`` on a seq gap."""
        await self.append_batches(((session_id, records),))

    async def append_batches(self, batches: Sequence[tuple[str, Sequence[Record]]]) -> None:
        """Append every batch in one transaction; all or nothing."""
        planned = [plan_batch(session_id, records) for session_id, records in batches]
        if not planned:
            return

        def run(conn: sqlite3.Connection) -> None:
            for batch in planned:
                self._append_one(conn, batch)

        await self._run(run, write=True)

    async def read(self, session_id: str) -> LogRead:
        """Every record; raises ``SessionNotFound``, ``CorruptLogError``."""
        return await self._read(session_id, tail=False)

    async def read_tail(self, session_id: str) -> LogRead:
        """The session record and every record from the newest compaction's covers_through + 1."""
        return await self._read(session_id, tail=True)

    async def exists(self, session_id: str) -> bool:
        """Whether the session has a log; raises ``InvalidSessionId``."""
        validate_session_id(session_id)

        def run(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,))
            return row.fetchone() is not None

        return await self._run(run)

    async def list_sessions(self) -> list[str]:
        """Every session id, sorted."""

        def run(conn: sqlite3.Connection) -> list[str]:
            return [row[0] for row in conn.execute("SELECT session_id FROM sessions")]

        return sorted(await self._run(run))

    async def aclose(self) -> None:
        """Close the connection once operations in flight are done; later calls raise."""
        async with self._lock:
            self._closed = True
            if self._conn is not None:
                conn, self._conn = self._conn, None
                await anyio.to_thread.run_sync(conn.close)

    # -- internals --------------------------------------------------------------------------

    def _append_one(self, conn: sqlite3.Connection, batch: PlannedBatch) -> None:
        row = conn.execute(
            "SELECT last_seq FROM sessions WHERE session_id = ?", (batch.session_id,)
        ).fetchone()
        if row is None:
            raise SessionNotFound(f"no log for session {batch.session_id!r} in {self._path}")
        check_continues(batch, row[0])
        if not batch.rows:
            return
        conn.executemany("INSERT INTO records VALUES (?, ?, ?)", batch.rows)
        conn.execute(
            "UPDATE sessions SET last_seq = ?, tail_from = COALESCE(?, tail_from) "
            "WHERE session_id = ?",
            (batch.last_seq, batch.tail_from, batch.session_id),
        )

    async def _read(self, session_id: str, *, tail: bool) -> LogRead:
        validate_session_id(session_id)
        where = f"{self._path}#{session_id}"

        def run(conn: sqlite3.Connection) -> LogRead:
            row = conn.execute(
                "SELECT tail_from FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionNotFound(f"no log for session {session_id!r} in {self._path}")
            tail_from = row[0] if tail else 1
            rows = conn.execute(
                "SELECT seq, body FROM records WHERE session_id = ? AND (seq = 1 OR seq >= ?) "
                "ORDER BY seq",
                (session_id, tail_from),
            )
            return LogRead(records=decode_rows(rows, where=where, tail_from=tail_from))

        return await self._run(run)

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool = False) -> T:
        async with self._lock:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            return await anyio.to_thread.run_sync(self._call, fn, write)

    def _call(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        try:
            conn = self._connect()
            if not write:
                return fn(conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
            return result
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"sqlite store {self._path}: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: no implicit transactions; writes BEGIN IMMEDIATE themselves
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn
