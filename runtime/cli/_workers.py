"""``stowage workers``: the workers of a PostgreSQL store that are up, and what they hold."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from ._parsing import fill_later

__all__ = ["add_workers_command", "format_workers", "workers_main"]


def add_workers_command(subparsers: Any) -> None:
    """Add ``workers`` to the subparsers of ``stowage`` (its options are added when used)."""
    workers = subparsers.add_parser(
        "workers", help="list the workers of a PostgreSQL store and the sessions they hold"
    )
    fill_later(workers, _workers_options)
    workers.set_defaults(handler=workers_main)


def _workers_options(workers: argparse.ArgumentParser) -> None:
    from ._worker import store_options

    store_options(workers)
    workers.add_argument("--log-level", default="warning", help="debug, info, warning (default)")
    workers.add_argument("--json", action="store_true", help="one JSON object per worker")


def format_workers(rows: list[dict[str, Any]], *, now: datetime) -> str:
    """The table ``stowage workers`` prints (a header, then one line per worker). Pure."""
    lines = [
        f"{'PID':>8}  {'HOST':<24} {'SESSIONS':>8}  {'ROUNDS/S':>8}  {'RENEWED':>12}  {'SINCE':>14}"
    ]
    for row in rows:
        rate = row.get("rounds_per_s")
        lines.append(
            f"{row['pid'] or '-':>8}  {row['host'] or '-'!s:<24} {row['sessions']:>8}  "
            f"{'-' if rate is None else f'{rate:.1f}':>8}  "
            f"{_ago(row['renewed'], now):>12}  {_ago(row['since'], now):>14}"
        )
    if not rows:
        lines.append("(no worker is up and no session is held)")
    return "\n".join(lines)


def _ago(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    seconds = max(0.0, (now - when).total_seconds())
    return f"{seconds:.1f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


async def workers_main(args: argparse.Namespace) -> int:
    """Print the live workers of ``--store``; 0, or 2 (an error line) when it cannot be read
    or does not exist."""
    import orjson
    from stowage.storage import PostgresStore

    from ._store_admin import refuse_missing
    from ._worker import postgres_url

    url = postgres_url(args.store)
    store = PostgresStore(url, schema=args.schema, min_size=1, max_size=1)
    await refuse_missing(store, url, "workers")
    try:
        rows = await store.live_workers()
    finally:
        await store.aclose()
    if args.json:
        for row in rows:
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
    else:
        print(format_workers(rows, now=datetime.now(UTC)))
    return 0
