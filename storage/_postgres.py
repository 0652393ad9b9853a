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

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import orjson
from anyio.streams.memory import MemoryObjectReceiveStream
from stowage.core import (
    ConfigError,
    CorruptLogError,
    FencingError,
    LeaseHolder,
    Record,
    SessionExists,
    SessionNotFound,
    StoreError,
    validate_session_id,
)

from ._codec import decode_record
from ._lease import Lease, LeaseRow, Taken, lease_times, new_owner, now_holder
from ._pg_append import fast_append_sql, plan_fast
from ._pg_inbox import InboxTables, decode_entries, messages_logged, queued_status
from ._pg_leases import LEASE_COLUMNS, LeaseStatements, lease_row
from ._pg_partitions import MIGRATE_BATCH, migrate_to_partitions, partition_count
from ._pg_pool import PgPool, core_ddl
from ._pg_pool import resolve_schema as resolve_schema
from ._pg_queries import ArchiveTables, PgQueries
from ._pg_workers import WorkerTable
from ._sql import check_continues, plan_batch, plan_sessions
from ._sql_leases import HeldLeases
from ._sql_store import SqlStoreBase

__all__ = ["PostgresStore"]


class PostgresStore(SqlStoreBase):
    """Session logs in ``<schema>.stowage_records`` and ``<schema>.stowage_sessions``; records
    that old compactions cover may move to ``stowage_records_archive`` (``archive``), which
    every read but resume's reads with them (see ``_archive``; the flows are ``_sql_store``'s
    over ``_pg_queries``).

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
        self._schema = schema
        self._records = f'"{schema}".stowage_records'
        self._sessions = f'"{schema}".stowage_sessions'
        self._inbox = InboxTables(schema)
        self._workers = WorkerTable(schema, self._sessions)
        self._tables = ArchiveTables(
            self._sessions, self._records, f'"{schema}".stowage_records_archive'
        )
        self._fast_append = fast_append_sql(self._inbox, self._records)
        self._db = PgPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            name=repr(self),
            ddl=[
                *core_ddl(schema, self._sessions, self._records),
                self._tables.ddl(),  # covered records moved out of the way
                *self._inbox.ddl(),  # the message ids the logs hold
                self._workers.ddl(),  # who is up, idle workers too
            ],
        )
        owner = new_owner()
        self._lease_sql = LeaseStatements(self._sessions, owner=owner, ttl=self._ttl)
        self._leases = HeldLeases(
            owner=owner,
            renew_every=self._renew_every,
            where=self._sessions,
            dead_pid_frees=False,
            extend=self._extend_one,
            free=self._free_all,
        )
        self._queries: PgQueries = PgQueries(db=self._db, tables=self._tables)

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
        held = self._leases.get(session_id)
        if held is not None and not held.lost and not held.handed_out:
            # a lease a claim (or a write) took: extending it under its token, in one
            # statement, is the check; only when that fails is the row read and judged
            async with self._db.connection() as conn:
                if session_id in await self._lease_sql.extend(conn, [held]):
                    return self._leases.hand_out(held)
        got: Lease | Taken
        async with self._db.connection(transaction=True) as conn:
            row = await self._lease_sql.lock(conn, session_id)
            if row is None:
                raise self._queries.no_log(session_id)
            reused = self._leases.reusable(session_id, lease_row(row))
            if reused is not None:  # a lease a write took: the caller's now
                await self._lease_sql.extend(conn, [reused])
                got = reused
            else:
                got = await self._take(conn, session_id, lease_row(row))
        return self._leases.hand_out(got)

    async def connect(self) -> None:
        """Open the pool and make the tables if missing, now rather than at the first write:
        what a worker does before it says it is ready. Raises ``StoreError``."""
        await self._db.get(write=True)

    async def renew_leases(self) -> list[str]:
        """Renew every lease this store holds in one statement; returns the ids of those lost
        to another worker, sorted."""
        live = self._leases.live()
        renewed: set[str] = set()
        if live:
            async with self._db.connection() as conn:
                renewed = await self._lease_sql.extend(conn, live)
        return self._leases.renewed(live, renewed)

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """Start a log and hold its lease; raises ``InvalidSessionId``, ``SessionExists``,
        ``StoreError``."""
        batch = plan_batch(session_id, records, create=True)
        held = self._leases.get(session_id) is not None
        async with self._db.connection(transaction=True) as conn:
            # a row with messages queued before its log existed (tail_from 0) becomes it
            row = await conn.fetchrow(
                f"INSERT INTO {self._sessions} AS s (session_id, last_seq, tail_from) "
                "VALUES ($1, $2, $3) ON CONFLICT (session_id) DO UPDATE "
                "SET last_seq = EXCLUDED.last_seq, tail_from = EXCLUDED.tail_from "
                f"WHERE s.tail_from = 0 RETURNING (xmax <> 0) AS queued, {LEASE_COLUMNS}",
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
                if self._leases.check_write(session_id, lease_row(row)):
                    taken = await self._lease_sql.take(conn, session_id)
            elif not held:
                taken = await self._lease_sql.take(conn, session_id)
            await self._insert(conn, batch.rows)
        if taken is not None:
            self._leases.grant(taken)

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
        fast = plan_fast(planned, self._leases.tokens(planned), messages_logged(batches))
        written: set[str] = set()
        if fast is not None:
            arguments = fast.arguments(self._leases.owner, self._inbox.answers_channel)
            rows = await self._db.write(lambda pool: pool.fetch(self._fast_append, *arguments))
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
        """``append_batches`` in one transaction that checks the locked rows it reads back."""
        planned, outcomes = plan_sessions(batches)
        if not planned:
            return outcomes
        messages = messages_logged(batches)  # user items with a message id, finished turns
        ids = sorted(planned)  # one lock order for all workers
        taken: list[Taken] = []
        async with self._db.connection(transaction=True) as conn:
            rows = await conn.fetch(
                f"SELECT session_id, last_seq, tail_from, {LEASE_COLUMNS} "
                f"FROM {self._sessions} WHERE session_id = ANY($1::text[]) "
                "ORDER BY session_id FOR UPDATE",
                ids,
            )
            by_id = {row["session_id"]: row for row in rows}
            logged_before = await self._inbox.already_logged(conn, messages)
            to_take: list[str] = []
            state: dict[str, list[int]] = {}  # session_id -> [last_seq, tail_from]
            inserts: list[tuple[str, int, str]] = []
            for session_id in ids:
                row = by_id.get(session_id)
                try:
                    if row is None or row["tail_from"] == 0:  # 0: messages, no log yet
                        raise self._queries.no_log(session_id)
                    take = self._leases.check_write(session_id, lease_row(row))
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
                if take:
                    to_take.append(session_id)
                state[session_id] = [last_seq, tail_from]
                for batch in planned[session_id]:
                    inserts += batch.rows
            for session_id in to_take:
                taken.append(await self._lease_sql.take(conn, session_id))
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
        for each in taken:
            self._leases.grant(each)
        return outcomes

    async def lease_holder(self, session_id: str) -> LeaseHolder | None:
        """Who holds the session's lease (see ``LogStore.lease_holder``): a live, unexpired
        grant; a dead pid frees nothing here (another machine's pid cannot be checked). Raises
        ``InvalidSessionId``."""
        validate_session_id(session_id)
        row = await self._db.read(
            lambda pool: pool.fetchrow(
                f"SELECT {LEASE_COLUMNS} FROM {self._sessions} WHERE session_id = $1", session_id
            ),
            lambda: None,
        )
        return None if row is None else self._leases.holder_of(lease_row(row))

    async def last_seqs(self) -> dict[str, int]:
        """Each session's newest seq, in one query: what a watcher polls to see appends
        (the console) without reading any log. Raises ``StoreError``."""
        rows = await self._db.read(
            lambda pool: pool.fetch(
                f"SELECT session_id, last_seq FROM {self._sessions} WHERE tail_from > 0"
            ),
            list,
        )
        return {row["session_id"]: int(row["last_seq"]) for row in rows}

    async def aclose(self) -> None:
        """Release every lease this store holds, then close the pool; later calls raise
        ``StoreError``."""
        live = self._leases.close()

        async def free(conn: Any) -> None:
            await self._lease_sql.free(conn, live)

        await self._db.close(free if live else None)  # the leases expire if that fails

    # -- inbox ------------------------------------------------------------------------------

    async def push_inbox(self, session_id: str, message: Mapping[str, Any]) -> None:
        """Queue a message (say, user input) for whichever worker runs the session next."""
        validate_session_id(session_id)
        found = await self._db.write(
            lambda pool: pool.fetchval(
                f"UPDATE {self._sessions} SET inbox = inbox || jsonb_build_array($2::jsonb) "
                "WHERE session_id = $1 RETURNING 1",
                session_id,
                orjson.dumps(dict(message)).decode(),
            )
        )
        if found is None:
            raise self._queries.no_log(session_id)

    async def take_inbox(self, session_id: str) -> list[dict[str, Any]]:
        """Empty the inbox of a session this store holds the lease of; raises ``FencingError``
        if it holds none or the lease passed to another worker."""
        validate_session_id(session_id)
        lease = self._leases.require(session_id)
        async with self._db.connection(transaction=True) as conn:
            row = await self._lease_sql.lock(conn, session_id, also="inbox, ")
            if row is None:
                raise self._queries.no_log(session_id)
            self._leases.check(lease, lease_row(row))
            await conn.execute(
                f"UPDATE {self._sessions} SET inbox = '[]'::jsonb WHERE session_id = $1", session_id
            )
        messages: list[dict[str, Any]] = orjson.loads(row["inbox"])
        return messages

    async def claim_sessions(self, *, limit: int) -> list[Lease]:
        """Lease up to ``limit`` sessions that have input waiting and no live lease, skipping
        rows other workers are claiming right now; returns the leases, by session id."""
        claimed = await self._db.write(
            lambda pool: self._lease_sql.claim(pool, limit=limit, others_only=False)
        )
        return [self._leases.hand_out(taken) for taken, _ in claimed]

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
        async with self._db.connection(transaction=True) as conn:
            outcome = await self._inbox.push(conn, session_id, message, create=create)
        if outcome == "missing":
            raise self._queries.no_log(session_id)
        return outcome == "queued"

    async def peek_inbox(self, session_id: str) -> list[tuple[dict[str, Any], str | None]]:
        """The queued entries of a session this store holds the lease of, in order, each with
        the status of its message id when the log holds it (``logged``: its turn has not
        finished; ``answered``; ``failed``), else None. Raises ``FencingError`` when this store
        holds no lease for it or lost it, ``SessionNotFound``, ``StoreError``."""
        validate_session_id(session_id)
        lease = self._leases.require(session_id)
        peek = self._inbox.peek_sql(LEASE_COLUMNS)
        row = await self._db.write(lambda pool: pool.fetchrow(peek, session_id))
        if row is None:
            raise SessionNotFound(f"no session {session_id!r}")
        self._leases.check(lease, lease_row(row))
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
        lease = self._leases.require(session_id)
        async with self._db.connection(transaction=True) as conn:
            row = await self._lease_sql.lock(conn, session_id)
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}")
            self._leases.check(lease, lease_row(row))
            await self._inbox.drop(conn, session_id, entries, reason)

    async def claim_waiting(self, *, limit: int) -> list[tuple[str, LeaseHolder | None]]:
        """Take the lease of up to ``limit`` sessions with input queued and no live lease (not
        this store's), skipping rows other workers are claiming (``FOR UPDATE SKIP LOCKED``).

        Unlike ``claim_sessions`` the leases are not handed out: the runtime that opens the
        session takes each with ``acquire``, and until then appends use it. Returns the session
        ids, each with the holder whose lease had expired (a takeover) or None. Raises
        ``StoreError``.
        """
        claimed = await self._db.write(
            lambda pool: self._lease_sql.claim(pool, limit=limit, others_only=True)
        )
        for taken, _ in claimed:
            self._leases.grant(taken)
        return [(taken[0], previous) for taken, previous in claimed]

    async def release(self, session_id: str) -> None:
        """Give back the session's lease if this store holds it (handed out or not); nothing
        otherwise. Raises ``StoreError``."""
        lease = self._leases.get(validate_session_id(session_id))
        if lease is not None:
            await lease.release()

    async def live_workers(self) -> list[dict[str, Any]]:
        """The live workers (their ``beat`` rows) and every other holder of live leases, one
        per store object: ``owner``, ``pid``, ``host``, ``sessions`` held, ``since`` (its
        oldest grant, else when it started), ``renewed`` (its newest beat or renewal),
        ``rounds_per_s`` (between its last two beats, else None); see ``_pg_workers``.
        Raises ``StoreError``."""
        rows = await self._db.read(lambda pool: pool.fetch(self._workers.list_sql()), list)
        return [dict(row) for row in rows]

    @property
    def renew_every(self) -> float:
        """Seconds between lease renewals (and a worker's beats)."""
        return self._renew_every

    async def beat(self, rounds: int) -> None:
        """Say this store's worker is up, with ``rounds`` committed so far, for a lease TTL:
        one statement (see ``_pg_workers``). Raises ``StoreError``."""
        holder = now_holder(self._leases.owner)
        arguments = (self._leases.owner, holder.pid, holder.host, self._ttl, rounds)
        await self._db.write(lambda pool: pool.execute(self._workers.beat_sql(), *arguments))

    async def leave(self) -> None:
        """Delete this store's worker row (a worker stopping). Raises ``StoreError``."""
        owner = self._leases.owner
        await self._db.write(lambda pool: pool.execute(self._workers.leave_sql(), owner))

    async def queue_depth(self) -> tuple[int, int]:
        """Messages queued in the store (not answered yet, in flight included) and the
        sessions they wait in: one count over the waiting sessions' index. Raises
        ``StoreError``."""
        row = await self._db.read(
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

        found: dict[str, Any] | None = await self._db.read(run, lambda: None)
        return found

    async def read_range(self, session_id: str, first: int, last: int) -> tuple[Record, ...]:
        """The records with ``first <= seq <= last``, in order. Raises ``CorruptLogError`` for a
        bad row or a gap, ``StoreError``."""
        validate_session_id(session_id)
        rows = await self._queries.logged(
            lambda records: f"SELECT seq, body FROM {records} AS r ORDER BY seq",
            "session_id = $1 AND seq BETWEEN $2 AND $3",
            session_id,
            first,
            last,
        )
        where = self._queries.where(session_id)
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

    async def missing(self) -> str | None:
        """What of the store does not exist yet: its database, its schema, or the tables in
        it (a writer makes the schema and tables on first use; the database is the
        server's); None when the store exists. Creates nothing. Raises ``StoreError`` for
        any other failure (a server that is down, a refused password)."""
        try:
            pool = await self._db.get(write=False)
        except StoreError as exc:
            if isinstance(exc.__cause__, self._db.pg.InvalidCatalogNameError):
                return "database"
            raise
        with self._db.mapped():
            schema, table = await pool.fetchrow(
                "SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
                f'"{self._schema}"',
                self._sessions,
            )
        if not schema:
            return "schema"
        return None if table else "tables"

    async def partitions(self) -> int:
        """How many hash partitions (by session) the records table has: 0 when it is a plain
        table or does not exist yet. Raises ``StoreError``."""
        pool = await self._db.get(write=False)
        with self._db.mapped():
            async with pool.acquire() as conn:
                return await partition_count(conn, self._schema)

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
        return await self._db.write(
            lambda pool: migrate_to_partitions(
                pool, self._schema, count, batch=batch, on_progress=on_progress
            )
        )

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
        async with self._db.listen(channel, buffer=buffer) as receive:
            yield receive

    # -- leases -----------------------------------------------------------------------------

    async def _take(self, conn: Any, session_id: str, row: LeaseRow) -> Taken:
        """Grant this store the lease (the row is locked); ``SessionBusy`` if another holds it."""
        self._leases.check_free(session_id, row)
        return await self._lease_sql.take(conn, session_id)

    async def _extend_one(self, lease: Lease) -> None:
        async with self._db.connection() as conn:
            renewed = await self._lease_sql.extend(conn, [lease])
        if lease.session_id not in renewed:
            lease.lost = True
            raise FencingError(
                f"session {lease.session_id!r}: lease {lease.token} was lost to another worker"
            )

    async def _free_all(self, leases: Sequence[Lease]) -> None:
        async with self._db.connection() as conn:
            await self._lease_sql.free(conn, leases)

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
