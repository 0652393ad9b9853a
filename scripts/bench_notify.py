"""How many commits a second PostgreSQL makes with and without a NOTIFY in each: the ceiling
the global notification-queue lock puts on a store whose appends notify.

    python scripts/bench_notify.py --connections 16 --seconds 5

Each of ``--connections`` connections commits one small transaction after another for
``--seconds``: an UPDATE of its own row (no two contend), then the same UPDATE followed by
``pg_notify``, which stowage's append of an answered turn and every queued message do. A
NOTIFY takes a lock global to the server at commit, so notifying commits are serialised,
each with its WAL flush; the plain ones are not, and share flushes (group commit). Uses a
scratch table in a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import time
from typing import Any

DEFAULT_DSN = os.environ.get(
    "STOWAGE_SCALE_PG", "postgresql://postgres@127.0.0.1:5432/stowage_scale"
)


async def _commits(dsn: str, schema: str, connections: int, seconds: float, notify: bool) -> int:
    import asyncpg

    pool: Any = await asyncpg.create_pool(dsn, min_size=connections, max_size=connections)
    stop = time.perf_counter() + seconds
    done = [0] * connections

    async def one(n: int) -> None:
        async with pool.acquire() as conn:
            while time.perf_counter() < stop:
                async with conn.transaction():
                    await conn.execute(
                        f'UPDATE "{schema}".rows SET hits = hits + 1 WHERE id = $1', n
                    )
                    if notify:
                        await conn.execute("SELECT pg_notify('bench_notify', $1)", str(n))
                done[n] += 1

    try:
        await asyncio.gather(*(one(n) for n in range(connections)))
    finally:
        await pool.close()
    return sum(done)


async def _main(args: argparse.Namespace) -> None:
    import asyncpg

    schema = f"notify_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(args.dsn)
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(f'CREATE TABLE "{schema}".rows (id int PRIMARY KEY, hits bigint)')
        await conn.execute(
            f'INSERT INTO "{schema}".rows SELECT n, 0 FROM generate_series(0, $1) AS n',
            args.connections,
        )
        for notify in (False, True):
            count = await _commits(args.dsn, schema, args.connections, args.seconds, notify)
            label = "UPDATE + NOTIFY" if notify else "UPDATE"
            print(
                f"{label:<16} {args.connections} connections: {count / args.seconds:,.0f} commits/s"
            )
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
