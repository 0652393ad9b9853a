"""Seed a PostgreSQL store with many idle sessions by COPY, each with a real, readable log.

    python scripts/seed_store.py --sessions 1000000 --schema scale_1m \
        --dsn postgresql://postgres@127.0.0.1:5432/stowage_scale

The log every seeded session gets is made once by the runtime itself: a session on a JSONL
store in a temporary directory answers ``--turns`` messages (each with a message id) through
the scripted model, which calls workspace tools for two rounds a turn; then its lines (the
codec's bodies) are COPYed once per session id, with the ``stowage_messages`` rows that say
those message ids are answered and a ``stowage_sessions`` row whose lease is free and whose
inbox is empty. So a seeded session opens, resumes and answers like any other.

The records table's primary key is dropped for the COPY and built again after it (one sort
instead of a B-tree insert per row), then every table is ANALYZEd. Prints the seconds each step
took and the tables' and indexes' sizes (``--json`` writes them). The schema must not exist
(``--replace`` drops it first).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

DEFAULT_DSN = os.environ.get(
    "STOWAGE_SCALE_PG", "postgresql://postgres@127.0.0.1:5432/stowage_scale"
)
#: rows of COPY text sent to the server per chunk
_CHUNK_ROWS = 20_000


def session_id(n: int) -> str:
    """The id of seeded session ``n`` (sorted as they are numbered)."""
    return f"idle{n:08}"


async def template_log(turns: int) -> tuple[list[str], list[tuple[str, int, int]]]:
    """The lines of a real session's log (``turns`` answered messages, tool rounds) and its
    messages: (message id, seq of its user item, seq of its turn's finished record)."""
    from stowage import Runtime, Settings
    from stowage.core import ItemRecord, TurnRecord, UserMessage
    from stowage.storage import JsonlStore, decode_record
    from stowage.testing import ScriptedModel

    with tempfile.TemporaryDirectory(prefix="stowage-seed-") as tmp:
        root = Path(tmp)
        workspace = root / "workspace"
        workspace.mkdir()
        for name in ("alpha.txt", "beta.txt", "README.md"):
            (workspace / name).write_text(f"{name} holds " + "data " * 120)
        store = JsonlStore(root / "logs")
        # recorded as a session of an OpenAI-compatible endpoint (the fake server's model),
        # which a worker moves to its own endpoint when it opens it, as it would a real one
        settings = Settings(
            workspace=workspace,
            model="fake-model",
            base_url="http://127.0.0.1:9/v1",
            context_window=32_000,
        )
        runtime = Runtime(settings, store=store, gateway=ScriptedModel(tool_rounds=2))
        async with runtime:
            session = await runtime.create("template")
            for turn in range(turns):
                await session.send(
                    f"question {turn}: what do the files say?", message_id=f"t{turn}"
                )
        lines = (root / "logs" / "template.jsonl").read_text().splitlines()
    records = [decode_record(line) for line in lines]
    messages: list[tuple[str, int, int]] = []
    open_ids: list[tuple[str, int]] = []
    for record in records:
        if isinstance(record, ItemRecord) and isinstance(record.item, UserMessage):
            if record.item.message_id is not None:
                open_ids.append((record.item.message_id, record.seq))
        elif isinstance(record, TurnRecord) and record.phase == "finished":
            messages += [(mid, seq, record.seq) for mid, seq in open_ids]
            open_ids = []
    return lines, messages


def _copy_text(value: str) -> str:
    """A value in COPY's text format (backslash, tab and newlines escaped)."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


async def _chunks(count: int, row: Callable[[int], str]) -> AsyncIterator[bytes]:
    """COPY text for ``row(0) ... row(count - 1)``, in chunks of ``_CHUNK_ROWS`` sessions."""
    for start in range(0, count, _CHUNK_ROWS):
        yield "".join(row(n) for n in range(start, min(count, start + _CHUNK_ROWS))).encode()
        await anyio.lowlevel.checkpoint()


async def sizes(conn: Any, schema: str) -> dict[str, dict[str, int]]:
    """Each stowage table's rows (estimated), heap+TOAST bytes, index bytes and total bytes."""
    rows = await conn.fetch(
        "SELECT c.relname, c.reltuples::bigint AS rows, pg_table_size(c.oid) AS table_bytes, "
        "pg_indexes_size(c.oid) AS index_bytes, pg_total_relation_size(c.oid) AS total_bytes "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname",
        schema,
    )
    return {r["relname"]: {k: int(r[k]) for k in list(r.keys())[1:]} for r in rows}


async def index_sizes(conn: Any, schema: str) -> dict[str, int]:
    """Each index of the schema and its bytes."""
    rows = await conn.fetch(
        "SELECT c.relname, pg_relation_size(c.oid) AS bytes FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 "
        "AND c.relkind = 'i' ORDER BY c.relname",
        schema,
    )
    return {r["relname"]: int(r["bytes"]) for r in rows}


async def seed(dsn: str, schema: str, sessions: int, turns: int) -> dict[str, Any]:
    """Make the schema's tables as a worker does, COPY ``sessions`` idle sessions into them,
    and return the timings and sizes."""
    import asyncpg
    from stowage.storage import PostgresStore

    report: dict[str, Any] = {"schema": schema, "sessions": sessions}
    began = time.perf_counter()
    lines, messages = await template_log(turns)
    report["records_per_session"] = len(lines)
    report["record_bytes_per_session"] = sum(len(line.encode()) for line in lines)
    report["messages_per_session"] = len(messages)
    store = PostgresStore(dsn, schema=schema)
    await store.connect()  # the tables and indexes, as a worker makes them
    await store.aclose()
    conn = await asyncpg.connect(dsn)
    timings: dict[str, float] = {}

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        timings[name] = round(now - since, 1)
        print(f"  {name}: {timings[name]} s", flush=True)
        return now

    try:
        step = lap("template", began)
        last_seq, finished = len(lines), max(m[2] for m in messages)
        await conn.copy_to_table(
            "stowage_sessions",
            schema_name=schema,
            columns=["session_id", "last_seq", "tail_from", "lease_token", "inbox"],
            source=_chunks(sessions, lambda n: f"{session_id(n)}\t{last_seq}\t1\t0\t[]\n"),
            format="text",
        )
        step = lap("copy sessions", step)
        bodies = [f"{seq}\t{_copy_text(line)}\n" for seq, line in enumerate(lines, start=1)]
        await conn.execute(
            f'ALTER TABLE "{schema}".stowage_records DROP CONSTRAINT stowage_records_pkey'
        )
        await conn.copy_to_table(
            "stowage_records",
            schema_name=schema,
            columns=["session_id", "seq", "body"],
            source=_chunks(
                sessions, lambda n: "".join(f"{session_id(n)}\t{body}" for body in bodies)
            ),
            format="text",
        )
        step = lap("copy records", step)
        await conn.execute(
            f'ALTER TABLE "{schema}".stowage_records ADD CONSTRAINT stowage_records_pkey '
            "PRIMARY KEY (session_id, seq)"
        )
        step = lap("records primary key", step)
        rows = [f"{mid}\t{seq}\t{answered}\tanswered\n" for mid, seq, answered in messages]
        await conn.copy_to_table(
            "stowage_messages",
            schema_name=schema,
            columns=["session_id", "message_id", "seq", "answered_seq", "status"],
            source=_chunks(sessions, lambda n: "".join(f"{session_id(n)}\t{r}" for r in rows)),
            format="text",
        )
        step = lap("copy messages", step)
        for table in ("stowage_sessions", "stowage_records", "stowage_messages"):
            await conn.execute(f'VACUUM ANALYZE "{schema}".{table}')
        step = lap("vacuum analyze", step)
        report["seconds"] = timings
        report["total_seconds"] = round(time.perf_counter() - began, 1)
        report["finished_seq"] = finished
        report["tables"] = await sizes(conn, schema)
        report["indexes"] = await index_sizes(conn, schema)
    finally:
        await conn.close()
    return report


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    conn = await asyncpg.connect(args.dsn)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", args.schema)
        if exists and not args.replace:
            raise SystemExit(f"schema {args.schema} exists: give --replace to seed it again")
        await conn.execute(f'DROP SCHEMA IF EXISTS "{args.schema}" CASCADE')
    finally:
        await conn.close()
    print(f"seeding {args.sessions:,} sessions into {args.schema}", flush=True)
    return await seed(args.dsn, args.schema, args.sessions, args.turns)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--schema", default="scale_10k")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=2, help="answered messages per session")
    parser.add_argument("--replace", action="store_true", help="drop the schema first")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = anyio.run(_main, args)
    print(
        f"{report['sessions']:,} sessions, {report['records_per_session']} records "
        f"({report['record_bytes_per_session']:,} bytes) and {report['messages_per_session']} "
        f"messages each, in {report['total_seconds']} s"
    )
    for table, size in report["tables"].items():
        print(
            f"  {table:<20} {size['rows']:>12,} rows  table {_mb(size['table_bytes']):>12}  "
            f"indexes {_mb(size['index_bytes']):>12}  total {_mb(size['total_bytes']):>12}"
        )
    for index, size in report["indexes"].items():
        print(f"  index {index:<32} {_mb(size):>12}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
