"""SQLite's statements for the flows both SQL stores share (``_sql_store``): search windows,
a session's identity rows, the session ids, and the archive that moves covered records from
``records`` to ``records_archive`` (the rules of what moves are in ``_archive``).

An archive batch is an ``INSERT … SELECT`` and a ``DELETE`` with the same condition, in one
``BEGIN IMMEDIATE`` transaction (the store's ``_run``): a row is in exactly one table at every
commit, so a crash between batches loses nothing and copies nothing twice. A single ``SELECT``
reads one snapshot (WAL), so a read of both tables sees each record once.

Each statement runs in the store's worker thread on its connection (``SqliteRun``, the store's
``_run``, which maps ``sqlite3.Error`` to ``StoreError``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from stowage.core import LogRead, SessionNotFound

from ._archive import HEAD_CHARS, IDENTITY_KINDS, head_like
from ._sql import decode_rows
from ._sql_store import ArchiveState, Rows

__all__ = [
    "ARCHIVE_DDL",
    "SqliteQueries",
    "SqliteRun",
    "has_archive",
    "logged_rows",
    "session_exists",
]

T = TypeVar("T")

ARCHIVE_DDL = """
CREATE TABLE IF NOT EXISTS records_archive (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""

_KEPT = " OR ".join(f"substr(body, 1, {HEAD_CHARS}) LIKE ?" for _ in IDENTITY_KINDS)
_KEPT_ARGS = tuple(head_like(kind) for kind in IDENTITY_KINDS)


def has_archive(conn: sqlite3.Connection) -> bool:
    """Whether the file has an archive table (a file an earlier version wrote may not)."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records_archive'"
    ).fetchone()
    return row is not None


def logged_rows(
    conn: sqlite3.Connection, where: str, arguments: tuple[object, ...], *, archived: bool
) -> list[tuple[int, str]]:
    """``(seq, body)`` of the hot (and archived) rows matching ``where``, in seq order."""
    sql = f"SELECT seq, body FROM records WHERE {where}"
    if archived:
        sql += f" UNION ALL SELECT seq, body FROM records_archive WHERE {where}"
        arguments = (*arguments, *arguments)
    return conn.execute(f"{sql} ORDER BY seq", arguments).fetchall()


class SqliteRun(Protocol):
    """The store's way to run ``fn`` on its connection in a worker thread (in a ``BEGIN
    IMMEDIATE`` transaction when it writes); ``missing()`` answers when there is no file or
    table yet. Raises ``StoreError``."""

    def __call__(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        write: bool = False,
        missing: Callable[[], T] | None = None,
    ) -> Awaitable[T]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteQueries:
    """The ``LogQueries`` of the SQLite store at ``path``."""

    path: str
    run: SqliteRun
    archived: Callable[[sqlite3.Connection], bool]  # whether the file has an archive table

    def where(self, session_id: str) -> str:
        return f"{self.path}#{session_id}"

    def no_log(self, session_id: str) -> SessionNotFound:
        return SessionNotFound(f"no log for session {session_id!r} in {self.path}")

    async def last_seq(self, session_id: str) -> int | None:
        sql = "SELECT last_seq FROM sessions WHERE session_id = ?"
        rows = await self._select(sql, (session_id,))
        return int(rows[0][0]) if rows else None

    async def read_log(self, session_id: str, *, tail: bool) -> LogRead | None:
        where = self.where(session_id)

        def run(conn: sqlite3.Connection) -> LogRead | None:
            tail_from = _tail_from(conn, session_id)
            if tail_from is None:
                return None
            tail_from = tail_from if tail else 1
            # resume's read (``tail``) finds nothing in the archive but after a rewind to
            # before an archived compaction (one probe of the archive's key)
            rows = logged_rows(
                conn,
                "session_id = ? AND (seq = 1 OR seq >= ?)",
                (session_id, tail_from),
                archived=self.archived(conn),
            )
            return LogRead(records=decode_rows(rows, where=where, tail_from=tail_from))

        return await self.run(run, missing=lambda: None)

    async def matching(
        self, session_id: str, first: int, last: int, patterns: Sequence[str]
    ) -> Rows:
        matching = "".join(" AND body LIKE ? ESCAPE '\\'" for _ in patterns)

        def run(conn: sqlite3.Connection) -> Rows:
            return logged_rows(
                conn,
                f"session_id = ? AND seq BETWEEN ? AND ?{matching}",
                (session_id, first, last, *patterns),
                archived=self.archived(conn),
            )

        return await self.run(run, missing=list)

    async def identity(self, session_id: str) -> Rows:
        return await self._select(
            f"SELECT seq, body FROM records WHERE session_id = ? AND (seq = 1 OR {_KEPT}) "
            "ORDER BY seq",
            (session_id, *_KEPT_ARGS),
        )

    async def session_ids(self, *, compacted: bool) -> list[str]:
        sql = "SELECT session_id FROM sessions"
        if compacted:
            sql += " WHERE tail_from > 1 ORDER BY session_id"
        return [row[0] for row in await self._select(sql, ())]

    async def has_log(self, session_id: str) -> bool:
        return bool(
            await self._select("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,))
        )

    async def now(self) -> datetime:
        """This machine's clock: the time an archive's retention is counted back from."""
        return datetime.now(UTC)

    async def archive_state(self, session_id: str) -> ArchiveState | None:
        def run(conn: sqlite3.Connection) -> ArchiveState | None:
            tail_from = _tail_from(conn, session_id)
            if tail_from is None:
                return None
            archived = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM records_archive WHERE session_id = ?",
                (session_id,),
            ).fetchone()[0]
            candidates = conn.execute(
                "SELECT seq, body FROM records WHERE session_id = ? AND seq > ? "
                f"AND substr(body, 1, {HEAD_CHARS}) LIKE ? ORDER BY seq",
                (session_id, archived, head_like("compaction")),
            ).fetchall()
            return tail_from, int(archived), candidates

        return await self.run(run, write=True, missing=lambda: None)

    async def move(self, session_id: str, first: int, last: int) -> int:
        condition = f"session_id = ? AND seq BETWEEN ? AND ? AND NOT ({_KEPT})"
        arguments = (session_id, first, last, *_KEPT_ARGS)

        def run(conn: sqlite3.Connection) -> int:
            moved = conn.execute(
                "INSERT INTO records_archive SELECT session_id, seq, body FROM records "
                f"WHERE {condition}",
                arguments,
            ).rowcount
            conn.execute(f"DELETE FROM records WHERE {condition}", arguments)
            return int(moved)

        return await self.run(run, write=True)

    async def _select(self, sql: str, arguments: tuple[object, ...]) -> list[Any]:
        """The rows of one read; none before the file or its tables exist."""

        def run(conn: sqlite3.Connection) -> list[Any]:
            return conn.execute(sql, arguments).fetchall()

        return await self.run(run, missing=list)


def session_exists(conn: sqlite3.Connection, session_id: str) -> bool:
    """Whether the session has a row."""
    row = conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,))
    return row.fetchone() is not None


def _tail_from(conn: sqlite3.Connection, session_id: str) -> int | None:
    """The session's ``tail_from``; None when it has no log."""
    row = conn.execute("SELECT tail_from FROM sessions WHERE session_id = ?", (session_id,))
    found = row.fetchone()
    return None if found is None else int(found[0])
