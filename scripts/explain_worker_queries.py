"""The plans of the queries a worker runs, on a store seeded with many sessions.

    python scripts/explain_worker_queries.py --sessions 100000
    python scripts/explain_worker_queries.py --schema scale_1m --dsn .../stowage_scale

``--schema`` explains on a store ``scripts/seed_store.py`` seeded (real logs, nothing leased
or queued: each query's transaction leases four sessions and queues a message for 64 first,
and is rolled back); without it:

Seeds a fresh schema by COPY: ``--sessions`` sessions of 10 records, three answered messages
each, one session in a hundred with a message queued, one in twenty leased by a live worker,
and one long-lived session that answered 20,000 messages. Then ``EXPLAIN (ANALYZE, BUFFERS)``
of each query in a transaction rolled back (the writes are real, and undone): the claim, the
single-statement append, the inbox peek of the long session, a lease renewal, the read of a
log's tail, the metrics' queue depth and ``stowage workers``' listing. Prints each plan's scan
lines and times (``--full``: whole plans); the schema is dropped afterwards. Also the worker's
beat (its row in the workers table), the client's reads of a message's status and of its
answer's records.

Needs PostgreSQL (``--dsn``, default the tests' ``postgresql://postgres@127.0.0.1:5432/test``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))  # seed_store, a sibling script

DEFAULT_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
_KEY = ("Scan", "Execution Time", "Rows Removed", "LockRows", "Buffers: shared")


async def _seed(conn: Any, schema: str, sessions: int) -> None:
    def inbox(i: int) -> str:
        queued = [{"message_id": f"m{i}", "text": "hi"}] if i % 100 == 0 else []
        return orjson.dumps(queued).decode()

    await conn.copy_records_to_table(
        "stowage_sessions",
        schema_name=schema,
        columns=["session_id", "last_seq", "tail_from", "lease_token", "inbox"],
        records=[(f"s{i:06}", 10, 1, 0, inbox(i)) for i in range(sessions)],
    )
    await conn.copy_records_to_table(
        "stowage_records",
        schema_name=schema,
        columns=["session_id", "seq", "body"],
        records=[(f"s{i:06}", q, '{"type":"x"}') for i in range(sessions) for q in range(1, 11)],
    )
    answered = [
        (f"s{i:06}", f"old{i}-{k}", 2 + 3 * k, 4 + 3 * k, "answered")
        for i in range(sessions)
        for k in range(3)
    ]
    answered += [("s000100", f"long{k}", 20 + 3 * k, 22 + 3 * k, "answered") for k in range(20000)]
    await conn.copy_records_to_table(
        "stowage_messages",
        schema_name=schema,
        columns=["session_id", "message_id", "seq", "answered_seq", "status"],
        records=answered,
    )
    await conn.execute(
        f"UPDATE \"{schema}\".stowage_sessions SET lease_owner = 'w:1:x', lease_token = 1, "
        "lease_expires = now() + interval '1 hour', lease_pid = 1, lease_host = 'w', "
        "lease_since = now(), lease_renewed = now() WHERE session_id < $1",
        f"s{sessions // 20:06}",
    )
    for table in ("stowage_sessions", "stowage_records", "stowage_messages"):
        await conn.execute(f'ANALYZE "{schema}".{table}')


#: the sessions the queries name: (a long one, two appended to, two renewed)
_OWN_IDS = ("s000100", "s000100", "s000200", "s000001", "s000002")


def _seeded_ids(stored: int) -> tuple[str, ...]:
    from seed_store import session_id

    return tuple(session_id(n % stored) for n in (100, 100, 200, 1, 2))


def _setup(schema: str, ids: tuple[str, ...], queued: list[str]) -> list[tuple[str, list[Any]]]:
    """What each query's transaction does first: lease the named sessions to ``w:1:x``
    (token 1) and queue a message for ``queued`` (the claim's work)."""
    sessions = f'"{schema}".stowage_sessions'
    return [
        (
            f"UPDATE {sessions} SET lease_owner = 'w:1:x', lease_token = 1, lease_pid = 1, "
            "lease_host = 'w', lease_since = now(), lease_renewed = now(), "
            "lease_expires = now() + interval '1 hour' WHERE session_id = ANY($1::text[])",
            [list(ids)],
        ),
        (
            f'UPDATE {sessions} SET inbox = \'[{{"message_id": "q", "text": "hi"}}]\' '
            "WHERE session_id = ANY($1::text[])",
            [queued],
        ),
    ]


def _queries(
    schema: str, ids: tuple[str, ...], last_seqs: dict[str, int]
) -> list[tuple[str, str, list[Any]]]:
    import socket

    from stowage.storage._pg_append import fast_append_sql
    from stowage.storage._pg_inbox import InboxTables
    from stowage.storage._pg_workers import WorkerTable

    tables = InboxTables(schema)
    workers = WorkerTable(schema, tables.sessions)
    sessions, records = tables.sessions, f'"{schema}".stowage_records'
    long_one, a, b, c, d = ids
    # PostgresStore.claim_waiting's statement
    claim = (
        "WITH free AS (SELECT session_id, lease_owner AS was_owner, lease_pid AS was_pid, "
        f"lease_host AS was_host, lease_since AS was_since FROM {sessions} "
        "WHERE inbox <> '[]'::jsonb "
        "AND (lease_owner IS NULL OR lease_expires IS NULL OR lease_expires < now()) "
        "AND lease_owner IS DISTINCT FROM $1 "
        "ORDER BY session_id LIMIT $2 FOR UPDATE SKIP LOCKED) "
        f"UPDATE {sessions} AS s SET lease_owner = $1, lease_token = s.lease_token + 1, "
        "lease_expires = now() + make_interval(secs => 30), lease_renewed = now(), "
        "lease_pid = 2, lease_host = 'y', lease_since = now() "
        "FROM free WHERE s.session_id = free.session_id "
        "RETURNING s.session_id, s.lease_token, s.lease_since, "
        "free.was_owner, free.was_pid, free.was_host, free.was_since"
    )
    la, lb = last_seqs[a], last_seqs[b]
    append_args: list[Any] = [
        [a, b], [1, 1], [la, lb], [la + 2, lb + 2], [None, None], "w:1:x",
        [a, a, b, b], [la + 1, la + 2, lb + 1, lb + 2], ["{}", "{}", "{}", "{}"],
        [a], ["m100"], [la + 1], [None], [b], [lb + 2], "stowage_explain",
    ]  # fmt: skip
    return [
        ("claim 32 sessions", claim, ["me:2:y", 32]),
        (
            "append: 2 sessions, 2 records each; one logs a message, one finishes a turn",
            fast_append_sql(tables, records),
            append_args,
        ),
        ("peek the inbox of a session (the own store's: one with 20,000 answered messages)",
         tables.peek_sql("lease_token, lease_owner"), [long_one]),
        (
            "renew 2 leases",
            f"UPDATE {sessions} AS s SET lease_expires = now() + interval '30 s' "
            "FROM unnest($1::text[], $2::bigint[]) AS u(session_id, token) "
            "WHERE s.session_id = u.session_id AND s.lease_token = u.token "
            "AND s.lease_owner = $3 RETURNING s.session_id",
            [[c, d], [1, 1], "w:1:x"],
        ),
        (
            "read a log's tail",
            f"SELECT s.tail_from, r.seq, r.body FROM {sessions} AS s LEFT JOIN {records} AS r "
            "ON r.session_id = s.session_id AND (r.seq = 1 OR r.seq >= s.tail_from) "
            "WHERE s.session_id = $1 AND s.tail_from > 0 ORDER BY r.seq",
            [long_one],
        ),
        (
            "a message's status (the client's wait)",
            f"SELECT status, seq, answered_seq, reason FROM {tables.messages} "
            "WHERE session_id = $1 AND message_id = $2",
            [a, "m100"],
        ),
        (
            "the records of an answer (the client's read_range)",
            f"SELECT seq, body FROM {records} WHERE session_id = $1 "
            "AND seq BETWEEN $2 AND $3 ORDER BY seq",
            [a, max(1, la - 3), la],
        ),
        (
            "a worker's beat (its row in the workers table)",
            workers.beat_sql(),
            ["w:1:x", 1, socket.gethostname(), 30.0, 1234],
        ),
        (
            "queue depth (metrics)",
            "SELECT coalesce(sum(jsonb_array_length(inbox)), 0), count(*) "
            f"FROM {sessions} WHERE inbox <> '[]'::jsonb",
            [],
        ),
        ("live workers (stowage workers)", workers.list_sql(), []),
    ]  # fmt: skip


async def _main(args: argparse.Namespace) -> None:
    import asyncpg
    from stowage.storage import PostgresStore

    seeded = args.schema is not None
    schema = args.schema or f"explain_{secrets.token_hex(4)}"
    store = PostgresStore(args.dsn, schema=schema)
    await store.connect()  # the tables and indexes, as a worker makes them
    await store.aclose()
    conn = await asyncpg.connect(args.dsn)
    try:
        if seeded:
            stored = await conn.fetchval(f'SELECT count(*) FROM "{schema}".stowage_sessions')
            ids = _seeded_ids(stored)
            print(f"schema {schema}: {stored:,} sessions seeded by seed_store.py")
        else:
            ids = _OWN_IDS
            began = time.perf_counter()
            await _seed(conn, schema, args.sessions)
            print(f"seeded {args.sessions:,} sessions in {time.perf_counter() - began:.1f} s")
        rows = await conn.fetch(
            f'SELECT session_id, last_seq FROM "{schema}".stowage_sessions '
            "WHERE session_id = ANY($1::text[])",
            list(ids),
        )
        last_seqs = {row["session_id"]: int(row["last_seq"]) for row in rows}
        queued = [
            row["session_id"]
            for row in await conn.fetch(
                f'SELECT session_id FROM "{schema}".stowage_sessions '
                "WHERE NOT (session_id = ANY($1::text[])) ORDER BY session_id OFFSET 1000 LIMIT 64",
                list(ids),
            )
        ]
        for title, query, params in _queries(schema, ids, last_seqs):
            transaction = conn.transaction()
            await transaction.start()
            try:
                for setup, setup_params in _setup(schema, ids, queued):
                    await conn.execute(setup, *setup_params)
                rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + query, *params)
            finally:
                await transaction.rollback()
            print(f"\n--- {title}")
            for row in rows:
                line = row[0]
                if args.full or any(key in line for key in _KEY):
                    print("   ", line)
    finally:
        if not seeded:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--full", action="store_true", help="print whole plans")
    parser.add_argument(
        "--schema", default=None, help="a schema seed_store.py seeded (kept; nothing is seeded)"
    )
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
