"""PostgreSQL's archive: covered records move from ``stowage_records`` to
``stowage_records_archive`` in batches, each one statement and so one transaction.

Each batch is ``WITH moved AS (DELETE … RETURNING …) INSERT INTO archive SELECT … FROM moved``:
a row is in exactly one of the two tables in every snapshot, so a reader's single-statement
read of both (``read``, ``read_range``) sees every record once, and a process killed between
batches leaves whole batches moved and the rest in place; the next run starts again from the
archive's highest seq. Appends never wait on it: they write seqs past the newest compaction's
``covers_through``, and archiving only moves seqs below it. The rules of what moves are in
``_archive``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stowage.core import CorruptLogError, Record

from ._archive import (
    HEAD_CHARS,
    IDENTITY_KINDS,
    ArchivePass,
    ArchiveReport,
    decode_candidates,
    head_like,
    identity_records,
)
from ._codec import decode_record

__all__ = ["ArchiveTables", "archive_session", "decode_identity", "read_identity_rows"]

_KEEP_PATTERNS = [head_like(kind) for kind in IDENTITY_KINDS]


@dataclass(frozen=True, slots=True)
class ArchiveTables:
    """The qualified names of the tables archiving reads and writes."""

    sessions: str
    records: str
    archive: str

    def ddl(self) -> str:
        """The archive table: the records table's columns and key, never partitioned."""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.archive} ("
            "session_id text NOT NULL, seq bigint NOT NULL, body text NOT NULL, "
            "PRIMARY KEY (session_id, seq))"
        )

    def both(self, where: str) -> str:
        """Hot and archived rows matching ``where`` as one relation ``(seq, body)``."""
        return (
            f"(SELECT seq, body FROM {self.records} WHERE {where} "
            f"UNION ALL SELECT seq, body FROM {self.archive} WHERE {where})"
        )


async def read_identity_rows(conn: Any, tables: ArchiveTables, session_id: str) -> list[Any]:
    """The hot rows whose head names a kind resume folds the identity from, seq 1 first."""
    return list(
        await conn.fetch(
            f"SELECT seq, body FROM {tables.records} WHERE session_id = $1 AND (seq = 1 OR "
            f"left(body, {HEAD_CHARS}) LIKE ANY($2::text[])) ORDER BY seq",
            session_id,
            _KEEP_PATTERNS,
        )
    )


def decode_identity(rows: list[Any], *, where: str) -> tuple[Record, ...]:
    """Decode the candidate rows and keep the identity records. Raises ``CorruptLogError``."""
    out: list[Record] = []
    for row in rows:
        try:
            out.append(decode_record(row["body"]))
        except ValueError as exc:
            raise CorruptLogError(str(exc), path=where, line=row["seq"]) from None
    return identity_records(out)


async def archive_session(
    pool: Any, tables: ArchiveTables, session_id: str, archiving: ArchivePass
) -> ArchiveReport:
    """Move the session's records a compaction covers into the archive, a batch a transaction."""
    state = await pool.fetchrow(
        f"SELECT s.tail_from, (SELECT coalesce(max(a.seq), 0) FROM {tables.archive} AS a "
        f"WHERE a.session_id = s.session_id) AS archived FROM {tables.sessions} AS s "
        "WHERE s.session_id = $1 AND s.tail_from > 0",
        session_id,
    )
    if state is None:
        return ArchiveReport(session_id=session_id, moved=0, archived_through=0)
    archived, tail_from = int(state["archived"]), int(state["tail_from"])
    rows = await pool.fetch(
        f"SELECT seq, body FROM {tables.records} WHERE session_id = $1 AND seq > $2 "
        f"AND left(body, {HEAD_CHARS}) LIKE $3 ORDER BY seq",
        session_id,
        archived,
        head_like("compaction"),
    )
    where = f"{tables.records}#{session_id}"
    candidates = decode_candidates(((row["seq"], row["body"]) for row in rows), where=where)

    async def move(first: int, last: int) -> int:
        return int(
            await pool.fetchval(
                f"WITH moved AS (DELETE FROM {tables.records} WHERE session_id = $1 "
                "AND seq BETWEEN $2 AND $3 "
                f"AND NOT (left(body, {HEAD_CHARS}) LIKE ANY($4::text[])) "
                "RETURNING session_id, seq, body), "
                f"kept AS (INSERT INTO {tables.archive} (session_id, seq, body) "
                "SELECT session_id, seq, body FROM moved RETURNING 1) SELECT count(*) FROM kept",
                session_id,
                first,
                last,
                _KEEP_PATTERNS,
            )
        )

    return await archiving.move(
        session_id, candidates, tail_from=tail_from, archived=archived, move=move
    )
