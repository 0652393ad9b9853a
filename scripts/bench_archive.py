"""Resume time and the hot table's size as a PostgreSQL session grows to 100,000 records, with
and without archiving.

    python scripts/bench_archive.py                      # 10k / 50k / 100k records
    python scripts/bench_archive.py --stages 10000,20000 --dsn postgresql://postgres@127.0.0.1/test
    python scripts/bench_archive.py --stages 2100,4198 --archive-every 2000 --repeat 1 --json out.json

Two schemas get the same session, written with COPY (``copy_records_to_table``) from records
the codec encodes: rounds of a user message, a call, a ~1 KB output and the commit, and a
compaction every 1,000 records (recorded two days ago) covering all but its last 40 records.
``plain`` is never archived. ``archived`` is archived (``PostgresStore.archive``, one day's
retention) and vacuumed every 10,000 records, as a nightly ``stowage archive`` would do.

At each stage it prints, for both: ``Runtime.resume`` of the session (median of 5, a fresh
runtime and store each time: lease, read_tail, identity, replay, start), the records table's
live rows and ``pg_total_relation_size``, the archive's size, and a whole-log ``read`` (what
``show``/``export`` pay). Writes nothing outside its two schemas, which it drops at the end.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

SESSION = "long"
COMPACT_EVERY = 1_000
KEEP = 40
ARCHIVE_EVERY = 10_000


def _records(first: int, last: int, start: datetime) -> list[tuple[str, int, str]]:
    """Rows ``(session, seq, body)`` for seqs ``first..last`` of the benchmark's session."""
    from stowage import FunctionCall, FunctionCallOutput, UserMessage
    from stowage.core import (
        CompactionRecord,
        HistoryEntry,
        ItemRecord,
        ProtectedState,
        RoundCommittedRecord,
        SessionRecord,
        SystemMessage,
        Usage,
    )
    from stowage.storage import encode_record

    snapshot = ProtectedState().snapshot()
    old = (start - timedelta(days=2)).isoformat(timespec="milliseconds")
    rows: list[tuple[str, int, str]] = []
    for seq in range(first, last + 1):
        record: Any
        block, place = divmod(seq - 3, COMPACT_EVERY + 1)  # 250 rounds, then a compaction
        round_ = block * (COMPACT_EVERY // 4) + place // 4 + 1
        if seq == 1:
            record = SessionRecord(seq=1, model="m", context_window=128_000, tools=("fetch",))
        elif seq == 2:
            record = ItemRecord(seq=2, item=SystemMessage(text="You are a careful agent."))
        elif place == COMPACT_EVERY:
            record = CompactionRecord(
                seq=seq,
                ts=old,
                summary=f"Summary of the work through step {round_}: files read, fixes made.",
                covers_through=seq - KEEP - 1,  # a round's commit: the last 10 rounds stay
                retained=(
                    HistoryEntry(seq=2, item=SystemMessage(text="You are a careful agent.")),
                ),
                reason="threshold",
                tokens_before=90_000,
                tokens_after=9_000,
                removed=seq - KEEP - 3,
                round=round_ - 1,
                protected=snapshot,
            )
        elif place % 4 == 0:
            text = f"step {round_}: look at part {seq % 97}"
            record = ItemRecord(seq=seq, item=UserMessage(text=text))
        elif place % 4 == 1:
            call = FunctionCall(
                call_id=f"c{seq}", name="fetch", arguments=f'{{"part": {seq % 97}}}'
            )
            record = ItemRecord(seq=seq, item=call, round=round_)
        elif place % 4 == 2:
            text = f"part {seq % 97}: " + " ".join(f"line {n} of {seq}" for n in range(80))
            output = FunctionCallOutput(call_id=f"c{seq - 1}", output=text)
            record = ItemRecord(seq=seq, item=output, round=round_)
        else:
            usage = Usage(input_tokens=50_000, output_tokens=40, total_tokens=50_040)
            record = RoundCommittedRecord(
                seq=seq, round=round_, usage=usage, first_seq=seq - 2, last_seq=seq - 1
            )
        rows.append((SESSION, seq, encode_record(record).decode()))
    return rows


async def _grow(conn: Any, schema: str, first: int, last: int, start: datetime) -> None:
    """Write seqs ``first..last`` with COPY, then move the session row on as appends do."""
    for low in range(first, last + 1, 20_000):
        rows = _records(low, min(last, low + 19_999), start)
        await conn.copy_records_to_table(
            "stowage_records",
            schema_name=schema,
            records=rows,
            columns=["session_id", "seq", "body"],
        )
    newest = 0  # the newest compaction at or before ``last``: seqs 3 + 1000 + k * 1001
    if last >= 3 + COMPACT_EVERY:
        newest = last - (last - 3 - COMPACT_EVERY) % (COMPACT_EVERY + 1)
    await conn.execute(
        f'UPDATE "{schema}".stowage_sessions SET last_seq = $1, tail_from = $2 WHERE session_id = $3',
        last,
        newest - KEEP if newest else 1,
        SESSION,
    )


async def _resume_seconds(dsn: str, schema: str, repeat: int) -> float:
    from stowage import Runtime, Settings
    from stowage.model._scripted import ScriptedModel
    from stowage.storage import PostgresStore

    timings = []
    for _ in range(repeat):
        store = PostgresStore(dsn, schema=schema, max_size=2)
        async with Runtime(Settings(tools="none"), store=store, gateway=ScriptedModel()) as rt:
            started = time.perf_counter()
            session = await rt.resume(SESSION)
            timings.append(time.perf_counter() - started)
            await session.close()
    return statistics.median(timings)


async def _read_seconds(dsn: str, schema: str) -> float:
    from stowage.storage import PostgresStore

    store = PostgresStore(dsn, schema=schema, max_size=2)
    try:
        started = time.perf_counter()
        await store.read(SESSION)
        return time.perf_counter() - started
    finally:
        await store.aclose()


async def _sizes(conn: Any, schema: str) -> tuple[int, int, int]:
    row = await conn.fetchrow(
        f'SELECT (SELECT count(*) FROM "{schema}".stowage_records) AS hot, '
        f"pg_total_relation_size('\"{schema}\".stowage_records') AS hot_bytes, "
        f"pg_total_relation_size('\"{schema}\".stowage_records_archive') AS archive_bytes"
    )
    return int(row["hot"]), int(row["hot_bytes"]), int(row["archive_bytes"])


async def run(
    dsn: str, stages: list[int], repeat: int, archive_every: int = ARCHIVE_EVERY
) -> list[dict[str, Any]]:
    import asyncpg  # type: ignore[import-untyped,unused-ignore]
    from stowage.core import configure_logging
    from stowage.storage import PostgresStore

    configure_logging("console", "warning")
    start = datetime.now(UTC)
    tag = secrets.token_hex(4)
    schemas = {"plain": f"bench_plain_{tag}", "archived": f"bench_archived_{tag}"}
    conn = await asyncpg.connect(dsn)
    results: list[dict[str, Any]] = []
    try:
        for schema in schemas.values():
            store = PostgresStore(dsn, schema=schema, max_size=2)
            await store.create(SESSION, [])  # the tables, and the session row
            await store.aclose()
        written = 0
        for stage in stages:
            while written < stage:
                upto = min(stage, written + archive_every - written % archive_every)
                for name, schema in schemas.items():
                    await _grow(conn, schema, written + 1, upto, start)
                    if name == "archived" and upto % archive_every == 0:
                        store = PostgresStore(dsn, schema=schema, max_size=2)
                        await store.archive(older_than=timedelta(days=1))
                        await store.aclose()
                        await conn.execute(f'VACUUM "{schema}".stowage_records')
                written = upto
            for name, schema in schemas.items():
                await conn.execute(f'VACUUM ANALYZE "{schema}".stowage_records')
                resume = await _resume_seconds(dsn, schema, repeat)
                hot, hot_bytes, archive_bytes = await _sizes(conn, schema)
                results.append(
                    {
                        "records": stage,
                        "store": name,
                        "resume_ms": round(resume * 1000, 1),
                        "hot_rows": hot,
                        "hot_mb": round(hot_bytes / 2**20, 1),
                        "archive_mb": round(archive_bytes / 2**20, 1),
                        "whole_read_ms": round(await _read_seconds(dsn, schema) * 1000),
                    }
                )
                print(_line(results[-1]), flush=True)
    finally:
        for schema in schemas.values():
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
    return results


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['records']:>9,}  {row['store']:<9} {row['resume_ms']:>10.1f} {row['hot_rows']:>9,} "
        f"{row['hot_mb']:>8.1f} {row['archive_mb']:>10.1f} {row['whole_read_ms']:>13,}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench_archive.py", description=__doc__)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--stages", default="10000,50000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--archive-every", type=int, default=ARCHIVE_EVERY, help="records between archive runs"
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the rows here")
    args = parser.parse_args()
    stages = sorted(int(s) for s in args.stages.split(","))
    print(f"{'records':>9}  {'store':<9} {'resume ms':>10} {'hot rows':>9} {'hot MB':>8} "
          f"{'archive MB':>10} {'whole read ms':>13}")  # fmt: skip
    rows = anyio.run(run, args.dsn, stages, args.repeat, args.archive_every)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
