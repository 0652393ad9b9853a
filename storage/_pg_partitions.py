"""Hash-partitioning PostgreSQL's records table by session, on an operator's word.

``stowage migrate --partitions N`` turns ``stowage_records`` into a table ``PARTITION BY HASH
(session_id)`` with ``N`` partitions. Its key, ``(session_id, seq)``, holds the partition key,
as PostgreSQL requires of a partitioned table's unique constraints, so nothing else changes:
every statement of the store names the parent table and reads and writes as before.

How, without stopping the workers for the whole copy:

1. ``stowage_records_migrating`` is made with its ``N`` partitions (``stowage_records_p0`` …),
   after dropping what an interrupted run left of it.
2. Rows are copied in batches in key order (``(session_id, seq)`` keyset), each batch its own
   transaction; appends and archiving go on meanwhile.
3. One transaction locks ``stowage_records`` (``ACCESS EXCLUSIVE``: appends wait, seconds at
   most), copies the rows written since and drops the rows moved to the archive since, swaps
   the names, drops the old table, renames its key to ``stowage_records_pkey`` and makes again
   any other index the old table had. A crash before its commit leaves the old table whole.

A table with ``N`` partitions already: nothing to do. With another count: refused (a change
of count is a new migration of a partitioned table, not done here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stowage.core import ConfigError

__all__ = ["MIGRATE_BATCH", "migrate_to_partitions", "partition_count"]

#: rows one copy transaction moves
MIGRATE_BATCH = 20_000

_TABLE = "stowage_records"
_NEW = "stowage_records_migrating"
_OLD = "stowage_records_unpartitioned"


async def partition_count(conn: Any, schema: str) -> int:
    """Partitions of ``<schema>.stowage_records``: 0 for a plain table or none at all."""
    row = await conn.fetchrow(
        "SELECT c.oid, p.partrelid IS NOT NULL AS partitioned FROM pg_class AS c "
        "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_partitioned_table AS p ON p.partrelid = c.oid "
        "WHERE n.nspname = $1 AND c.relname = $2",
        schema,
        _TABLE,
    )
    if row is None or not row["partitioned"]:
        return 0
    return int(
        await conn.fetchval("SELECT count(*) FROM pg_inherits WHERE inhparent = $1", row["oid"])
    )


async def migrate_to_partitions(
    pool: Any,
    schema: str,
    count: int,
    *,
    batch: int = MIGRATE_BATCH,
    on_progress: Callable[[int, int], None] | None = None,
) -> bool:
    """Partition ``<schema>.stowage_records`` by hash of session into ``count`` tables (see the
    module docstring)."""
    if count < 2:
        raise ConfigError(f"--partitions must be at least 2, got {count}")
    table, new = f'"{schema}".{_TABLE}', f'"{schema}".{_NEW}'
    async with pool.acquire() as conn:
        have = await partition_count(conn, schema)
        if have == count:
            return False
        if have:
            raise ConfigError(
                f"{table} has {have} partitions already; changing it to {count} is not "
                "supported (it would be a new copy of every record)"
            )
        async with conn.transaction():
            await conn.execute(f"DROP TABLE IF EXISTS {new} CASCADE")  # an interrupted run's
            await conn.execute(
                f"CREATE TABLE {new} (session_id text NOT NULL, seq bigint NOT NULL, "
                "body text NOT NULL, PRIMARY KEY (session_id, seq)) "
                "PARTITION BY HASH (session_id)"
            )
            for remainder in range(count):
                await conn.execute(
                    f'CREATE TABLE "{schema}".{_TABLE}_p{remainder} PARTITION OF {new} '
                    f"FOR VALUES WITH (MODULUS {count}, REMAINDER {remainder})"
                )
        total = int(
            await conn.fetchval(
                "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = $1::regclass",
                table,
            )
        )
        copied, after = 0, None
        while True:
            chunk = await _copy_batch(conn, table, new, after, batch)
            if chunk is None:
                break
            moved, after = chunk
            copied += moved
            if on_progress is not None:
                on_progress(copied, max(total, copied))
        await _swap(conn, schema, table, new)
    return True


async def _copy_batch(
    conn: Any, table: str, new: str, after: tuple[str, int] | None, batch: int
) -> tuple[int, tuple[str, int]] | None:
    """Copy the next ``batch`` rows past key ``after``; their count and last key, or None
    when no row is left."""
    since = "" if after is None else "WHERE (session_id, seq) > ($2, $3) "
    arguments: tuple[Any, ...] = (batch,) if after is None else (batch, *after)
    row = await conn.fetchrow(
        f"WITH chunk AS (SELECT session_id, seq, body FROM {table} {since}"
        "ORDER BY session_id, seq LIMIT $1), "
        f"copied AS (INSERT INTO {new} (session_id, seq, body) "
        "SELECT session_id, seq, body FROM chunk ON CONFLICT DO NOTHING), "
        "last AS (SELECT session_id, seq FROM chunk ORDER BY session_id DESC, seq DESC LIMIT 1) "
        "SELECT (SELECT count(*) FROM chunk) AS n, session_id, seq FROM last",
        *arguments,
    )
    if row is None:
        return None
    return int(row["n"]), (str(row["session_id"]), int(row["seq"]))


async def _swap(conn: Any, schema: str, table: str, new: str) -> None:
    """Bring the copy up to date under an exclusive lock and put it in the old table's
    place, in one transaction."""
    async with conn.transaction():
        await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        await conn.execute(
            f"INSERT INTO {new} (session_id, seq, body) SELECT o.session_id, o.seq, o.body "
            f"FROM {table} AS o WHERE NOT EXISTS (SELECT 1 FROM {new} AS n "
            "WHERE n.session_id = o.session_id AND n.seq = o.seq)"
        )
        await conn.execute(
            f"DELETE FROM {new} AS n WHERE NOT EXISTS (SELECT 1 FROM {table} AS o "
            "WHERE o.session_id = n.session_id AND o.seq = n.seq)"
        )
        # other indexes the old table had (not its key): made again on the new one by name
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 "
            "AND tablename = $2 AND indexname <> $3",
            schema,
            _TABLE,
            f"{_TABLE}_pkey",
        )
        await conn.execute(f"ALTER TABLE {table} RENAME TO {_OLD}")
        await conn.execute(f"ALTER TABLE {new} RENAME TO {_TABLE}")
        await conn.execute(f'DROP TABLE "{schema}".{_OLD}')
        await conn.execute(f"ALTER TABLE {table} RENAME CONSTRAINT {_NEW}_pkey TO {_TABLE}_pkey")
        for index in indexes:
            await conn.execute(index["indexdef"])
