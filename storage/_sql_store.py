"""The ``LogStore`` methods both SQL stores write alike, each flow written once.

SQLite and PostgreSQL differ in their statements and in how they run one (a ``sqlite3``
connection in a worker thread, an asyncpg pool), not in what a search, a read of a session's
identity or an archive pass does with the rows. So a store gives its statements, run its way,
as a ``LogQueries``; the flows here (a read, a search, the identity read, an archive pass, the
listing) validate, map a missing log to ``SessionNotFound``, decode, and apply the shared rules
(``_search``'s windows, ``_archive``'s pass), as ``_sql_leases`` does for the writer lease.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol

from stowage.core import ItemRecord, LogRead, Record, SessionNotFound, validate_session_id

from ._archive import ARCHIVE_BATCH, ArchivePass, ArchiveReport, decode_candidates, identity_records
from ._search import Found, decode_found, like_patterns, scan_windows
from ._sql import append_one

__all__ = ["ArchiveState", "LogQueries", "Rows", "SqlStoreBase"]

#: ``(seq, body)`` rows in seq order
Rows = list[tuple[int, str]]

#: a session's ``tail_from``, the seq its archive holds through, and its hot compactions' rows
#: past that seq (the candidates an archive pass decodes)
ArchiveState = tuple[int, int, Rows]


class LogQueries(Protocol):
    """A SQL store's statements for the shared flows, each run the store's way (its errors
    raised as ``StoreError``). A read answers as for an empty store before the tables exist."""

    def where(self, session_id: str) -> str:
        """The log's name in a ``CorruptLogError``."""

    def no_log(self, session_id: str) -> SessionNotFound:
        """The error for a session that has no log."""

    async def last_seq(self, session_id: str) -> int | None:
        """The session's newest seq; None when it has no log."""

    async def read_log(self, session_id: str, *, tail: bool) -> LogRead | None:
        """Every record (only the session record and those from ``tail_from`` when ``tail``),
        hot and archived alike, read in one snapshot and decoded with ``decode_rows`` (SQLite
        in its worker thread); None when the session has no log."""

    async def matching(
        self, session_id: str, first: int, last: int, patterns: Sequence[str]
    ) -> Rows:
        """Hot and archived rows ``first..last`` whose line matches every ``LIKE`` pattern."""

    async def identity(self, session_id: str) -> Rows:
        """The hot rows whose head names a kind resume folds the identity from, seq 1 first."""

    async def session_ids(self, *, compacted: bool) -> list[str]:
        """The sessions with a log (only those with a compaction when ``compacted``, sorted)."""

    async def has_log(self, session_id: str) -> bool:
        """Whether the session has a log."""

    async def now(self) -> datetime:
        """The time an archive's retention is counted back from."""

    async def archive_state(self, session_id: str) -> ArchiveState | None:
        """What an archive pass starts a session from (see ``ArchiveState``); None if no log."""

    async def move(self, session_id: str, first: int, last: int) -> int:
        """Move rows ``first..last`` but the kinds kept hot to the archive, in one
        transaction; how many moved."""


class SqlStoreBase:
    """The ``LogStore`` methods both SQL stores write alike, over the store's ``_queries``."""

    _queries: LogQueries

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> dict[str, Exception | None]:
        """Append every batch; see ``LogStore.append_batches``."""
        raise NotImplementedError

    async def _read(self, session_id: str, *, tail: bool) -> LogRead:
        queries = self._queries
        found = await queries.read_log(validate_session_id(session_id), tail=tail)
        if found is None:
            raise queries.no_log(session_id)
        return found

    async def append(self, session_id: str, records: Sequence[Record]) -> None:
        """Append one batch; raises ``SessionNotFound``, ``StoreError`` on a seq gap,
        ``SessionBusy`` or ``FencingError`` unless this store holds the current lease."""
        await append_one(self.append_batches, session_id, records)

    async def read(self, session_id: str, *, repair: bool = True) -> LogRead:
        """Every record; raises ``SessionNotFound``, ``CorruptLogError``."""
        return await self._read(session_id, tail=False)

    async def read_tail(self, session_id: str, *, repair: bool = True) -> LogRead:
        """The session record and every record from the newest compaction's covers_through + 1."""
        return await self._read(session_id, tail=True)

    async def exists(self, session_id: str) -> bool:
        """Whether the session has a log; raises ``InvalidSessionId``."""
        return await self._queries.has_log(validate_session_id(session_id))

    async def list_sessions(self) -> list[str]:
        """Every session id, sorted (by code point, not by the database's collation)."""
        return sorted(await self._queries.session_ids(compacted=False))

    async def search_log(self, session_id: str, words: Sequence[str], *, deadline: float) -> Found:
        """The item records whose row may hold every one of ``words`` (SQLite's ``LIKE``,
        which folds ASCII letters only; PostgreSQL's ``ILIKE``), oldest first, one window of
        seqs (the primary key's range) a query, until ``deadline`` (``time.monotonic()``); see
        ``_search``. Raises ``InvalidSessionId``, ``SessionNotFound``, ``CorruptLogError``,
        ``StoreError``."""
        queries = self._queries
        validate_session_id(session_id)
        patterns = like_patterns(words)
        newest = await queries.last_seq(session_id)
        if newest is None:
            raise queries.no_log(session_id)

        async def fetch(first: int, last: int) -> list[ItemRecord]:
            rows = await queries.matching(session_id, first, last, patterns)
            return decode_found(rows, where=queries.where(session_id))

        return await scan_windows(fetch, newest, deadline=deadline)

    async def read_identity(self, session_id: str) -> LogRead:
        """The session record, then every ``settings_changed``, ``rewind`` and
        ``forked_from`` record: what resume folds a session's identity from, read from the
        hot table alone (those records are never archived). Raises ``InvalidSessionId``,
        ``SessionNotFound``, ``CorruptLogError``, ``StoreError``."""
        queries = self._queries
        rows = await queries.identity(validate_session_id(session_id))
        if not rows or rows[0][0] != 1:
            raise queries.no_log(session_id)
        candidates = decode_candidates(rows, where=queries.where(session_id))
        return LogRead(records=identity_records(candidates))

    async def archive(
        self,
        *,
        older_than: timedelta,
        session_id: str | None = None,
        batch: int = ARCHIVE_BATCH,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> list[ArchiveReport]:
        """Move the records of ``session_id`` (every compacted session when None) that a
        compaction recorded more than ``older_than`` ago covers into the archive table,
        ``batch`` seqs a transaction (see ``_sqlite_queries``, ``_pg_queries``); safe to stop
        at any point and to run again. Returns one report per session looked at. Raises
        ``InvalidSessionId``, ``CorruptLogError``, ``StoreError``."""
        queries = self._queries
        if session_id is not None:
            validate_session_id(session_id)
        archiving = ArchivePass(
            cutoff=await queries.now() - older_than, batch=batch, on_batch=on_batch
        )
        ids = [session_id] if session_id is not None else await queries.session_ids(compacted=True)
        reports = []
        for each in ids:
            state = await queries.archive_state(each)
            if state is None:
                reports.append(ArchiveReport(session_id=each, moved=0, archived_through=0))
                continue
            tail_from, archived, rows = state
            candidates = decode_candidates(rows, where=queries.where(each))
            move = partial(queries.move, each)
            reports.append(
                await archiving.move(
                    each, candidates, tail_from=tail_from, archived=archived, move=move
                )
            )
        return reports
