"""SQLite's archive: the statements that move covered records from ``records`` to
``records_archive`` and read the two as one log (the rules of what moves are in ``_archive``).

A batch is an ``INSERT … SELECT`` and a ``DELETE`` with the same condition, in one ``BEGIN
IMMEDIATE`` transaction (the store's ``_run``): a row is in exactly one table at every commit,
so a crash between batches loses nothing and copies nothing twice. A single ``SELECT`` reads
one snapshot (WAL), so a read of both tables sees each record once.

These functions run in the store's worker thread on its connection; they raise
``sqlite3.Error``, which the store maps.
"""

from __future__ import annotations

import sqlite3

from ._archive import HEAD_CHARS, IDENTITY_KINDS, head_like

__all__ = [
    "ARCHIVE_DDL",
    "archive_state",
    "has_archive",
    "identity_rows",
    "logged_rows",
    "move_batch",
]

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


def identity_rows(conn: sqlite3.Connection, session_id: str) -> list[tuple[int, str]]:
    """The hot rows whose head names a kind resume folds the identity from, seq 1 first."""
    return conn.execute(
        f"SELECT seq, body FROM records WHERE session_id = ? AND (seq = 1 OR {_KEPT}) ORDER BY seq",
        (session_id, *_KEPT_ARGS),
    ).fetchall()


def archive_state(
    conn: sqlite3.Connection, session_id: str
) -> tuple[int, int, list[tuple[int, str]]] | None:
    """The session's tail_from, archived-through and unarchived compactions; None if no log."""
    row = conn.execute(
        "SELECT tail_from FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    if row is None:
        return None
    archived = conn.execute(
        "SELECT coalesce(max(seq), 0) FROM records_archive WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    candidates = conn.execute(
        "SELECT seq, body FROM records WHERE session_id = ? AND seq > ? "
        f"AND substr(body, 1, {HEAD_CHARS}) LIKE ? ORDER BY seq",
        (session_id, archived, head_like("compaction")),
    ).fetchall()
    return int(row[0]), int(archived), candidates


def move_batch(conn: sqlite3.Connection, session_id: str, first: int, last: int) -> int:
    """Move rows ``first..last`` but the kinds kept hot to the archive; how many moved."""
    condition = f"session_id = ? AND seq BETWEEN ? AND ? AND NOT ({_KEPT})"
    arguments = (session_id, first, last, *_KEPT_ARGS)
    moved = conn.execute(
        f"INSERT INTO records_archive SELECT session_id, seq, body FROM records WHERE {condition}",
        arguments,
    ).rowcount
    conn.execute(f"DELETE FROM records WHERE {condition}", arguments)
    return int(moved)
