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
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
from stowage.core import (
    ConfigError,
    Durability,
    LeaseHolder,
    Record,
    SessionExists,
    StoreError,
    validate_session_id,
)

from ._lease import Lease, LeaseRow, Taken, lease_times, new_owner, now_holder
from ._sql import PlannedBatch, check_continues, plan_batch, plan_sessions
from ._sql_leases import HeldLeases
from ._sql_store import SqlStoreBase
from ._sqlite_queries import ARCHIVE_DDL, SqliteQueries, has_archive, session_exists

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
        self._queries = SqliteQueries(path=self._path, run=self._run, archived=self._archived)

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
            if not session_exists(conn, session_id):
                raise self._queries.no_log(session_id)
            return self._take(conn, session_id, row)

        def missing() -> Lease | Taken:
            raise self._queries.no_log(session_id)

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
            no_log: dict[str, Exception] = {sid: self._queries.no_log(sid) for sid in ids}
            return no_log, []

        refused, taken = await self._run(run, write=True, missing=missing)
        for each in taken:
            self._leases.grant(each)
        outcomes.update(refused)
        return outcomes

    async def lease_holder(self, session_id: str) -> LeaseHolder | None:
        """Who holds the session's lease (see ``LogStore.lease_holder``); raises
        ``InvalidSessionId``."""
        validate_session_id(session_id)

        def run(conn: sqlite3.Connection) -> LeaseHolder | None:
            return self._leases.holder_of(self._lease_row(conn, session_id))

        return await self._run(run, missing=lambda: None)

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
            raise self._queries.no_log(session_id)
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


def _refusal(session_id: str, path: str, exc: StoreError | sqlite3.IntegrityError) -> StoreError:
    """The error a refused session's append gets."""
    if isinstance(exc, StoreError):
        return exc
    error = StoreError(
        f"session {session_id!r} in {path}: a record of the batch is already stored ({exc})"
    )
    error.__cause__ = exc
    return error
