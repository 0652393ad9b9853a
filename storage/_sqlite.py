"""A single-file store for one machine: SQLite in WAL mode, reached through worker threads.

One connection, one operation at a time: SQLite has a single writer anyway, and a group commit
(``append_batches``) is one transaction, so batching across sessions is where the speed is.
Each session of a group commit writes inside a savepoint of its own, so one session's refused
batch (a seq gap, a lost lease) is rolled back alone and the rest of the group commits.

One writer per session, across processes: a ``leases`` row per session holds the last fencing
token granted, the holder (owner, pid, host, since) and an expiry. Taking the lease is an
``UPDATE`` in a ``BEGIN IMMEDIATE`` transaction (SQLite's write lock serialises it against every
other process); every append reads the row in its own transaction and writes only if the token
and owner are still this store's (``FencingError`` otherwise), so a writer whose lease was taken
over cannot add one record. A lease is free when released, expired (``lease_ttl`` seconds after
its last renewal) or held by a process of this host that no longer exists (a killed writer does
not block its sessions for a whole TTL). Readers never write: they create no file and no table.

Records that old compactions cover may move to ``records_archive`` (``archive``, see
``_archive``): every read but resume's reads the two tables as one log.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
from stowage.core import (
    ConfigError,
    Durability,
    ItemRecord,
    LeaseHolder,
    LogRead,
    Record,
    SessionExists,
    SessionNotFound,
    StoreError,
    validate_session_id,
)

from ._archive import ARCHIVE_BATCH, ArchivePass, ArchiveReport, decode_candidates, identity_records
from ._lease import Lease, LeaseRow, Taken, lease_times, new_owner, now_holder
from ._search import Found, decode_found, like_patterns, scan_windows
from ._sql import (
    PlannedBatch,
    SqlStoreBase,
    check_continues,
    decode_rows,
    plan_batch,
    plan_sessions,
)
from ._sql_leases import HeldLeases
from ._sqlite_archive import (
    ARCHIVE_DDL,
    archive_state,
    has_archive,
    identity_rows,
    logged_rows,
    move_batch,
)

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
CREATE TABLE IF NOT EXISTS leases (
    session_id TEXT PRIMARY KEY,
    token INTEGER NOT NULL,
    owner TEXT,
    pid INTEGER,
    host TEXT,
    since TEXT,
    expires REAL
) WITHOUT ROWID;
"""


