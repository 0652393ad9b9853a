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

asyncpg is the ``[postgres]`` extra, so it is imported where the store is made, never by
``import stowage.storage``. Readers create nothing: before the first write the tables may not
exist, and a read answers as for an empty store.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, TypeVar

import anyio
import orjson
from stowage.core import (
    ConfigError,
    FencingError,
    LeaseHolder,
    LogRead,
    Record,
    SessionBusy,
    SessionExists,
    SessionNotFound,
    StoreError,
    validate_session_id,
)

from ._lease import (
    Lease,
    LeaseRow,
    busy,
    check_lease_row,
    lease_is_free,
    lease_times,
    new_owner,
    now_holder,
)
from ._sql import check_continues, decode_rows, plan_batch

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
_Taken = tuple[str, int, LeaseHolder]  # (session_id, token, holder), registered after commit


def _asyncpg() -> ModuleType:
    """The asyncpg module; ``ConfigError`` naming the extra when it is not installed."""
    try:
        import asyncpg  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise ConfigError(_NO_EXTRA) from exc
    module: ModuleType = asyncpg
    return module


class PostgresStore:
    """Session logs in ``<schema>.stowage_records`` and ``<schema>.stowage_sessions``.

    The pool opens on first use; the tables are created by the first write if missing. Every
    commit is durable per the server's ``synchronous_commit``. Raises ``ConfigError`` for a bad
    schema name, lease times that are not positive or a renew interval not below the TTL, and
    when asyncpg (the ``[postgres]`` extra) is not installed.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        min_size: int = 1,
        max_size: int = 10,
        lease_ttl: float = 30.0,
        lease_renew_every: float | None = None,
    ) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigError(f"schema {schema!r} must be lower-case letters, digits and '_'")
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
        self._min_size, self._max_size = min_size, max_size
        self._pool: Any = None
        self._schema_ready = False
        self._pool_lock = anyio.Lock()
        self._closed = False
        self._owner = new_owner()
        self._held: dict[str, Lease] = {}

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self._schema!r})"  # the dsn may hold a password

    # -- LogStore ---------------------------------------------------------------------------

    async def acquire(self, session_id: str) -> Lease:
        """Take the session's writer lease for ``lease_ttl`` seconds.

        Raises ``InvalidSessionId``, ``SessionNotFound``, ``SessionBusy`` naming the holder
        while another worker's lease is live (or this store handed the lease out already).
        """
        validate_session_id(session_id)
        held = self._held.get(session_id)
        pool = await self._get_pool(write=True)
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
                try:
                    await conn.execute(
                        f"INSERT INTO {self._sessions} (session_id, last_seq, tail_from) "
                        "VALUES ($1, $2, $3)",
                        session_id,
                        batch.last_seq or 0,
                        batch.tail_from or 1,
                    )
                except self._pg.UniqueViolationError:
                    raise SessionExists(f"session {session_id!r} already exists") from None
                taken = None
                if not held:
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
        await self.append_batches(((session_id, records),))

    async def append_batches(self, batches: Sequence[tuple[str, Sequence[Record]]]) -> None:
        """Append every batch in one transaction, each under this store's lease (taken here
        when not held yet, checked against its token otherwise); all or nothing. Raises like
        ``append``."""
        planned = [plan_batch(session_id, records) for session_id, records in batches]
        if not planned:
            return
        ids = sorted({batch.session_id for batch in planned})  # one lock order for all workers
        pool = await self._get_pool(write=True)
        try:
            async with pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    f"SELECT session_id, last_seq, tail_from, {_LEASE_COLUMNS} "
                    f"FROM {self._sessions} WHERE session_id = ANY($1::text[]) "
                    "ORDER BY session_id FOR UPDATE",
                    ids,
                )
                by_id = {row["session_id"]: row for row in rows}
                taken: list[_Taken] = []
                for session_id in ids:
                    row = by_id.get(session_id)
                    if row is None:
                        raise SessionNotFound(f"no log for session {session_id!r}")
                    lease = self._held.get(session_id)
                    if lease is None:
                        taken.append(await self._take(conn, session_id, _lease_row(row)))
                    else:
                        check_lease_row(
                            session_id,
                            lease,
                            _lease_row(row),
                            owner=self._owner,
                            where=self._sessions,
                        )
                state = {sid: [by_id[sid]["last_seq"], by_id[sid]["tail_from"]] for sid in ids}
                inserts: list[tuple[str, int, str]] = []
                for batch in planned:
                    check_continues(batch, state[batch.session_id][0])
                    if batch.last_seq is not None:
                        state[batch.session_id][0] = batch.last_seq
                    if batch.tail_from is not None:
                        state[batch.session_id][1] = batch.tail_from
                    inserts += batch.rows
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
        except self._errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        for each in taken:
            self._register(each)

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
                f"SELECT 1 FROM {self._sessions} WHERE session_id = $1", session_id
            ),
            lambda: None,
        )
        return found is not None

    async def list_sessions(self) -> list[str]:
        """Every session id, sorted (by code point, not by the database's collation)."""
        rows = await self._fetch_read(
            lambda pool: pool.fetch(f"SELECT session_id FROM {self._sessions}"), list
        )
        return sorted(row["session_id"] for row in rows)

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
                "lease_expires = now() + make_interval(secs => $3), "
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

    # -- leases -----------------------------------------------------------------------------

    async def _take(self, conn: Any, session_id: str, row: LeaseRow) -> _Taken:
        """Grant this store the lease (the row is locked); ``SessionBusy`` if another holds it."""
        if not lease_is_free(row, dead_pid_frees=False):
            raise busy(session_id, row, where=self._sessions)
        holder = now_holder(self._owner)  # its since is replaced by the database's now()
        granted = await conn.fetchrow(
            f"UPDATE {self._sessions} SET lease_owner = $2, lease_token = lease_token + 1, "
            "lease_expires = now() + make_interval(secs => $3), lease_pid = $4, "
            "lease_host = $5, lease_since = now() WHERE session_id = $1 "
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

    async def _extend(self, conn: Any, leases: Sequence[Lease]) -> set[str]:
        """Extend the leases still held under their tokens; returns their session ids."""
        rows = await conn.fetch(
            f"UPDATE {self._sessions} AS s "
            "SET lease_expires = now() + make_interval(secs => $3) "
            "FROM unnest($1::text[], $2::bigint[]) AS u(session_id, token) "
            "WHERE s.session_id = u.session_id AND s.lease_token = u.token "
            "AND s.lease_owner = $4 RETURNING s.session_id",
            [lease.session_id for lease in leases],
            [lease.token for lease in leases],
            self._ttl,
            self._owner,
        )
        return {row["session_id"] for row in rows}

    async def _free(self, conn: Any, leases: Sequence[Lease]) -> None:
        await conn.execute(
            f"UPDATE {self._sessions} AS s SET lease_owner = NULL, lease_expires = NULL, "
            "lease_pid = NULL, lease_host = NULL, lease_since = NULL "
            "FROM unnest($1::text[], $2::bigint[]) AS u(session_id, token) "
            "WHERE s.session_id = u.session_id AND s.lease_token = u.token "
            "AND s.lease_owner = $3",
            [lease.session_id for lease in leases],
            [lease.token for lease in leases],
            self._owner,
        )

    def _register(self, taken: _Taken) -> Lease:
        session_id, token, holder = taken
        lease = Lease(
            session_id=session_id,
            token=token,
            holder=holder,
            repaired=None,
            renew_every=self._renew_every,
            renew=self._renew_lease,
            release=self._release_lease,
        )
        self._held[session_id] = lease
        return lease

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

        async def run(pool: Any) -> tuple[int, list[Any]] | None:
            async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
                tail_from = await conn.fetchval(
                    f"SELECT tail_from FROM {self._sessions} WHERE session_id = $1", session_id
                )
                if tail_from is None:
                    return None
                start = tail_from if tail else 1
                rows = await conn.fetch(
                    f"SELECT seq, body FROM {self._records} WHERE session_id = $1 "
                    "AND (seq = 1 OR seq >= $2) ORDER BY seq",
                    session_id,
                    start,
                )
                return int(start), list(rows)

        found = await self._fetch_read(run, lambda: None)
        if found is None:
            raise SessionNotFound(f"no log for session {session_id!r}")
        start, rows = found
        where = f"{self._records}#{session_id}"
        pairs = ((row["seq"], row["body"]) for row in rows)
        return LogRead(records=decode_rows(pairs, where=where, tail_from=start))

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
                        self._dsn, min_size=self._min_size, max_size=self._max_size
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
                "ADD COLUMN IF NOT EXISTS lease_since timestamptz"
            )
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._records} ("
                "session_id text NOT NULL, seq bigint NOT NULL, body text NOT NULL, "
                "PRIMARY KEY (session_id, seq))"
            )


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
