"""The store many workers share: PostgreSQL through an asyncpg pool, with leases and fencing.

A worker writes a session only while it holds the session's writer lease: ``lease_owner`` (the
store object), ``lease_token`` (the fencing token, one more at every grant), the holder's pid,
host and since, and ``lease_expires``. ``acquire`` grants it when it is released or expired;
``claim_sessions`` grants every session with input waiting and no live lease, skipping rows
other workers are claiming (``FOR UPDATE SKIP LOCKED``). The store remembers the leases it holds,
and every append reads the session rows ``FOR UPDATE`` in its own transaction and writes only if
each still carries this store's token and owner: a worker whose lease passed to another (it
expired and was granted again) cannot write even one record (``FencingError``). The token is
the fence, not the clock: a lease that expired but that nobody took is still good.

Leases last ``lease_ttl`` seconds (30 by default) past their last renewal; the runtime renews
them every ``lease_renew_every`` (10) with ``renew_leases()`` or ``lease.renew()``. A killed
worker's sessions are free once its leases expire. Unlike SQLite, a dead pid frees nothing here:
workers on other machines (or containers sharing a host name) cannot be checked.

Workers share the store through each session's inbox: ``push_message`` queues a message with
an id of its own (and NOTIFYs), ``claim_waiting`` leases sessions with input (``FOR UPDATE SKIP
LOCKED``), ``peek_inbox``/``drop_inbox`` read and settle it under the lease; the appends that
log a message's user item and its turn's ``finished`` record keep ``stowage_messages`` (which
ids the log holds, which are answered) in their own transactions: see ``_pg_inbox``.

asyncpg is the ``[postgres]`` extra, so it is imported where the store is made, never by
``import stowage.storage``. Readers create nothing: before the first write the tables may not
exist, and a read answers as for an empty store.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from types import ModuleType
from typing import Any, Literal, TypeVar
from urllib.parse import unquote_plus

import anyio
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream
from stowage.core import (
    ConfigError,
    CorruptLogError,
    FencingError,
    ItemRecord,
    LeaseHolder,
    LogRead,
    Record,
    SessionBusy,
    SessionExists,
    SessionNotFound,
    StoreError,
    validate_session_id,
)

from ._archive import ARCHIVE_BATCH, ArchiveReport
from ._codec import decode_record
from ._lease import (
    Lease,
    LeaseRow,
    Taken,
    busy,
    check_lease_row,
    lease_is_free,
    lease_times,
    new_owner,
    now_holder,
    register_lease,
)
from ._pg_append import fast_append_sql, plan_fast
from ._pg_archive import ArchiveTables, archive_session, decode_identity, read_identity_rows
from ._pg_inbox import InboxTables, decode_entries, messages_logged, queued_status
from ._pg_partitions import MIGRATE_BATCH, migrate_to_partitions, partition_count
from ._pg_workers import WorkerTable
from ._search import Found, decode_found, like_patterns, scan_windows
from ._sql import check_continues, decode_rows, plan_batch, plan_sessions

__all__ = ["PostgresStore"]

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_NO_EXTRA = (
    "the PostgreSQL store needs the [postgres] extra: pip install 'stowage-runtime[postgres]'"
)
_LEASE_COLUMNS = (
    "lease_token, lease_owner, lease_pid, lease_host, lease_since, "
    "(lease_expires IS NULL OR lease_expires < now()) AS lease_expired"
)


def resolve_schema(dsn: str, schema: str | None) -> tuple[str, str]:
    """The connection URL without its ``schema`` query parameter, and the schema of the
    store's tables: ``schema`` when given, else the URL's ``?schema=NAME``, else ``public``.

    The parameter is stowage's, not the server's, so it is taken out before the URL reaches
    the driver. Raises ``ConfigError`` for a parameter given twice, a ``schema`` that differs
    from the URL's, or a name that is not lower-case letters, digits and ``_``.
    """
    base, mark, query = dsn.partition("?")
    named: list[str] = []
    kept: list[str] = []
    for part in query.split("&") if mark else ():
        key, _, value = part.partition("=")
        if unquote_plus(key) == "schema":
            named.append(unquote_plus(value))
        elif part:
            kept.append(part)
    if len(named) > 1:
        raise ConfigError(f"the store URL names its schema {len(named)} times; name it once")
    from_url = named[0] if named else None
    if schema is not None and from_url is not None and schema != from_url:
        raise ConfigError(
            f"schema {schema!r} differs from the store URL's ?schema={from_url}; "
            "give one of them, or the same name in both"
        )
    chosen = schema if schema is not None else from_url if from_url is not None else "public"
    if not _SCHEMA_NAME.fullmatch(chosen):
        raise ConfigError(f"schema {chosen!r} must be lower-case letters, digits and '_'")
    return (base + "?" + "&".join(kept) if kept else base), chosen


def _asyncpg() -> ModuleType:
    """The asyncpg module; ``ConfigError`` naming the extra when it is not installed."""
    try:
        import asyncpg  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise ConfigError(_NO_EXTRA) from exc
    module: ModuleType = asyncpg
    return module


class PostgresStore:
    """Session logs in ``<schema>.stowage_records`` and ``<schema>.stowage_sessions``; records
    that old compactions cover may move to ``stowage_records_archive`` (``archive``), which
    every read but resume's reads with them (see ``_archive``).

    The pool opens on first use; the tables are created by the first write if missing. Every
    commit is durable per the server's ``synchronous_commit``. Raises ``ConfigError`` for a bad
    schema name, lease times that are not positive or a renew interval not below the TTL, and
    when asyncpg (the ``[postgres]`` extra) is not installed.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        lease_ttl: float = 30.0,
        lease_renew_every: float | None = None,
    ) -> None:
        dsn, schema = resolve_schema(dsn, schema)
        self._ttl, self._renew_every = lease_times(lease_ttl, lease_renew_every)
        self._pg = _asyncpg()
        self._errors: tuple[type[BaseException], ...] = (
            self._pg.PostgresError,
            self._pg.InterfaceError,
            OSError,
        )
        self._dsn = dsn
        self._schema = schema
        self._records = f'"{schema}".stowage_records'
        self._sessions = f'"{schema}".stowage_sessions'
        self._inbox = InboxTables(schema)
        self._workers = WorkerTable(schema, self._sessions)
        self._tables = ArchiveTables(
            self._sessions, self._records, f'"{schema}".stowage_records_archive'
        )
        self._fast_append = fast_append_sql(self._inbox, self._records)
        self._min_size, self._max_size = min_size, max_size
        self._pool: Any = None
        self._schema_ready = False
        self._pool_lock = anyio.Lock()
        self._closed = False
        self._owner = new_owner()
        self._held: dict[str, Lease] = {}

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self._schema!r})"  # the dsn may hold a password

    @property
    def schema(self) -> str:
        """The schema of the store's tables (given, or the URL's ``?schema=``, or public)."""
        return self._schema

    # -- LogStore ---------------------------------------------------------------------------

    async def acquire(self, session_id: str) -> Lease:
        """Take the session's writer lease for ``lease_ttl`` seconds.

        Raises ``InvalidSessionId``, ``SessionNotFound``, ``SessionBusy`` naming the holder
        while another worker's lease is live (or this store handed the lease out already).
        """
        validate_session_id(session_id)
        held = self._held.get(session_id)
        pool = await self._get_pool(write=True)
        if held is not None and not held.lost and not held.handed_out:
            # a lease a claim (or a write) took: extending it under its token, in one
            # statement, is the check; only when that fails is the row read and judged
            try:
                async with pool.acquire() as conn:
                    extended = await self._extend(conn, [held])
            except self._errors as exc:
                raise StoreError(f"postgres store: {exc}") from exc
            if session_id in extended:
                held.handed_out = True
                return held
        try:
            async with pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(
                    f"SELECT {_LEASE_COLUMNS} FROM {self._sessions} "
                    "WHERE session_id = $1 FOR UPDATE",
                    session_id,
                )
                if row is None:
                    raise SessionNotFound(f"no log for session {session_id!r}")
                lease_row = _lease_row(row)
                if (
                    held is not None
                    and not held.lost
                    and lease_row.token == held.token
                    and lease_row.owner == self._owner
                ):
                    if held.handed_out:
                        raise SessionBusy(session_id, held.holder, where=self._sessions)
                    await self._extend(conn, [held])
                    taken = None  # a lease a write took: the caller's now
                else:
                    taken = await self._take(conn, session_id, lease_row)
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        if taken is None and held is not None:
            held.handed_out = True
            return held
        assert taken is not None
        if held is not None:  # lost to another worker meanwhile; this is a new grant
            held.lost = True
        lease = self._register(taken)
        lease.handed_out = True
        return lease

    async def connect(self) -> None:
        """Open the pool and make the tables if missing, now rather than at the first write:
        what a worker does before it says it is ready. Raises ``StoreError``."""
        await self._get_pool(write=True)

    async def renew_leases(self) -> list[str]:
        """Renew every lease this store holds in one statement; returns the ids of those lost
        to another worker, sorted."""
        live = [lease for lease in self._held.values() if not lease.lost]
        if live:
            pool = await self._get_pool(write=True)
            try:
                async with pool.acquire() as conn:
                    renewed = await self._extend(conn, live)
            except self._errors as exc:
                raise StoreError(f"postgres store: {exc}") from exc
            for lease in live:
                if lease.session_id not in renewed:
                    lease.lost = True
        return sorted(lease.session_id for lease in self._held.values() if lease.lost)

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """Start a log and hold its lease; raises ``InvalidSessionId``, ``SessionExists``,
        ``StoreError``."""
        batch = plan_batch(session_id, records, create=True)
        held = session_id in self._held
        pool = await self._get_pool(write=True)
        try:
            async with pool.acquire() as conn, conn.transaction():
                # a row with messages queued before its log existed (tail_from 0) becomes it
                row = await conn.fetchrow(
                    f"INSERT INTO {self._sessions} AS s (session_id, last_seq, tail_from) "
                    "VALUES ($1, $2, $3) ON CONFLICT (session_id) DO UPDATE "
                    "SET last_seq = EXCLUDED.last_seq, tail_from = EXCLUDED.tail_from "
                    f"WHERE s.tail_from = 0 RETURNING (xmax <> 0) AS queued, {_LEASE_COLUMNS}",
                    session_id,
                    batch.last_seq or 0,
                    batch.tail_from or 1,
                )
                if row is None:
                    raise SessionExists(f"session {session_id!r} already exists")
                taken = None
                if row["queued"]:
                    # messages came first, and a worker's claim may hold the lease (this
                    # store's or another's): checked as an append checks it
                    lease = self._held.get(session_id)
                    if lease is not None:
                        check_lease_row(
                            session_id,
                            lease,
                            _lease_row(row),
                            owner=self._owner,
                            where=self._sessions,
                        )
                    else:
                        taken = await self._take(conn, session_id, _lease_row(row))
                elif not held:
                    free = LeaseRow(token=0, owner=None, expired=True, holder=None)
                    taken = await self._take(conn, session_id, free)
                await self._insert(conn, batch.rows)
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        if taken is not None:
            self._register(taken)

    async def append(self, session_id: str, records: Sequence[Record]) -> None:
        """Append one batch; raises ``SessionNotFound``, ``StoreError`` on a seq gap,
        ``SessionBusy`` or ``FencingError`` unless this store holds the current lease."""
        error = (await self.append_batches(((session_id, records),)))[session_id]
        if error is not None:
            raise error

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> dict[str, Exception | None]:
        """Append every batch, each session under this store's lease (taken here when not held
        yet, checked against its token otherwise). Every session is checked against its locked
        row (lease, seqs) before anything of it is written, and a refused session is left out
        of the writes and reported in the outcome; the others commit. Raises ``StoreError``
        when the transaction fails (connection lost, disk full): then nothing is written,
        unless only the acknowledgement of the commit was lost.

        The sessions whose lease this store holds go in one statement (``_pg_append``); the
        others, and any that statement refused, in one checked transaction after it. Should
        that one fail once the first has committed, its sessions get the ``StoreError`` as
        their outcome instead.
        """
        planned, outcomes = plan_sessions(batches)
        if not planned:
            return outcomes
        tokens = {
            session_id: lease.token
            for session_id in planned
            if (lease := self._held.get(session_id)) is not None and not lease.lost
        }
        fast = plan_fast(planned, tokens, messages_logged(batches))
        written: set[str] = set()
        if fast is not None:
            pool = await self._get_pool(write=True)
            arguments = fast.arguments(self._owner, self._inbox.answers_channel)
            try:
                rows = await pool.fetch(self._fast_append, *arguments)
            except self._errors as exc:
                raise StoreError(f"postgres store: {exc}") from exc
            written = {row["session_id"] for row in rows}
        rest = [
            (session_id, records) for session_id, records in batches if session_id not in written
        ]
        if not rest:
            return outcomes
        try:
            outcomes.update(await self._append_checked(rest))
        except StoreError as exc:
            if not written:
                raise
            outcomes.update((session_id, exc) for session_id, _ in rest)
        return outcomes

    async def _append_checked(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> dict[str, Exception | None]:
        """``append_batches`` in one transaction that reads the locked rows back and checks
        them here: what names a lost lease, a seq gap, a message logged twice."""
        planned, outcomes = plan_sessions(batches)
        if not planned:
            return outcomes
        messages = messages_logged(batches)  # user items with a message id, finished turns
        ids = sorted(planned)  # one lock order for all workers
        pool = await self._get_pool(write=True)
        taken: list[Taken] = []
        try:
            async with pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    f"SELECT session_id, last_seq, tail_from, {_LEASE_COLUMNS} "
                    f"FROM {self._sessions} WHERE session_id = ANY($1::text[]) "
                    "ORDER BY session_id FOR UPDATE",
                    ids,
                )
                by_id = {row["session_id"]: row for row in rows}
                logged_before = await self._inbox.already_logged(conn, messages)
                to_take: list[tuple[str, LeaseRow]] = []
                state: dict[str, list[int]] = {}  # session_id -> [last_seq, tail_from]
                inserts: list[tuple[str, int, str]] = []
                for session_id in ids:
                    row = by_id.get(session_id)
                    try:
                        if row is None or row["tail_from"] == 0:  # 0: messages, no log yet
                            raise SessionNotFound(f"no log for session {session_id!r}")
                        lease_row = _lease_row(row)
                        lease = self._held.get(session_id)
                        if lease is None:
                            if not lease_is_free(lease_row, dead_pid_frees=False):
                                raise busy(session_id, lease_row, where=self._sessions)
                        else:
                            check_lease_row(
                                session_id,
                                lease,
                                lease_row,
                                owner=self._owner,
                                where=self._sessions,
                            )
                        last_seq, tail_from = int(row["last_seq"]), int(row["tail_from"])
                        for batch in planned[session_id]:
                            check_continues(batch, last_seq)
                            if batch.last_seq is not None:
                                last_seq = batch.last_seq
                            if batch.tail_from is not None:
                                tail_from = batch.tail_from
                        refused = messages.refusal(session_id, logged_before)
                        if refused is not None:
                            raise refused
                    except StoreError as exc:
                        outcomes[session_id] = exc
                        continue
                    if lease is None:
                        to_take.append((session_id, lease_row))
                    state[session_id] = [last_seq, tail_from]
                    for batch in planned[session_id]:
                        inserts += batch.rows
                for session_id, lease_row in to_take:
                    taken.append(await self._take(conn, session_id, lease_row))
                if inserts:
                    await self._insert(conn, inserts)
                    await conn.execute(
                        f"UPDATE {self._sessions} AS s SET last_seq = u.last_seq, "
                        "tail_from = u.tail_from "
                        "FROM unnest($1::text[], $2::bigint[], $3::bigint[]) "
                        "AS u(session_id, last_seq, tail_from) WHERE s.session_id = u.session_id",
                        list(state),
                        [v[0] for v in state.values()],
                        [v[1] for v in state.values()],
                    )
                # message ids logged, turns answered: with the records, or not at all
                await self._inbox.record(conn, messages.only(state))
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        for each in taken:
            self._register(each)
        return outcomes

    async def read(self, session_id: str, *, repair: bool = True) -> LogRead:
        """Every record; raises ``SessionNotFound``, ``CorruptLogError``. ``repair`` changes
        nothing: a transaction is never torn."""
        return await self._read(session_id, tail=False)

    async def read_tail(self, session_id: str, *, repair: bool = True) -> LogRead:
        """The session record and every record from the newest compaction's covers_through + 1."""
        return await self._read(session_id, tail=True)

    async def exists(self, session_id: str) -> bool:
        """Whether the session has a log; raises ``InvalidSessionId``."""
        validate_session_id(session_id)
        found = await self._fetch_read(
            lambda pool: pool.fetchval(
                f"SELECT 1 FROM {self._sessions} WHERE session_id = $1 AND tail_from > 0",
                session_id,
            ),
            lambda: None,
        )
        return found is not None

    async def lease_holder(self, session_id: str) -> LeaseHolder | None:
        """Who holds the session's lease (see ``LogStore.lease_holder``): a live, unexpired
        grant; a dead pid frees nothing here (see the module docstring). Raises
        ``InvalidSessionId``."""
        validate_session_id(session_id)
        row = await self._fetch_read(
            lambda pool: pool.fetchrow(
                f"SELECT {_LEASE_COLUMNS} FROM {self._sessions} WHERE session_id = $1",
                session_id,
            ),
            lambda: None,
        )
        if row is None:
            return None
        lease = _lease_row(row)
        return None if lease_is_free(lease, dead_pid_frees=False) else lease.holder

    async def list_sessions(self) -> list[str]:
        """Every session id, sorted (by code point, not by the database's collation)."""
        rows = await self._fetch_read(
            lambda pool: pool.fetch(f"SELECT session_id FROM {self._sessions} WHERE tail_from > 0"),
            list,
        )
        return sorted(row["session_id"] for row in rows)

    async def last_seqs(self) -> dict[str, int]:
        """Each session's newest seq, in one query: what a watcher polls to see appends
        (the console) without reading any log. Raises ``StoreError``."""
        rows = await self._fetch_read(
            lambda pool: pool.fetch(
                f"SELECT session_id, last_seq FROM {self._sessions} WHERE tail_from > 0"
            ),
            list,
        )
        return {row["session_id"]: int(row["last_seq"]) for row in rows}

    async def aclose(self) -> None:
        """Release every lease this store holds, then close the pool; later calls raise
        ``StoreError``."""
        async with self._pool_lock:
            if self._closed:
                return
            self._closed = True
            leases, self._held = list(self._held.values()), {}
            if self._pool is None:
                return
            pool, self._pool = self._pool, None
            with anyio.CancelScope(shield=True):
                try:
                    live = [lease for lease in leases if not lease.lost]
                    if live:
                        async with pool.acquire() as conn:
                            await self._free(conn, live)
                except self._errors:
                    pass  # the leases expire; closing must not fail
                finally:
                    for lease in leases:
                        lease.released = True
                    await pool.close()

    # -- inbox ------------------------------------------------------------------------------

    async def push_inbox(self, session_id: str, message: Mapping[str, Any]) -> None:
        """Queue a message (say, user input) for whichever worker runs the session next."""
        validate_session_id(session_id)
        pool = await self._get_pool(write=True)
        try:
            found = await pool.fetchval(
                f"UPDATE {self._sessions} SET inbox = inbox || jsonb_build_array($2::jsonb) "
                "WHERE session_id = $1 RETURNING 1",
                session_id,
                orjson.dumps(dict(message)).decode(),
            )
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        if found is None:
            raise SessionNotFound(f"no log for session {session_id!r}")

    async def take_inbox(self, session_id: str) -> list[dict[str, Any]]:
        """Empty the inbox of a session this store holds the lease of; raises ``FencingError``
        if it holds none or the lease passed to another worker."""
        validate_session_id(session_id)
        lease = self._held.get(session_id)
        if lease is None:
            raise FencingError(f"session {session_id!r}: this store holds no lease for it")
        pool = await self._get_pool(write=True)
        try:
            async with pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(
                    f"SELECT inbox, {_LEASE_COLUMNS} FROM {self._sessions} "
                    "WHERE session_id = $1 FOR UPDATE",
                    session_id,
                )
                if row is None:
                    raise SessionNotFound(f"no log for session {session_id!r}")
                check_lease_row(
                    session_id, lease, _lease_row(row), owner=self._owner, where=self._sessions
                )
                await conn.execute(
                    f"UPDATE {self._sessions} SET inbox = '[]'::jsonb WHERE session_id = $1",
                    session_id,
                )
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        messages: list[dict[str, Any]] = orjson.loads(row["inbox"])
        return messages

    async def claim_sessions(self, *, limit: int) -> list[Lease]:
        """Lease up to ``limit`` sessions that have input waiting and no live lease, skipping
        rows other workers are claiming right now; returns the leases, by session id."""
        pool = await self._get_pool(write=True)
        holder = now_holder(self._owner)  # its since is replaced by the database's now()
        try:
            rows = await pool.fetch(
                f"WITH free AS (SELECT session_id FROM {self._sessions} "
                "WHERE inbox <> '[]'::jsonb "
                "AND (lease_owner IS NULL OR lease_expires IS NULL OR lease_expires < now()) "
                "ORDER BY session_id LIMIT $2 FOR UPDATE SKIP LOCKED) "
                f"UPDATE {self._sessions} AS s SET lease_owner = $1, "
                "lease_token = s.lease_token + 1, "
                "lease_expires = now() + make_interval(secs => $3), lease_renewed = now(), "
                "lease_pid = $4, lease_host = $5, lease_since = now() "
                "FROM free WHERE s.session_id = free.session_id "
                "RETURNING s.session_id, s.lease_token, s.lease_since",
                self._owner,
                limit,
                self._ttl,
                holder.pid,
                holder.host,
            )
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        leases = []
        for row in sorted(rows, key=lambda row: str(row["session_id"])):
            since_holder = LeaseHolder(
                owner=self._owner, pid=holder.pid, host=holder.host, since=row["lease_since"]
            )
            old = self._held.get(row["session_id"])
            if old is not None:
                old.lost = True
            lease = self._register((row["session_id"], int(row["lease_token"]), since_holder))
            lease.handed_out = True
            leases.append(lease)
        return leases

    # -- workers: messages by id, claims, wake-ups -------------------------------------------

    async def push_message(
        self, session_id: str, message: Mapping[str, Any], *, create: bool = False
    ) -> bool:
        """Queue ``message`` (a JSON object with a string ``message_id``) for the session's next
        worker and NOTIFY the workers; False when that id is queued or logged already (nothing
        is queued twice). ``create``: a session with no log yet gets one from the worker that
        takes the message. Raises ``InvalidSessionId``, ``ConfigError`` for a message without
        an id, ``SessionNotFound`` (not ``create``), ``StoreError``.
        """
        validate_session_id(session_id)
        if not isinstance(message.get("message_id"), str):
            raise ConfigError("a message needs a string 'message_id'")
        pool = await self._get_pool(write=True)
        try:
            async with pool.acquire() as conn, conn.transaction():
                outcome = await self._inbox.push(conn, session_id, message, create=create)
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        if outcome == "missing":
            raise SessionNotFound(f"no log for session {session_id!r}")
        return outcome == "queued"

    async def peek_inbox(self, session_id: str) -> list[tuple[dict[str, Any], str | None]]:
        """The queued entries of a session this store holds the lease of, in order, each with
        the status of its message id when the log holds it (``logged``: its turn has not
        finished; ``answered``; ``failed``), else None. Raises ``FencingError`` when this store
        holds no lease for it or lost it, ``SessionNotFound``, ``StoreError``."""
        validate_session_id(session_id)
        lease = self._held.get(session_id)
        if lease is None:
            raise FencingError(f"session {session_id!r}: this store holds no lease for it")
        pool = await self._get_pool(write=True)
        try:
            row = await pool.fetchrow(self._inbox.peek_sql(_LEASE_COLUMNS), session_id)
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        if row is None:
            raise SessionNotFound(f"no session {session_id!r}")
        check_lease_row(session_id, lease, _lease_row(row), owner=self._owner, where=self._sessions)
        return [
            (entry, queued_status(row["statuses"], entry.get("message_id")))
            for entry in decode_entries(row["inbox"])
        ]

    async def drop_inbox(
        self, session_id: str, entries: Sequence[Mapping[str, Any]], *, reason: str
    ) -> None:
        """Take ``entries`` (as ``peek_inbox`` gave them) out of the inbox of a session this
        store holds the lease of; their message ids, unless answered, are marked failed with
        ``reason``, and waiting senders are woken. Raises as ``peek_inbox`` does."""
        validate_session_id(session_id)
        lease = self._held.get(session_id)
        if lease is None:
            raise FencingError(f"session {session_id!r}: this store holds no lease for it")
        pool = await self._get_pool(write=True)
        try:
            async with pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(
                    f"SELECT {_LEASE_COLUMNS} FROM {self._sessions} "
                    "WHERE session_id = $1 FOR UPDATE",
                    session_id,
                )
                if row is None:
                    raise SessionNotFound(f"no session {session_id!r}")
                check_lease_row(
                    session_id, lease, _lease_row(row), owner=self._owner, where=self._sessions
                )
                await self._inbox.drop(conn, session_id, entries, reason)
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def claim_waiting(self, *, limit: int) -> list[tuple[str, LeaseHolder | None]]:
        """Take the lease of up to ``limit`` sessions with input queued and no live lease (not
        this store's), skipping rows other workers are claiming (``FOR UPDATE SKIP LOCKED``).

        Unlike ``claim_sessions`` the leases are not handed out: the runtime that opens the
        session takes each with ``acquire``, and until then appends use it. Returns the session
        ids, each with the holder whose lease had expired (a takeover) or None. Raises
        ``StoreError``.
        """
        pool = await self._get_pool(write=True)
        holder = now_holder(self._owner)  # its since is replaced by the database's now()
        try:
            rows = await pool.fetch(
                "WITH free AS (SELECT session_id, lease_owner AS was_owner, lease_pid AS was_pid, "
                f"lease_host AS was_host, lease_since AS was_since FROM {self._sessions} "
                "WHERE inbox <> '[]'::jsonb "
                "AND (lease_owner IS NULL OR lease_expires IS NULL OR lease_expires < now()) "
                "AND lease_owner IS DISTINCT FROM $1 "
                "ORDER BY session_id LIMIT $2 FOR UPDATE SKIP LOCKED) "
                f"UPDATE {self._sessions} AS s SET lease_owner = $1, "
                "lease_token = s.lease_token + 1, "
                "lease_expires = now() + make_interval(secs => $3), lease_renewed = now(), "
                "lease_pid = $4, lease_host = $5, lease_since = now() "
                "FROM free WHERE s.session_id = free.session_id "
                "RETURNING s.session_id, s.lease_token, s.lease_since, "
                "free.was_owner, free.was_pid, free.was_host, free.was_since",
                self._owner,
                limit,
                self._ttl,
                holder.pid,
                holder.host,
            )
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        claimed: list[tuple[str, LeaseHolder | None]] = []
        for row in sorted(rows, key=lambda row: str(row["session_id"])):
            session_id = str(row["session_id"])
            old = self._held.get(session_id)
            if old is not None:
                old.lost = True
            mine = LeaseHolder(
                owner=self._owner, pid=holder.pid, host=holder.host, since=row["lease_since"]
            )
            self._register((session_id, int(row["lease_token"]), mine))
            previous = None
            if row["was_owner"] is not None and row["was_pid"] is not None:
                previous = LeaseHolder(
                    owner=row["was_owner"],
                    pid=row["was_pid"],
                    host=row["was_host"],
                    since=row["was_since"],
                )
            claimed.append((session_id, previous))
        return claimed

    async def release(self, session_id: str) -> None:
        """Give back the session's lease if this store holds it (handed out or not); nothing
        otherwise. Raises ``StoreError``."""
        lease = self._held.get(validate_session_id(session_id))
        if lease is not None:
            await lease.release()

    async def live_workers(self) -> list[dict[str, Any]]:
        """The live workers (their ``beat`` rows) and every other holder of live leases, one
        per store object: ``owner``, ``pid``, ``host``, ``sessions`` held, ``since`` (its
        oldest grant, else when it started), ``renewed`` (its newest beat or renewal),
        ``rounds_per_s`` (between its last two beats, else None); see ``_pg_workers``.
        Raises ``StoreError``."""
        rows = await self._fetch_read(lambda pool: pool.fetch(self._workers.list_sql()), list)
        return [dict(row) for row in rows]

    @property
    def renew_every(self) -> float:
        """Seconds between lease renewals (and a worker's beats)."""
        return self._renew_every

    async def beat(self, rounds: int) -> None:
        """Say this store's worker is up, with ``rounds`` committed so far, for a lease TTL:
        one statement (see ``_pg_workers``). Raises ``StoreError``."""
        pool = await self._get_pool(write=True)
        holder = now_holder(self._owner)
        try:
            await pool.execute(
                self._workers.beat_sql(), self._owner, holder.pid, holder.host, self._ttl, rounds
            )
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def leave(self) -> None:
        """Delete this store's worker row (a worker stopping). Raises ``StoreError``."""
        pool = await self._get_pool(write=True)
        try:
            await pool.execute(self._workers.leave_sql(), self._owner)
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def queue_depth(self) -> tuple[int, int]:
        """Messages queued in the store (not answered yet, in flight included) and the
        sessions they wait in: one count over the waiting sessions' index. Raises
        ``StoreError``."""
        row = await self._fetch_read(
            lambda pool: pool.fetchrow(
                "SELECT coalesce(sum(jsonb_array_length(inbox)), 0) AS messages, "
                f"count(*) AS sessions FROM {self._sessions} WHERE inbox <> '[]'::jsonb"
            ),
            lambda: None,
        )
        return (0, 0) if row is None else (int(row["messages"]), int(row["sessions"]))

    async def message_status(self, session_id: str, message_id: str) -> dict[str, Any] | None:
        """What the log holds of a message id: ``status`` (``logged``, ``answered``,
        ``failed``), ``seq`` of its user item, ``answered_seq`` of its turn's ``finished``
        record, ``reason`` it failed; None while it is only queued (or unknown)."""
        validate_session_id(session_id)

        async def run(pool: Any) -> dict[str, Any] | None:
            async with pool.acquire() as conn:
                return await self._inbox.status(conn, session_id, message_id)

        found: dict[str, Any] | None = await self._fetch_read(run, lambda: None)
        return found

    async def read_range(self, session_id: str, first: int, last: int) -> tuple[Record, ...]:
        """The records with ``first <= seq <= last``, in order. Raises ``CorruptLogError`` for a
        bad row or a gap, ``StoreError``."""
        validate_session_id(session_id)
        rows = await self._fetch_logged(
            lambda records: f"SELECT seq, body FROM {records} AS r ORDER BY seq",
            "session_id = $1 AND seq BETWEEN $2 AND $3",
            session_id,
            first,
            last,
        )
        where = f"{self._records}#{session_id}"
        out: list[Record] = []
        for expected, row in enumerate(rows, start=first):
            if row["seq"] != expected:
                raise CorruptLogError(
                    f"seq {row['seq']} where {expected} was expected", path=where, line=row["seq"]
                )
            try:
                out.append(decode_record(row["body"]))
            except ValueError as exc:
                raise CorruptLogError(str(exc), path=where, line=expected) from None
        return tuple(out)

    async def search_log(self, session_id: str, words: Sequence[str], *, deadline: float) -> Found:
        """The item records whose row may hold every one of ``words`` (``ILIKE``), oldest
        first, one window of seqs (the primary key's range) a query, until ``deadline``
        (``time.monotonic()``); see ``_search``. Raises ``InvalidSessionId``,
        ``SessionNotFound``, ``CorruptLogError``, ``StoreError``."""
        validate_session_id(session_id)
        where = f"{self._records}#{session_id}"
        patterns = like_patterns(words)
        last_seq = await self._fetch_read(
            lambda pool: pool.fetchval(
                f"SELECT last_seq FROM {self._sessions} WHERE session_id = $1 AND tail_from > 0",
                session_id,
            ),
            lambda: None,
        )
        if last_seq is None:
            raise SessionNotFound(f"no log for session {session_id!r}")

        async def fetch(first: int, last: int) -> list[ItemRecord]:
            rows = await self._fetch_logged(
                lambda records: f"SELECT seq, body FROM {records} AS r ORDER BY seq",
                "session_id = $1 AND seq BETWEEN $2 AND $3 AND body ILIKE ALL($4::text[])",
                session_id,
                first,
                last,
                patterns,
            )
            return decode_found(((r["seq"], r["body"]) for r in rows), where=where)

        return await scan_windows(fetch, int(last_seq), deadline=deadline)

    async def read_identity(self, session_id: str) -> LogRead:
        """The session record, then every ``settings_changed``, ``rewind`` and
        ``forked_from`` record: what resume folds a session's identity from, read from the
        hot table alone (those records are never archived). Raises ``InvalidSessionId``,
        ``SessionNotFound``, ``CorruptLogError``, ``StoreError``."""
        validate_session_id(session_id)

        async def run(pool: Any) -> list[Any]:
            async with pool.acquire() as conn:
                return await read_identity_rows(conn, self._tables, session_id)

        rows = await self._fetch_read(run, list)
        if not rows or rows[0]["seq"] != 1:
            raise SessionNotFound(f"no log for session {session_id!r}")
        return LogRead(records=decode_identity(rows, where=f"{self._records}#{session_id}"))

    async def archive(
        self,
        *,
        older_than: timedelta,
        session_id: str | None = None,
        batch: int = ARCHIVE_BATCH,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> list[ArchiveReport]:
        """Move the records of ``session_id`` (every compacted session when None) that a
        compaction recorded more than ``older_than`` ago covers into
        ``stowage_records_archive``, ``batch`` seqs a transaction (see ``_pg_archive``); safe
        to stop at any point and to run again. Returns one report per session looked at.
        Raises ``InvalidSessionId``, ``CorruptLogError``, ``StoreError``."""
        if session_id is not None:
            validate_session_id(session_id)
        pool = await self._get_pool(write=True)
        try:
            cutoff = await pool.fetchval("SELECT now()") - older_than
            if session_id is None:
                rows = await pool.fetch(
                    f"SELECT session_id FROM {self._sessions} WHERE tail_from > 1 "
                    "ORDER BY session_id"
                )
                ids = [row["session_id"] for row in rows]
            else:
                ids = [session_id]
            return [
                await archive_session(
                    pool, self._tables, each, cutoff=cutoff, batch=batch, on_batch=on_batch
                )
                for each in ids
            ]
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def missing(self) -> str | None:
        """What of the store does not exist yet: its database, its schema, or the tables in
        it (a writer makes the schema and tables on first use; the database is the
        server's); None when the store exists. Creates nothing. Raises ``StoreError`` for
        any other failure (a server that is down, a refused password)."""
        try:
            pool = await self._get_pool(write=False)
        except StoreError as exc:
            if isinstance(exc.__cause__, self._pg.InvalidCatalogNameError):
                return "database"
            raise
        try:
            schema, table = await pool.fetchrow(
                "SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
                f'"{self._schema}"',
                self._sessions,
            )
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        if not schema:
            return "schema"
        return None if table else "tables"

    async def partitions(self) -> int:
        """How many hash partitions (by session) the records table has: 0 when it is a plain
        table or does not exist yet. Raises ``StoreError``."""
        pool = await self._get_pool(write=False)
        try:
            async with pool.acquire() as conn:
                return await partition_count(conn, self._schema)
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def migrate_partitions(
        self,
        count: int,
        *,
        batch: int = MIGRATE_BATCH,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> bool:
        """Make the records table ``PARTITION BY HASH (session_id)`` with ``count`` partitions:
        a new table filled in batches while workers go on, then swapped in under a short
        exclusive lock (see ``_pg_partitions``); ``on_progress(copied, total)`` after each
        batch. Returns False when it already has ``count`` partitions (nothing done). Raises
        ``ConfigError`` for a count below 2 or when it is partitioned with another count,
        ``StoreError``."""
        pool = await self._get_pool(write=True)
        try:
            return await migrate_to_partitions(
                pool, self._schema, count, batch=batch, on_progress=on_progress
            )
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    @asynccontextmanager
    async def notifications(
        self, kind: Literal["inbox", "answers"], *, buffer: int = 1024
    ) -> AsyncIterator[MemoryObjectReceiveStream[str]]:
        """LISTEN for ``inbox`` (a message was queued) or ``answers`` (one was answered or
        given up on) over a connection of its own; yields the payloads (session ids).

        A full buffer drops payloads (a wake-up is as good as many); the stream ends when the
        connection is lost. Raises ``StoreError`` when it cannot connect.
        """
        channel = self._inbox.inbox_channel if kind == "inbox" else self._inbox.answers_channel
        send, receive = anyio.create_memory_object_stream[str](buffer)

        def on_notification(conn: Any, pid: int, channel: str, payload: str) -> None:
            # a full buffer drops it: the reader is behind, and one wake-up is as good as many
            with suppress(anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                send.send_nowait(payload)

        def on_lost(conn: Any) -> None:
            send.close()

        try:
            conn = await self._pg.connect(self._dsn)
        except self._errors as exc:
            raise StoreError(f"cannot listen on postgres store: {exc}") from exc
        try:
            await conn.add_listener(channel, on_notification)
            conn.add_termination_listener(on_lost)
            with receive:
                yield receive
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        finally:
            send.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                try:
                    await conn.close()
                except self._errors:
                    conn.terminate()

    # -- leases -----------------------------------------------------------------------------

    async def _take(self, conn: Any, session_id: str, row: LeaseRow) -> Taken:
        """Grant this store the lease (the row is locked); ``SessionBusy`` if another holds it."""
        if not lease_is_free(row, dead_pid_frees=False):
            raise busy(session_id, row, where=self._sessions)
        holder = now_holder(self._owner)  # its since is replaced by the database's now()
        granted = await conn.fetchrow(
            f"UPDATE {self._sessions} SET lease_owner = $2, lease_token = lease_token + 1, "
            "lease_expires = now() + make_interval(secs => $3), lease_renewed = now(), "
            "lease_pid = $4, lease_host = $5, lease_since = now() WHERE session_id = $1 "
            "RETURNING lease_token, lease_since",
            session_id,
            self._owner,
            self._ttl,
            holder.pid,
            holder.host,
        )
        since = granted["lease_since"]
        return (
            session_id,
            int(granted["lease_token"]),
            LeaseHolder(owner=self._owner, pid=holder.pid, host=holder.host, since=since),
        )

    def _mine_sql(self, owner: str) -> str:
        """A CTE ``mine``: the session rows of ``$1`` (ids) still under the tokens ``$2`` and
        the owner ``owner``, locked in session id order, the order every statement of every
        worker locks session rows in (an UPDATE ... FROM locks in whatever order its join
        runs, and two of them, or one and an append, can deadlock)."""
        return (
            f"WITH mine AS (SELECT s.session_id FROM {self._sessions} AS s "
            "JOIN unnest($1::text[], $2::bigint[]) AS u(session_id, token) "
            "ON s.session_id = u.session_id AND s.lease_token = u.token "
            f"WHERE s.lease_owner = {owner} ORDER BY s.session_id FOR UPDATE OF s) "
        )

    async def _extend(self, conn: Any, leases: Sequence[Lease]) -> set[str]:
        """Extend the leases still held under their tokens; returns their session ids."""
        rows = await conn.fetch(
            self._mine_sql("$4") + f"UPDATE {self._sessions} AS s "
            "SET lease_expires = now() + make_interval(secs => $3), lease_renewed = now() "
            "FROM mine WHERE s.session_id = mine.session_id RETURNING s.session_id",
            [lease.session_id for lease in leases],
            [lease.token for lease in leases],
            self._ttl,
            self._owner,
        )
        return {row["session_id"] for row in rows}

    async def _free(self, conn: Any, leases: Sequence[Lease]) -> None:
        await conn.execute(
            self._mine_sql("$3") + f"UPDATE {self._sessions} AS s SET lease_owner = NULL, "
            "lease_expires = NULL, lease_pid = NULL, lease_host = NULL, lease_since = NULL "
            "FROM mine WHERE s.session_id = mine.session_id",
            [lease.session_id for lease in leases],
            [lease.token for lease in leases],
            self._owner,
        )

    def _register(self, taken: Taken) -> Lease:
        return register_lease(
            self._held,
            taken,
            renew_every=self._renew_every,
            renew=self._renew_lease,
            release=self._release_lease,
        )

    async def _renew_lease(self, lease: Lease) -> None:
        if self._held.get(lease.session_id) is not lease:
            raise FencingError(f"session {lease.session_id!r}: lease {lease.token} is not held")
        pool = await self._get_pool(write=True)
        try:
            async with pool.acquire() as conn:
                renewed = await self._extend(conn, [lease])
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        if lease.session_id not in renewed:
            lease.lost = True
            raise FencingError(
                f"session {lease.session_id!r}: lease {lease.token} was lost to another worker"
            )

    async def _release_lease(self, lease: Lease) -> None:
        if self._held.get(lease.session_id) is not lease:
            return
        del self._held[lease.session_id]
        if lease.lost:
            return
        pool = await self._get_pool(write=True)
        try:
            async with pool.acquire() as conn:
                await self._free(conn, [lease])
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    # -- internals --------------------------------------------------------------------------

    async def _insert(self, conn: Any, rows: list[tuple[str, int, str]]) -> None:
        if rows:
            await conn.execute(
                f"INSERT INTO {self._records} (session_id, seq, body) "
                "SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])",
                [r[0] for r in rows],
                [r[1] for r in rows],
                [r[2] for r in rows],
            )

    async def _read(self, session_id: str, *, tail: bool) -> LogRead:
        validate_session_id(session_id)

        # one statement, so one snapshot: the session row and its records agree, and a record
        # being archived is in exactly one of the two tables. Resume's read (``tail``) finds
        # nothing in the archive but after a rewind to before an archived compaction (its
        # probe of the archive's key is one index lookup); the whole log reads both.
        rows = await self._fetch_logged(
            lambda records: (
                f"SELECT s.tail_from, r.seq, r.body FROM {self._sessions} AS s "
                f"LEFT JOIN LATERAL {records} AS r ON true "
                "WHERE s.session_id = $1 AND s.tail_from > 0 ORDER BY r.seq"
            ),
            "session_id = s.session_id AND (seq = 1 OR seq >= s.tail_from)"
            if tail
            else "session_id = s.session_id",
            session_id,
        )
        if not rows:
            raise SessionNotFound(f"no log for session {session_id!r}")
        start = int(rows[0]["tail_from"]) if tail else 1
        where = f"{self._records}#{session_id}"
        pairs = ((row["seq"], row["body"]) for row in rows if row["seq"] is not None)
        return LogRead(records=decode_rows(pairs, where=where, tail_from=start))

    async def _fetch_logged(
        self, query: Callable[[str], str], where: str, *arguments: Any
    ) -> list[Any]:
        """Rows of ``query(relation)``, the relation being the hot and archived rows that
        match ``where``; of the hot rows alone on a database whose archive table was never
        made (written by an earlier version, read before any write of this one)."""
        try:
            pool = await self._get_pool(write=False)
            return list(await pool.fetch(query(self._tables.both(where)), *arguments))
        except self._pg.UndefinedTableError:
            pass
        except self._pg.InvalidSchemaNameError:
            return []
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        hot = f"(SELECT seq, body FROM {self._records} WHERE {where})"
        rows: list[Any] = await self._fetch_read(
            lambda pool: pool.fetch(query(hot), *arguments), list
        )
        return rows

    async def _fetch_read(self, fn: Callable[[Any], Any], missing: Callable[[], T]) -> Any:
        """Run a read; ``missing()`` answers it when the tables do not exist yet."""
        pool = await self._get_pool(write=False)
        try:
            return await fn(pool)
        except (self._pg.UndefinedTableError, self._pg.InvalidSchemaNameError):
            return missing()
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def _get_pool(self, *, write: bool) -> Any:
        async with self._pool_lock:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            try:
                if self._pool is None:
                    self._pool = await self._pg.create_pool(
                        self._dsn,
                        min_size=self._min_size,
                        max_size=self._max_size,
                        **_pool_options(self._pg),
                    )
                if write and not self._schema_ready:
                    await self._ensure_schema(self._pool)
                    self._schema_ready = True
            except self._errors as exc:
                raise StoreError(f"cannot open postgres store: {exc}") from exc
            return self._pool

    async def _ensure_schema(self, pool: Any) -> None:
        async with pool.acquire() as conn, conn.transaction():
            # Serialise first-use DDL across workers: concurrent CREATE ... IF NOT EXISTS can
            # still collide in the catalogue.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('stowage_schema'))")
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._sessions} ("
                "session_id text PRIMARY KEY, last_seq bigint NOT NULL DEFAULT 0, "
                "tail_from bigint NOT NULL DEFAULT 1, lease_owner text, "
                "lease_token bigint NOT NULL DEFAULT 0, lease_expires timestamptz, "
                "inbox jsonb NOT NULL DEFAULT '[]'::jsonb)"
            )
            # the holder's name, added to tables made before leases named their holder
            await conn.execute(
                f"ALTER TABLE {self._sessions} ADD COLUMN IF NOT EXISTS lease_pid integer, "
                "ADD COLUMN IF NOT EXISTS lease_host text, "
                "ADD COLUMN IF NOT EXISTS lease_since timestamptz, "
                "ADD COLUMN IF NOT EXISTS lease_renewed timestamptz"
            )
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._records} ("
                "session_id text NOT NULL, seq bigint NOT NULL, body text NOT NULL, "
                "PRIMARY KEY (session_id, seq))"
            )
            await conn.execute(self._tables.ddl())  # covered records moved out of the way
            for statement in self._inbox.ddl():  # the message ids the logs hold
                await conn.execute(statement)
            await conn.execute(self._workers.ddl())  # who is up, idle workers too


def _pool_options(pg: ModuleType) -> dict[str, Any]:
    """No reset query when a connection goes back to the pool (asyncpg >= 0.30 lets us say so).

    The store keeps no session state on pooled connections (its locks are transaction-scoped,
    it LISTENs on connections of its own), so asyncpg's reset (``pg_advisory_unlock_all();
    CLOSE ALL; UNLISTEN *; RESET ALL``) would be one more round trip per statement or
    transaction for nothing. asyncpg still rolls back a transaction left open.
    """
    if "reset" not in inspect.signature(pg.create_pool).parameters:
        return {}
    return {"reset": _keep_session}


async def _keep_session(conn: Any) -> None:
    """The pool's reset: nothing to undo (see ``_pool_options``)."""


def _lease_row(row: Mapping[str, Any]) -> LeaseRow:
    owner = row["lease_owner"]
    holder = None
    if owner is not None and row["lease_pid"] is not None:
        holder = LeaseHolder(
            owner=owner, pid=row["lease_pid"], host=row["lease_host"], since=row["lease_since"]
        )
    return LeaseRow(
        token=int(row["lease_token"]),
        owner=owner,
        expired=bool(row["lease_expired"]),
        holder=holder,
    )
