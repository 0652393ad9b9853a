"""The plans of the queries a worker runs, on a store seeded with many sessions.

    python scripts/explain_worker_queries.py --sessions 100000

Seeds a fresh schema by COPY: ``--sessions`` sessions of 10 records, three answered messages
each, one session in a hundred with a message queued, one in twenty leased by a live worker,
and one long-lived session that answered 20,000 messages. Then ``EXPLAIN (ANALYZE, BUFFERS)``
of each query in a transaction rolled back (the writes are real, and undone): the claim, the
single-statement append, the inbox peek of the long session, a lease renewal, the read of a
log's tail, the metrics' queue depth and ``stowage workers``' listing. Prints each plan's scan
lines and times (``--full``: whole plans); the schema is dropped afterwards.

Needs PostgreSQL (``--dsn``, default the tests' ``postgresql://postgres@127.0.0.1:5432/test``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import time
from typing import Any

import orjson

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


def _queries(schema: str) -> list[tuple[str, str, list[Any]]]:
    from stowage.storage._pg_append import fast_append_sql
    from stowage.storage._pg_inbox import InboxTables

    tables = InboxTables(schema)
    sessions, records = tables.sessions, f'"{schema}".stowage_records'
    claim = (
        f"WITH free AS (SELECT session_id FROM {sessions} WHERE inbox <> '[]'::jsonb "
        "AND (lease_owner IS NULL OR lease_expires IS NULL OR lease_expires < now()) "
        "AND lease_owner IS DISTINCT FROM $1 ORDER BY session_id LIMIT $2 "
        f"FOR UPDATE SKIP LOCKED) UPDATE {sessions} AS s SET lease_owner = $1, "
        "lease_token = s.lease_token + 1, lease_expires = now() + interval '30 s' "
        "FROM free WHERE s.session_id = free.session_id RETURNING s.session_id"
    )
    two = ["s000100", "s000200"]
    append_args: list[Any] = [
        two, [1, 1], [10, 10], [12, 12], [None, None], "w:1:x",
        [two[0], two[0], two[1], two[1]], [11, 12, 11, 12], ["{}", "{}", "{}", "{}"],
        [two[0]], ["m100"], [11], [None], [two[1]], [12], "stowage_explain",
    ]  # fmt: skip
    return [
        ("claim 32 sessions", claim, ["me:2:y", 32]),
        (
            "append: 2 sessions, 2 records each; one logs a message, one finishes a turn",
            fast_append_sql(tables, records),
            append_args,
        ),
        ("peek the inbox of a session with 20,000 answered messages",
         tables.peek_sql("lease_token, lease_owner"), ["s000100"]),
        (
            "renew 2 leases",
            f"UPDATE {sessions} AS s SET lease_expires = now() + interval '30 s' "
            "FROM unnest($1::text[], $2::bigint[]) AS u(session_id, token) "
            "WHERE s.session_id = u.session_id AND s.lease_token = u.token "
            "AND s.lease_owner = $3 RETURNING s.session_id",
            [["s000001", "s000002"], [1, 1], "w:1:x"],
        ),
        (
            "read a log's tail",
            f"SELECT s.tail_from, r.seq, r.body FROM {sessions} AS s LEFT JOIN {records} AS r "
            "ON r.session_id = s.session_id AND (r.seq = 1 OR r.seq >= s.tail_from) "
            "WHERE s.session_id = $1 AND s.tail_from > 0 ORDER BY r.seq",
            ["s000100"],
        ),
        (
            "queue depth (metrics)",
            "SELECT coalesce(sum(jsonb_array_length(inbox)), 0), count(*) "
            f"FROM {sessions} WHERE inbox <> '[]'::jsonb",
            [],
        ),
        (
            "live workers (stowage workers)",
            "SELECT lease_owner, lease_pid, lease_host, count(*), max(lease_renewed) "
            f"FROM {sessions} WHERE lease_owner IS NOT NULL AND lease_expires > now() "
            "GROUP BY 1, 2, 3",
            [],
        ),
    ]  # fmt: skip


async def _main(args: argparse.Namespace) -> None:
    import asyncpg
    from stowage.storage import PostgresStore

    schema = f"explain_{secrets.token_hex(4)}"
    store = PostgresStore(args.dsn, schema=schema)
    await store.connect()  # the tables and indexes, as a worker makes them
    await store.aclose()
    conn = await asyncpg.connect(args.dsn)
    try:
        began = time.perf_counter()
        await _seed(conn, schema, args.sessions)
        print(f"seeded {args.sessions:,} sessions in {time.perf_counter() - began:.1f} s")
        for title, query, params in _queries(schema):
            transaction = conn.transaction()
            await transaction.start()
            try:
                rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + query, *params)
            finally:
                await transaction.rollback()
            print(f"\n--- {title}")
            for row in rows:
                line = row[0]
                if args.full or any(key in line for key in _KEY):
                    print("   ", line)
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--full", action="store_true", help="print whole plans")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
