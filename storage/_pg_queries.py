"""PostgreSQL's statements for the flows both SQL stores share (``_sql_store``): search windows,
a session's identity rows, the session ids, and the archive, where covered records move from
``stowage_records`` to ``stowage_records_archive`` in batches, each one statement and so one
transaction.

Each batch is ``WITH moved AS (DELETE … RETURNING …) INSERT INTO archive SELECT … FROM moved``:
a row is in exactly one of the two tables in every snapshot, so a reader's single-statement
read of both (``read``, ``read_range``) sees every record once, and a process killed between
batches leaves whole batches moved and the rest in place; the next run starts again from the
archive's highest seq. Appends never wait on it: they write seqs past the newest compaction's
``covers_through``, and archiving only moves seqs below it. The rules of what moves are in
``_archive``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stowage.core import LogRead, SessionNotFound, StoreError

from ._archive import HEAD_CHARS, IDENTITY_KINDS, head_like
from ._pg_pool import PgPool
from ._sql import decode_rows
from ._sql_store import ArchiveState, Rows

__all__ = ["ArchiveTables", "PgQueries"]

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


@dataclass(frozen=True, slots=True, kw_only=True)
class PgQueries:
    """The ``LogQueries`` of the PostgreSQL store on ``db``'s ``tables``."""

    db: PgPool
    tables: ArchiveTables

    def where(self, session_id: str) -> str:
        return f"{self.tables.records}#{session_id}"

    def no_log(self, session_id: str) -> SessionNotFound:
        return SessionNotFound(f"no log for session {session_id!r}")

    async def last_seq(self, session_id: str) -> int | None:
        rows = await self._select(
            f"SELECT last_seq FROM {self.tables.sessions} WHERE session_id = $1 AND tail_from > 0",
            session_id,
        )
        return int(rows[0]["last_seq"]) if rows else None

    async def read_log(self, session_id: str, *, tail: bool) -> LogRead | None:
        # one statement, so one snapshot: the session row and its records agree, and a record
        # being archived is in exactly one of the two tables. Resume's read (``tail``) finds
        # nothing in the archive but after a rewind to before an archived compaction (its
        # probe of the archive's key is one index lookup); the whole log reads both.
        rows = await self.logged(
            lambda records: (
                f"SELECT s.tail_from, r.seq, r.body FROM {self.tables.sessions} AS s "
                f"LEFT JOIN LATERAL {records} AS r ON true "
                "WHERE s.session_id = $1 AND s.tail_from > 0 ORDER BY r.seq"
            ),
            "session_id = s.session_id AND (seq = 1 OR seq >= s.tail_from)"
            if tail
            else "session_id = s.session_id",
            session_id,
        )
        if not rows:
            return None
        start = int(rows[0]["tail_from"]) if tail else 1
        pairs = _pairs(row for row in rows if row["seq"] is not None)
        return LogRead(records=decode_rows(pairs, where=self.where(session_id), tail_from=start))

    async def matching(
        self, session_id: str, first: int, last: int, patterns: Sequence[str]
    ) -> Rows:
        rows = await self.logged(
            lambda records: f"SELECT seq, body FROM {records} AS r ORDER BY seq",
            "session_id = $1 AND seq BETWEEN $2 AND $3 AND body ILIKE ALL($4::text[])",
            session_id,
            first,
            last,
            list(patterns),
        )
        return _pairs(rows)

    async def identity(self, session_id: str) -> Rows:
        rows = await self._select(
            f"SELECT seq, body FROM {self.tables.records} WHERE session_id = $1 AND (seq = 1 "
            f"OR left(body, {HEAD_CHARS}) LIKE ANY($2::text[])) ORDER BY seq",
            session_id,
            _KEEP_PATTERNS,
        )
        return _pairs(rows)

    async def session_ids(self, *, compacted: bool) -> list[str]:
        sql = f"SELECT session_id FROM {self.tables.sessions} WHERE tail_from > "
        if compacted:
            rows = await self.db.write(lambda pool: pool.fetch(sql + "1 ORDER BY session_id"))
        else:
            rows = await self._select(sql + "0")
        return [row["session_id"] for row in rows]

    async def has_log(self, session_id: str) -> bool:
        sql = f"SELECT 1 FROM {self.tables.sessions} WHERE session_id = $1 AND tail_from > 0"
        return bool(await self._select(sql, session_id))

    async def now(self) -> datetime:
        """The server's clock: the time an archive's retention is counted back from."""
        now: datetime = await self.db.write(lambda pool: pool.fetchval("SELECT now()"))
        return now

    async def archive_state(self, session_id: str) -> ArchiveState | None:
        tables = self.tables
        state = await self.db.write(
            lambda pool: pool.fetchrow(
                f"SELECT s.tail_from, (SELECT coalesce(max(a.seq), 0) FROM {tables.archive} AS a "
                f"WHERE a.session_id = s.session_id) AS archived FROM {tables.sessions} AS s "
                "WHERE s.session_id = $1 AND s.tail_from > 0",
                session_id,
            )
        )
        if state is None:
            return None
        archived, tail_from = int(state["archived"]), int(state["tail_from"])
        rows = await self.db.write(
            lambda pool: pool.fetch(
                f"SELECT seq, body FROM {tables.records} WHERE session_id = $1 AND seq > $2 "
                f"AND left(body, {HEAD_CHARS}) LIKE $3 ORDER BY seq",
                session_id,
                archived,
                head_like("compaction"),
            )
        )
        return tail_from, archived, _pairs(rows)

    async def move(self, session_id: str, first: int, last: int) -> int:
        tables = self.tables
        moved = await self.db.write(
            lambda pool: pool.fetchval(
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
        return int(moved)

    async def logged(self, query: Callable[[str], str], where: str, *arguments: Any) -> list[Any]:
        """Rows of ``query`` over hot and archived rows (hot alone when no archive table exists)."""
        try:
            pool = await self.db.get(write=False)
            return list(await pool.fetch(query(self.tables.both(where)), *arguments))
        except self.db.pg.UndefinedTableError:
            pass
        except self.db.pg.InvalidSchemaNameError:
            return []
        except self.db.errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        hot = f"(SELECT seq, body FROM {self.tables.records} WHERE {where})"
        rows: list[Any] = await self.db.read(lambda pool: pool.fetch(query(hot), *arguments), list)
        return rows

    async def _select(self, sql: str, *arguments: Any) -> list[Any]:
        """The rows of one read; none before the tables exist."""
        rows: list[Any] = await self.db.read(lambda pool: pool.fetch(sql, *arguments), list)
        return rows


def _pairs(rows: Iterable[Any]) -> Rows:
    """``(seq, body)`` of asyncpg rows."""
    return [(row["seq"], row["body"]) for row in rows]
