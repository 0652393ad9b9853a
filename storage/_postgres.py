"""The store many workers share: PostgreSQL through an asyncpg pool, with leases and fencing.

A worker owns a session while it holds its lease; each lease grant bumps ``lease_token``. An
append may carry the token it was granted, checked under the session row's lock in the same
transaction as the insert, so a worker whose lease has passed to another cannot write even if
it wakes up late (``FencingError``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped]
import orjson
from stowage.core import (
    ConfigError,
    FencingError,
    LogRead,
    Record,
    SessionExists,
    SessionNotFound,
    StoreError,
    validate_session_id,
)

from ._sql import check_continues, decode_rows, plan_batch

__all__ = ["PostgresStore"]

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_STORE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


class PostgresStore:
    """Session logs in ``<schema>.stowage_records`` and ``<schema>.stowage_sessions``.

    The pool opens on first use and the tables are created if missing. Every commit is durable
    per the server's ``synchronous_commit``. Raises ``ConfigError`` for a bad schema name.
    """

    def __init__(
        self, dsn: str, *, schema: str = "public", min_size: int = 1, max_size: int = 10
    ) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigError(f"schema {schema!r} must be lower-case letters, digits and '_'")
        self._dsn = dsn
        self._schema = schema
        self._records = f'"{schema}".stowage_records'
        self._sessions = f'"{schema}".stowage_sessions'
        self._min_size, self._max_size = min_size, max_size
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = anyio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self._schema!r})"  # the dsn may hold a password

    # -- LogStore ---------------------------------------------------------------------------

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """Start a log; raises ``InvalidSessionId``, ``SessionExists``, ``StoreError``."""
        batch = plan_batch(session_id, records, create=True)
        pool = await self._get_pool()
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
                except asyncpg.UniqueViolationError:
                    raise SessionExists(f"session {session_id!r} already exists") from None
                await self._insert(conn, batch.rows)
        except _STORE_ERRORS as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def append(
        self, session_id: str, records: Sequence[Record], *, fencing_token: int | None = None
    ) -> None:
        """Append one batch; raises ``SessionNotFound``, ``StoreError`` on a seq gap, and
        ``FencingError`` when ``fencing_token`` is not the session's current lease token."""
        tokens = None if fencing_token is None else {session_id: fencing_token}
        await self.append_batches(((session_id, records),), fencing_tokens=tokens)

    async def append_batches(
        self,
        batches: Sequence[tuple[str, Sequence[Record]]],
        *,
        fencing_tokens: Mapping[str, int] | None = None,
    ) -> None:
        """Append every batch in one transaction; all or nothing. Raises like ``append``."""
        planned = [plan_batch(session_id, records) for session_id, records in batches]
        if not planned:
            return
        ids = sorted({batch.session_id for batch in planned})  # one lock order for all workers
        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    f"SELECT session_id, last_seq, tail_from, lease_token FROM {self._sessions} "
                    "WHERE session_id = ANY($1::text[]) ORDER BY session_id FOR UPDATE",
                    ids,
                )
                state = {row["session_id"]: [row["last_seq"], row["tail_from"]] for row in rows}
                leases = {row["session_id"]: row["lease_token"] for row in rows}
                for session_id in ids:
                    if session_id not in state:
                        raise SessionNotFound(f"no log for session {session_id!r}")
                for session_id, token in (fencing_tokens or {}).items():
                    if session_id in leases and leases[session_id] != token:
                        raise FencingError(
                            f"session {session_id!r}: fencing token {token} is stale "
                            f"(the lease is at {leases[session_id]})"
                        )
                inserts: list[tuple[str, int, str]] = []
                for batch in planned:
                    check_continues(batch, state[batch.session_id][0])
                    if batch.last_seq is not None:
                        state[batch.session_id][0] = batch.last_seq
                    if batch.tail_from is not None:
                        state[batch.session_id][1] = batch.tail_from
                    inserts += batch.rows
                if not inserts:
                    return
                await self._insert(conn, inserts)
                await conn.execute(
                    f"UPDATE {self._sessions} AS s SET last_seq = u.last_seq, "
                    "tail_from = u.tail_from FROM unnest($1::text[], $2::bigint[], $3::bigint[]) "
                    "AS u(session_id, last_seq, tail_from) WHERE s.session_id = u.session_id",
                    list(state),
                    [v[0] for v in state.values()],
                    [v[1] for v in state.values()],
                )
        except _STORE_ERRORS as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def read(self, session_id: str) -> LogRead:
        """Every record; raises ``SessionNotFound``, ``CorruptLogError``."""
        return await self._read(session_id, tail=False)

    async def read_tail(self, session_id: str) -> LogRead:
        """The session record and every record from the newest compaction's covers_through + 1."""
        return await self._read(session_id, tail=True)

    async def exists(self, session_id: str) -> bool:
        """Whether the session has a log; raises ``InvalidSessionId``."""
        validate_session_id(session_id)
        found = await self._fetchval(
            f"SELECT 1 FROM {self._sessions} WHERE session_id = $1", session_id
        )
        return found is not None

    async def list_sessions(self) -> list[str]:
        """Every session id, sorted (by code point, not by the database's collation)."""
        pool = await self._get_pool()
        try:
            rows = await pool.fetch(f"SELECT session_id FROM {self._sessions}")
        except _STORE_ERRORS as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        return sorted(row["session_id"] for row in rows)

    async def aclose(self) -> None:
        """Close the pool; later calls raise ``StoreError``."""
        async with self._pool_lock:
            self._closed = True
            if self._pool is not None:
                pool, self._pool = self._pool, None
                await pool.close()

    # -- leases and inbox -------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> int | None:
        """Take the session's lease for ``ttl`` seconds if it is free, expired or ``owner``'s.

        Returns the new fencing token, or ``None`` when another owner holds a live lease.
        Raises ``SessionNotFound`` for an unknown session.
        """
        validate_session_id(session_id)
        token = await self._fetchval(
            f"UPDATE {self._sessions} SET lease_owner = $2, lease_token = lease_token + 1, "
            "lease_expires = now() + make_interval(secs => $3) WHERE session_id = $1 AND "
            "(lease_expires IS NULL OR lease_expires < now() OR lease_owner = $2) "
            "RETURNING lease_token",
            session_id,
            owner,
            float(ttl),
        )
        if token is None and not await self.exists(session_id):
            raise SessionNotFound(f"no log for session {session_id!r}")
        return None if token is None else int(token)

    async def renew_lease(self, session_id: str, token: int, ttl: float) -> bool:
        """Extend a lease still held under ``token``; ``False`` if it has been lost."""
        validate_session_id(session_id)
        renewed = await self._fetchval(
            f"UPDATE {self._sessions} SET lease_expires = now() + make_interval(secs => $3) "
            "WHERE session_id = $1 AND lease_token = $2 AND lease_expires >= now() "
            "RETURNING 1",
            session_id,
            token,
            float(ttl),
        )
        return renewed is not None

    async def release_lease(self, session_id: str, token: int) -> None:
        """Give a lease up so another worker can claim the session at once."""
        validate_session_id(session_id)
        await self._fetchval(
            f"UPDATE {self._sessions} SET lease_owner = NULL, lease_expires = NULL "
            "WHERE session_id = $1 AND lease_token = $2",
            session_id,
            token,
        )

    async def push_inbox(self, session_id: str, message: Mapping[str, Any]) -> None:
        """Queue a message (say, user input) for whichever worker runs the session next."""
        validate_session_id(session_id)
        found = await self._fetchval(
            f"UPDATE {self._sessions} SET inbox = inbox || jsonb_build_array($2::jsonb) "
            "WHERE session_id = $1 RETURNING 1",
            session_id,
            orjson.dumps(dict(message)).decode(),
        )
        if found is None:
            raise SessionNotFound(f"no log for session {session_id!r}")

    async def take_inbox(self, session_id: str, token: int) -> list[dict[str, Any]]:
        """Empty the inbox of a session leased under ``token``; raises ``FencingError`` if the
        lease is no longer ours."""
        validate_session_id(session_id)
        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(
                    f"SELECT inbox, lease_token FROM {self._sessions} "
                    "WHERE session_id = $1 FOR UPDATE",
                    session_id,
                )
                if row is None:
                    raise SessionNotFound(f"no log for session {session_id!r}")
                if row["lease_token"] != token:
                    raise FencingError(f"session {session_id!r}: fencing token {token} is stale")
                await conn.execute(
                    f"UPDATE {self._sessions} SET inbox = '[]'::jsonb WHERE session_id = $1",
                    session_id,
                )
        except _STORE_ERRORS as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        messages: list[dict[str, Any]] = orjson.loads(row["inbox"])
        return messages

    async def claim_sessions(self, owner: str, *, limit: int, ttl: float) -> list[tuple[str, int]]:
        """Lease up to ``limit`` sessions that have input waiting and no live lease, skipping rows
        other workers are claiming right now; returns ``(session_id, fencing_token)`` pairs."""
        pool = await self._get_pool()
        try:
            rows = await pool.fetch(
                f"WITH free AS (SELECT session_id FROM {self._sessions} "
                "WHERE inbox <> '[]'::jsonb AND (lease_expires IS NULL OR lease_expires < now()) "
                "ORDER BY session_id LIMIT $2 FOR UPDATE SKIP LOCKED) "
                f"UPDATE {self._sessions} AS s SET lease_owner = $1, "
                "lease_token = s.lease_token + 1, "
                "lease_expires = now() + make_interval(secs => $3) "
                "FROM free WHERE s.session_id = free.session_id "
                "RETURNING s.session_id, s.lease_token",
                owner,
                limit,
                float(ttl),
            )
        except _STORE_ERRORS as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        return sorted((row["session_id"], int(row["lease_token"])) for row in rows)

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
        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
                tail_from = await conn.fetchval(
                    f"SELECT tail_from FROM {self._sessions} WHERE session_id = $1", session_id
                )
                if tail_from is None:
                    raise SessionNotFound(f"no log for session {session_id!r}")
                start = tail_from if tail else 1
                rows = await conn.fetch(
                    f"SELECT seq, body FROM {self._records} WHERE session_id = $1 "
                    "AND (seq = 1 OR seq >= $2) ORDER BY seq",
                    session_id,
                    start,
                )
        except _STORE_ERRORS as exc:
            raise StoreError(f"postgres store: {exc}") from exc
        where = f"{self._records}#{session_id}"
        pairs = ((row["seq"], row["body"]) for row in rows)
        return LogRead(records=decode_rows(pairs, where=where, tail_from=start))

    async def _fetchval(self, query: str, *args: Any) -> Any:
        pool = await self._get_pool()
        try:
            return await pool.fetchval(query, *args)
        except _STORE_ERRORS as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def _get_pool(self) -> asyncpg.Pool:
        async with self._pool_lock:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            if self._pool is None:
                try:
                    pool = await asyncpg.create_pool(
                        self._dsn, min_size=self._min_size, max_size=self._max_size
                    )
                    await self._ensure_schema(pool)
                except _STORE_ERRORS as exc:
                    raise StoreError(f"cannot open postgres store: {exc}") from exc
                self._pool = pool
            return self._pool

    async def _ensure_schema(self, pool: asyncpg.Pool) -> None:
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
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._records} ("
                "session_id text NOT NULL, seq bigint NOT NULL, body text NOT NULL, "
                "PRIMARY KEY (session_id, seq))"
            )
