"""``migrate --partitions N``: PostgreSQL's records table hash-partitioned by session keeps
every record, and the store works on it as before; the same N again does nothing, another N
is refused, and a run stopped part-way leaves the old table whole and can be run again.

Each test works in a schema of its own (``pg_schema``); skipped without a server outside CI.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.cli._main import main
from stowage.core import ConfigError, ProtectedState, Record, StoreError
from stowage.storage import PostgresStore
from stowage.storage.contract import compaction, round_records, session_start

PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
SESSIONS = [f"p-{n}" for n in range(12)]


def log_of(rounds: int) -> list[Record]:
    """A session start, ``rounds`` rounds, and an old compaction covering all but the last."""
    log: list[Record] = list(session_start())
    for number in range(1, rounds + 1):
        log += round_records(len(log) + 1, number)
    covered = compaction(len(log) + 1, len(log) - 4)
    log.append(replace(covered, protected=ProtectedState().snapshot(), ts="2020-01-01T00:00Z"))
    return log


@pytest.fixture
async def store(pg_schema: str) -> AsyncIterator[PostgresStore]:
    made = PostgresStore(PG_DSN, schema=pg_schema, max_size=4)
    for number, session_id in enumerate(SESSIONS):
        await made.create(session_id, log_of(2 + number % 5))
    await made.archive(older_than=timedelta(days=1), session_id=SESSIONS[0])
    try:
        yield made
    finally:
        with anyio.CancelScope(shield=True):
            await made.aclose()


async def _everything(store: PostgresStore) -> dict[str, tuple[Record, ...]]:
    return {sid: (await store.read(sid)).records for sid in SESSIONS}


async def _fetch(schema: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(PG_DSN)
    try:
        return list(await conn.fetch(sql.replace("SCHEMA", schema)))
    finally:
        await conn.close()


async def test_migrating_keeps_every_record_and_the_key(
    store: PostgresStore, pg_schema: str
) -> None:
    with anyio.fail_after(30):
        before = await _everything(store)
        [hot] = await _fetch(pg_schema, 'SELECT count(*) AS n FROM "SCHEMA".stowage_records')
        seen: list[int] = []
        done = await store.migrate_partitions(
            4, batch=7, on_progress=lambda copied, total: seen.append(copied)
        )
        assert done and await store.partitions() == 4
        assert seen[-1] == hot["n"] and len(seen) == -(-hot["n"] // 7)  # progress per batch
        assert await _everything(store) == before
        parts = await _fetch(
            pg_schema,
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = '\"SCHEMA\".stowage_records'::regclass ORDER BY 1",
        )
        assert [p["relname"] for p in parts] == [f"stowage_records_p{n}" for n in range(4)]
        spread = await _fetch(
            pg_schema,
            'SELECT tableoid::regclass::text AS part, count(*) FROM "SCHEMA".stowage_records '
            "GROUP BY 1",
        )
        assert len(spread) > 1  # twelve sessions land in more than one partition
        key = await _fetch(
            pg_schema,
            "SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint "
            "WHERE conrelid = '\"SCHEMA\".stowage_records'::regclass AND contype = 'p'",
        )
        assert [(k["conname"], k["def"]) for k in key] == [
            ("stowage_records_pkey", "PRIMARY KEY (session_id, seq)")
        ]


async def test_appends_during_the_copy_are_kept(store: PostgresStore) -> None:
    """Rounds appended while the batches copy (a batch of 3 rows: dozens of round trips)
    are all in the partitioned table: the swap copies what came after the batches."""
    with anyio.fail_after(30):
        before = await _everything(store)
        appended: dict[str, int] = {}

        async def keep_appending() -> None:
            for number in range(10):
                sid = SESSIONS[number % len(SESSIONS)]
                last = appended.get(sid, before[sid][-1].seq)
                await store.append(sid, round_records(last + 1, 100 + number))
                appended[sid] = last + 4

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_appending)
            await store.migrate_partitions(4, batch=3)
        after = await _everything(store)
        for sid in SESSIONS:
            assert after[sid][: len(before[sid])] == before[sid]
            assert after[sid][-1].seq == appended.get(sid, before[sid][-1].seq)


async def test_appends_claims_leases_and_archiving_work_after_migrating(
    store: PostgresStore, pg_schema: str
) -> None:
    with anyio.fail_after(30):
        await store.migrate_partitions(3)
        sid = SESSIONS[1]
        last = (await store.read(sid)).records[-1].seq
        await store.append(sid, round_records(last + 1, 99))
        with pytest.raises(StoreError, match="regression"):
            await store.append(sid, round_records(last + 1, 100))
        await store.release(sid)
        other = PostgresStore(PG_DSN, schema=pg_schema, max_size=2)
        try:
            assert await other.push_message(sid, {"message_id": "m-1", "text": "go on"})
            claimed = await other.claim_waiting(limit=10)
            assert [c[0] for c in claimed] == [sid]
            lease = await other.acquire(sid)
            await lease.renew()
            await other.append(sid, round_records(last + 5, 100))
            await lease.release()
        finally:
            await other.aclose()
        reports = await store.archive(older_than=timedelta(days=1), session_id=SESSIONS[2])
        assert reports[0].moved > 0
        assert [r.seq for r in (await store.read(sid)).records] == list(range(1, last + 9))


async def test_the_same_count_again_does_nothing_and_another_is_refused(
    store: PostgresStore,
) -> None:
    with anyio.fail_after(30):
        assert await store.migrate_partitions(4)
        assert not await store.migrate_partitions(4)
        with pytest.raises(ConfigError, match="has 4 partitions already"):
            await store.migrate_partitions(8)
        with pytest.raises(ConfigError, match="at least 2"):
            await store.migrate_partitions(1)


async def test_a_migration_stopped_part_way_leaves_the_table_and_runs_again(
    store: PostgresStore, pg_schema: str
) -> None:
    class Killed(Exception):
        """Stands for the process dying after a copy batch committed."""

    def stop(copied: int, total: int) -> None:
        raise Killed

    with anyio.fail_after(30):
        before = await _everything(store)
        with pytest.raises(Killed):
            await store.migrate_partitions(4, batch=5, on_progress=stop)
        assert await store.partitions() == 0
        assert await _everything(store) == before
        await store.append(SESSIONS[3], round_records(len(before[SESSIONS[3]]) + 1, 50))
        assert await store.migrate_partitions(4)
        leftovers = await _fetch(
            pg_schema,
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'SCHEMA' AND relname LIKE '%migrating%'",
        )
        assert leftovers == []
        after = await _everything(store)
        assert after[SESSIONS[3]][-1].seq == before[SESSIONS[3]][-1].seq + 4
        assert {k: v for k, v in after.items() if k != SESSIONS[3]} == {
            k: v for k, v in before.items() if k != SESSIONS[3]
        }


def test_the_migrate_command_refuses_a_store_that_is_not_postgresql(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate", "--partitions", "4", "--store", "sqlite:///x.db"]) == 2
    assert "needs a PostgreSQL store" in capsys.readouterr().err


async def test_the_migrate_command_partitions_once_and_refuses_another_count(
    store: PostgresStore, pg_schema: str, cli_env: dict[str, str]
) -> None:
    async def migrate(count: int) -> tuple[int, str, str]:
        command = [
            sys.executable, "-m", "stowage.cli", "migrate", "--partitions", str(count),
            "--store", PG_DSN, "--schema", pg_schema,
        ]  # fmt: skip
        done = await anyio.run_process(command, env=cli_env, check=False)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    with anyio.fail_after(60):
        before = await _everything(store)
        code, out, err = await migrate(4)
        assert code == 0, err
        assert "partitioned by session into 4 partitions" in out and "copied" in err
        assert await migrate(4) == (
            0,
            "records table has 4 partitions already: nothing to do\n",
            "",
        )
        code, _, err = await migrate(8)
        assert code == 2 and "has 4 partitions already" in err
        assert await store.partitions() == 4
        assert await _everything(store) == before