class SqliteStore(SqlStoreBase):
    """Session logs as rows of one SQLite file (created by the first write if missing).

    ``durability="fsync"`` runs with ``synchronous=FULL`` (every commit synced); ``"none"`` with
    ``synchronous=OFF``. Writer leases last ``lease_ttl`` seconds past their last renewal and
    should be renewed every ``lease_renew_every`` (default a third of the TTL). Raises
    ``ConfigError`` for an unknown durability or lease times that are not positive, or a renew
    interval not below the TTL.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        durability: Durability = "fsync",
        lease_ttl: float = 30.0,
        lease_renew_every: float | None = None,
    ) -> None:
        if durability not in ("fsync", "syncfs", "none"):
            raise ConfigError(f"durability must be 'fsync', 'syncfs' or 'none', got {durability!r}")
        self._ttl, self._renew_every = lease_times(lease_ttl, lease_renew_every)
        self._path = str(path)
        # a transaction is a group commit, synced once whatever it holds: "syncfs" is "fsync"
        self._synchronous = "OFF" if durability == "none" else "FULL"
        self._conn: sqlite3.Connection | None = None
        self._schema_ready = False
        self._has_archive = False
        self._lock = anyio.Lock()
        self._closed = False
        self._leases = HeldLeases(
            owner=new_owner(),
            renew_every=self._renew_every,
            where=self._path,
            dead_pid_frees=True,
            extend=self._extend_one,
            free=self._free_all,
        )

    def __repr__(self) -> str:
        return f"SqliteStore({self._path!r})"

    # -- LogStore ---------------------------------------------------------------------------

    async def acquire(self, session_id: str) -> Lease:
        """Take the session's writer lease; raises ``InvalidSessionId``, ``SessionNotFound``,
        ``SessionBusy`` naming the holder (this store's own when it handed the lease out)."""
        validate_session_id(session_id)

        def run(conn: sqlite3.Connection) -> Lease | Taken:
            row = self._lease_row(conn, session_id)
            reused = self._leases.reusable(session_id, row)
            if reused is not None:  # a lease a write took: the caller's now
                self._extend(conn, session_id, reused.token)
                return reused
            if not _session_exists(conn, session_id):
                raise SessionNotFound(f"no log for session {session_id!r} in {self._path}")
            return self._take(conn, session_id, row)

        def missing() -> Lease | Taken:
            raise SessionNotFound(f"no log for session {session_id!r} in {self._path}")

        return self._leases.hand_out(await self._run(run, write=True, missing=missing))

    async def renew_leases(self) -> list[str]:
        """Renew every lease this store holds in one transaction; returns the ids of those lost
        to another writer, sorted."""
        live = self._leases.live()

        def run(conn: sqlite3.Connection) -> set[str]:
            renewed = set()
            for lease in live:
                if self._leases.carries(self._lease_row(conn, lease.session_id), lease):
                    self._extend(conn, lease.session_id, lease.token)
                    renewed.add(lease.session_id)
            return renewed

        return self._leases.renewed(live, await self._run(run, write=True) if live else set())

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """Start a log and hold its lease; raises ``InvalidSessionId``, ``SessionExists``,
        ``StoreError``."""
        batch = plan_batch(session_id, records, create=True)
        held = self._leases.get(session_id) is not None

        def run(conn: sqlite3.Connection) -> Taken | None:
            try:
                conn.execute(
                    "INSERT INTO sessions (session_id, last_seq, tail_from) VALUES (?, ?, ?)",
                    (session_id, batch.last_seq or 0, batch.tail_from or 1),
                )
            except sqlite3.IntegrityError:
                raise SessionExists(
                    f"session {session_id!r} already exists in {self._path}"
                ) from None
            taken = (
                None if held else self._take(conn, session_id, self._lease_row(conn, session_id))
            )
            conn.executemany("INSERT INTO records VALUES (?, ?, ?)", batch.rows)
            return taken

        taken = await self._run(run, write=True)
        if taken is not None:
            self._leases.grant(taken)

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> dict[str, Exception | None]:
        """Append every batch in one transaction, each session under this store's lease (taken
        here when not held yet) and inside a savepoint of its own: a session refused (as
        ``append`` would refuse it) is rolled back to its savepoint and reported in the outcome,
        and the others commit. Raises ``StoreError`` when the transaction itself fails (disk
        full, database locked past the timeout): then nothing is written."""
        planned, outcomes = plan_sessions(batches)
        if not planned:
            return outcomes
        ids = sorted(planned)

        def run(conn: sqlite3.Connection) -> tuple[dict[str, Exception], list[Taken]]:
            refused: dict[str, Exception] = {}
            taken: list[Taken] = []
            for session_id in ids:
                conn.execute("SAVEPOINT session_batches")
                try:
                    took = self._append_session(conn, session_id, planned[session_id])
                except (StoreError, sqlite3.IntegrityError) as exc:
                    conn.execute("ROLLBACK TO session_batches")
                    conn.execute("RELEASE session_batches")
                    refused[session_id] = _refusal(session_id, self._path, exc)
                    continue
                conn.execute("RELEASE session_batches")
                if took is not None:
                    taken.append(took)
            return refused, taken

        def missing() -> tuple[dict[str, Exception], list[Taken]]:
            no_log: dict[str, Exception] = {
                sid: SessionNotFound(f"no log for session {sid!r} in {self._path}") for sid in ids
            }
            return no_log, []

        refused, taken = await self._run(run, write=True, missing=missing)
        for each in taken:
            self._leases.grant(each)
        outcomes.update(refused)
        return outcomes

    async def search_log(self, session_id: str, words: Sequence[str], *, deadline: float) -> Found:
        """The item records whose row may hold every one of ``words`` (``LIKE``, which
        folds ASCII letters only), oldest first, one window of seqs a query, until
        ``deadline`` (``time.monotonic()``); see ``_search``. Raises ``InvalidSessionId``,
        ``SessionNotFound``, ``CorruptLogError``, ``StoreError``."""
        validate_session_id(session_id)
        where = f"{self._path}#{session_id}"
        patterns = like_patterns(words)
        matching = "".join(" AND body LIKE ? ESCAPE '\\'" for _ in patterns)

        def missing() -> int:
            raise SessionNotFound(f"no log for session {session_id!r} in {self._path}")

        def last_seq(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            return int(row[0]) if row is not None else missing()

        async def fetch(first: int, last: int) -> list[ItemRecord]:
            def run(conn: sqlite3.Connection) -> list[tuple[int, str]]:
                return logged_rows(
                    conn,
                    f"session_id = ? AND seq BETWEEN ? AND ?{matching}",
                    (session_id, first, last, *patterns),
                    archived=self._archived(conn),
                )

            return decode_found(await self._run(run, missing=list), where=where)

        newest = await self._run(last_seq, missing=missing)
        return await scan_windows(fetch, newest, deadline=deadline)

    async def read_identity(self, session_id: str) -> LogRead:
        """The session record, then every ``settings_changed``, ``rewind`` and
        ``forked_from`` record: what resume folds a session's identity from, read from the
        hot table alone (those records are never archived). Raises ``InvalidSessionId``,
        ``SessionNotFound``, ``CorruptLogError``, ``StoreError``."""
        validate_session_id(session_id)
        where = f"{self._path}#{session_id}"

        def run(conn: sqlite3.Connection) -> list[tuple[int, str]]:
            return identity_rows(conn, session_id)

        rows: list[tuple[int, str]] = await self._run(run, missing=lambda: [])
        if not rows or rows[0][0] != 1:
            raise SessionNotFound(f"no log for session {session_id!r} in {self._path}")
        return LogRead(records=identity_records(decode_candidates(rows, where=where)))

    async def archive(
        self,
        *,
        older_than: timedelta,
        session_id: str | None = None,
        batch: int = ARCHIVE_BATCH,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> list[ArchiveReport]:
        """Move the records of ``session_id`` (every compacted session when None) that a
        compaction recorded more than ``older_than`` ago covers into ``records_archive``,
        ``batch`` seqs a transaction (see ``_sqlite_archive``); safe to stop at any point and
        to run again. Returns one report per session looked at. Raises ``InvalidSessionId``,
        ``CorruptLogError``, ``StoreError``."""
        if session_id is not None:
            validate_session_id(session_id)
        archiving = ArchivePass(
            cutoff=datetime.now(UTC) - older_than, batch=batch, on_batch=on_batch
        )

        def compacted(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT session_id FROM sessions WHERE tail_from > 1 ORDER BY session_id"
            )
            return [row[0] for row in rows]

        ids: list[str] = (
            [session_id]
            if session_id is not None
            else await self._run(compacted, missing=lambda: [])
        )
        reports = []
        for each in ids:
            state = await self._run(
                partial(archive_state, session_id=each), write=True, missing=lambda: None
            )
            if state is None:
                reports.append(ArchiveReport(session_id=each, moved=0, archived_through=0))
                continue
            tail_from, archived, rows = state
            candidates = decode_candidates(rows, where=f"{self._path}#{each}")

            async def move(first: int, last: int, each: str = each) -> int:
                step = partial(move_batch, session_id=each, first=first, last=last)
                return await self._run(step, write=True)

            reports.append(
                await archiving.move(
                    each, candidates, tail_from=tail_from, archived=archived, move=move
                )
            )
        return reports

    async def exists(self, session_id: str) -> bool:
        """Whether the session has a log; raises ``InvalidSessionId``."""
        validate_session_id(session_id)

        def run(conn: sqlite3.Connection) -> bool:
            return _session_exists(conn, session_id)

        return await self._run(run, missing=lambda: False)

    async def lease_holder(self, session_id: str) -> LeaseHolder | None:
        """Who holds the session's lease (see ``LogStore.lease_holder``); raises
        ``InvalidSessionId``."""
        validate_session_id(session_id)

        def run(conn: sqlite3.Connection) -> LeaseHolder | None:
            return self._leases.holder_of(self._lease_row(conn, session_id))

        return await self._run(run, missing=lambda: None)

    async def list_sessions(self) -> list[str]:
        """Every session id, sorted."""

        def run(conn: sqlite3.Connection) -> list[str]:
            return [row[0] for row in conn.execute("SELECT session_id FROM sessions")]

        return sorted(await self._run(run, missing=list))

    async def aclose(self) -> None:
        """Release every lease, then close the connection once operations in flight are done;
        later calls raise."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            live = self._leases.close()
            if self._conn is None:
                return
            conn, self._conn = self._conn, None

            def run(conn: sqlite3.Connection) -> None:
                for lease in live:
                    self._free(conn, lease)

            with anyio.CancelScope(shield=True):
                try:
                    if live:
                        await anyio.to_thread.run_sync(self._transact, conn, run)
                except sqlite3.Error:
                    pass  # the leases expire; closing must not fail
                finally:
                    await anyio.to_thread.run_sync(conn.close)

    # -- leases -----------------------------------------------------------------------------

    def _lease_row(self, conn: sqlite3.Connection, session_id: str) -> LeaseRow:
        row = conn.execute(
            "SELECT token, owner, pid, host, since, expires FROM leases WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        if row is None:
            return LeaseRow(token=0, owner=None, expired=True, holder=None)
        token, owner, pid, host, since, expires = row
        holder = None
        if owner is not None:
            holder = LeaseHolder(
                owner=owner, pid=pid, host=host, since=datetime.fromisoformat(since)
            )
        expired = expires is None or expires < time.time()
        return LeaseRow(token=token, owner=owner, expired=expired, holder=holder)

    def _take(self, conn: sqlite3.Connection, session_id: str, row: LeaseRow) -> Taken:
        """Grant this store the lease if ``row`` is free, else ``SessionBusy`` naming the holder."""
        self._leases.check_free(session_id, row)
        token = row.token + 1
        holder = now_holder(self._leases.owner, datetime.now(UTC))
        conn.execute(
            "INSERT OR REPLACE INTO leases (session_id, token, owner, pid, host, since, expires) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                token,
                self._leases.owner,
                holder.pid,
                holder.host,
                holder.since.isoformat(),
                time.time() + self._ttl,
            ),
        )
        return session_id, token, holder

    def _extend(self, conn: sqlite3.Connection, session_id: str, token: int) -> None:
        conn.execute(
            "UPDATE leases SET expires = ? WHERE session_id = ? AND token = ? AND owner = ?",
            (time.time() + self._ttl, session_id, token, self._leases.owner),
        )

    def _free(self, conn: sqlite3.Connection, lease: Lease) -> None:
        conn.execute(
            "UPDATE leases SET owner = NULL, pid = NULL, host = NULL, since = NULL, "
            "expires = NULL WHERE session_id = ? AND token = ? AND owner = ?",
            (lease.session_id, lease.token, self._leases.owner),
        )

    async def _extend_one(self, lease: Lease) -> None:
        def run(conn: sqlite3.Connection) -> None:
            self._leases.check(lease, self._lease_row(conn, lease.session_id))
            self._extend(conn, lease.session_id, lease.token)

        await self._run(run, write=True)

    async def _free_all(self, leases: Sequence[Lease]) -> None:
        def run(conn: sqlite3.Connection) -> None:
            for lease in leases:
                self._free(conn, lease)

        await self._run(run, write=True)

    # -- internals --------------------------------------------------------------------------

    def _append_session(
        self, conn: sqlite3.Connection, session_id: str, batches: list[PlannedBatch]
    ) -> Taken | None:
        """Check the session's lease and seqs, write its batches; the lease taken, if any."""
        row = conn.execute(
            "SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise SessionNotFound(f"no log for session {session_id!r} in {self._path}")
        lease_row = self._lease_row(conn, session_id)
        taken = None
        if self._leases.check_write(session_id, lease_row):
            taken = self._take(conn, session_id, lease_row)  # undone with the savepoint if refused
        last_seq: int = row[0]
        for batch in batches:
            check_continues(batch, last_seq)
            last_seq = batch.last_seq if batch.last_seq is not None else last_seq
        for batch in batches:
            if not batch.rows:
                continue
            conn.executemany("INSERT INTO records VALUES (?, ?, ?)", batch.rows)
            conn.execute(
                "UPDATE sessions SET last_seq = ?, tail_from = COALESCE(?, tail_from) "
                "WHERE session_id = ?",
                (batch.last_seq, batch.tail_from, session_id),
            )
        return taken

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
            # resume's read (``tail``) finds nothing in the archive but after a rewind to
            # before an archived compaction (one probe of the archive's key)
            rows = logged_rows(
                conn,
                "session_id = ? AND (seq = 1 OR seq >= ?)",
                (session_id, tail_from),
                archived=self._archived(conn),
            )
            return LogRead(records=decode_rows(rows, where=where, tail_from=tail_from))

        def missing() -> LogRead:
            raise SessionNotFound(f"no log for session {session_id!r} in {self._path}")

        return await self._run(run, missing=missing)

    def _archived(self, conn: sqlite3.Connection) -> bool:
        """Whether reads must look in the archive table too (older files have none)."""
        if not self._has_archive:
            self._has_archive = has_archive(conn)
        return self._has_archive

    async def _run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        write: bool = False,
        missing: Callable[[], T] | None = None,
    ) -> T:
        """Run ``fn`` in a worker thread, in a transaction if it writes."""
        async with self._lock:
            self._check_open()
            return await anyio.to_thread.run_sync(self._call, fn, write, missing)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed")

    def _call(
        self, fn: Callable[[sqlite3.Connection], T], write: bool, missing: Callable[[], T] | None
    ) -> T:
        if missing is not None and self._conn is None and not os.path.exists(self._path):
            return missing()
        try:
            conn = self._connect(write)
            if not write:
                return fn(conn)
            return self._transact(conn, fn)
        except (sqlite3.Error, OSError) as exc:
            no_table = isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc)
            if missing is not None and no_table:
                return missing()
            cause = disk_full_cause(exc, _free_bytes(self._path))
            said = exc if cause is exc else f"{exc} (no space left on the device)"
            raise StoreError(f"sqlite store {self._path}: {said}") from cause

    def _transact(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        return result

    def _connect(self, write: bool) -> sqlite3.Connection:
        if self._conn is None:
            if write:
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: no implicit transactions; writes BEGIN IMMEDIATE themselves
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            self._conn = conn
        if write and not self._schema_ready:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.executescript(_SCHEMA + ARCHIVE_DDL)
            self._schema_ready = self._has_archive = True
        return self._conn


#: below this much free space, a write SQLite calls a disk I/O error found the disk full
_NEARLY_FULL = 64 * 1024


def disk_full_cause(exc: BaseException, free: int | None) -> BaseException:
    """What a failed call is said to come from: SQLite reports a write that found the disk full
    as "database or disk is full" or, when the write-ahead log's or a journal's page is what did
    not fit, as a disk I/O error; with ``free`` bytes left on the device (None: unknown) that
    I/O error is an ``ENOSPC`` (its cause the SQLite error), anything else ``exc`` itself."""
    io_error = (
        isinstance(exc, sqlite3.Error) and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_IOERR
    )
    if not io_error or free is None or free >= _NEARLY_FULL:
        return exc
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    full.__cause__ = exc
    return full


def _free_bytes(path: str) -> int | None:
    try:
        return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    except OSError:
        return None


def _session_exists(conn: sqlite3.Connection, session_id: str) -> bool:
    row = conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,))
    return row.fetchone() is not None


def _refusal(session_id: str, path: str, exc: StoreError | sqlite3.IntegrityError) -> StoreError:
    """The error a refused session's append gets."""
    if isinstance(exc, StoreError):
        return exc
    error = StoreError(
        f"session {session_id!r} in {path}: a record of the batch is already stored ({exc})"
    )
    error.__cause__ = exc
    return error
