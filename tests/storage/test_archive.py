"""Archiving: records a compaction older than the retention covers leave the hot table; resume
never reads them, every other reader (show, export, fork, recall, search) still does, and a
run stopped at any point loses and duplicates nothing.

PostgreSQL tests work in a schema of their own (``pg_schema``) and are skipped without a server
(outside CI); SQLite tests in a temporary file.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.cli._export import markdown_export
from stowage.cli._main import main
from stowage.cli._show import render_transcript
from stowage.cli._store_admin import parse_duration
from stowage.core import (
    CompactionRecord,
    ConfigError,
    LineageStore,
    ProtectedState,
    Record,
    RewindRecord,
    SettingsChangedRecord,
    StoreError,
    identity_from_records,
    replay,
)
from stowage.facade import session_identity
from stowage.storage import PostgresStore, SqliteStore
from stowage.storage._search import search_records
from stowage.storage.contract import compaction, expected_tail, round_records, session_start

PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
OLD = "2020-01-01T00:00:00.000+00:00"
SID = "long-1"


def long_log() -> list[Record]:
    """42 records: rounds 1-2, a settings change (12), rounds 3-5, compaction A (25, recorded
    in 2020, covering 24), rounds 6-8, compaction B (38, recorded now, covering 37), round 9."""
    log: list[Record] = [*session_start(), *round_records(4, 1), *round_records(8, 2)]
    log.append(SettingsChangedRecord(seq=12, changes={"keep_rounds": [3, 5]}))
    for number, first in ((3, 13), (4, 17), (5, 21)):
        log += round_records(first, number)
    log.append(_compaction(25, 24, ts=OLD))
    for number, first in ((6, 26), (7, 30), (8, 34)):
        log += round_records(first, number)
    log.append(_compaction(38, 37, ts=None))
    log += round_records(39, 9)
    assert [r.seq for r in log] == list(range(1, 43))
    return log


def _compaction(seq: int, covers: int, *, ts: str | None) -> CompactionRecord:
    made = replace(compaction(seq, covers), protected=ProtectedState().snapshot())
    return made if ts is None else replace(made, ts=ts)


@dataclass
class Opened:
    """A store with a long log written, and a way to read its tables' seqs directly."""

    store: Any
    seqs: Callable[[str], Awaitable[list[int]]]  # "hot" or "archive" -> the session's seqs
    sql: Callable[[str], Awaitable[None]]  # run a statement on the backing database
    spec: str


@pytest.fixture(params=["postgres", "sqlite"])
async def opened(
    request: pytest.FixtureRequest, tmp_path: Path, pg_schema_or_none: str | None
) -> AsyncIterator[Opened]:
    if request.param == "postgres":
        if pg_schema_or_none is None:
            pytest.skip(f"no PostgreSQL at {PG_DSN}")
        schema = pg_schema_or_none
        store: Any = PostgresStore(PG_DSN, schema=schema, max_size=4)
        tables = {"hot": "stowage_records", "archive": "stowage_records_archive"}

        async def seqs(which: str) -> list[int]:
            conn = await asyncpg.connect(PG_DSN)
            try:
                rows = await conn.fetch(
                    f'SELECT seq FROM "{schema}".{tables[which]} WHERE session_id = $1 '
                    "ORDER BY seq",
                    SID,
                )
            finally:
                await conn.close()
            return [row["seq"] for row in rows]

        async def sql(statement: str) -> None:
            conn = await asyncpg.connect(PG_DSN)
            try:
                await conn.execute(f'SET search_path TO "{schema}"; {statement}')
            finally:
                await conn.close()

        spec = PG_DSN
    else:
        path = tmp_path / "store.db"
        store = SqliteStore(path)
        tables = {"hot": "records", "archive": "records_archive"}

        async def seqs(which: str) -> list[int]:
            with sqlite3.connect(path) as conn:
                rows = conn.execute(
                    f"SELECT seq FROM {tables[which]} WHERE session_id = ? ORDER BY seq", (SID,)
                ).fetchall()
            return [row[0] for row in rows]

        async def sql(statement: str) -> None:
            conn = sqlite3.connect(path)
            try:
                conn.executescript(statement)
            finally:
                conn.close()

        spec = f"sqlite:///{path}"
    await store.create(SID, long_log())
    try:
        yield Opened(store=store, seqs=seqs, sql=sql, spec=spec)
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


@pytest.fixture
async def pg_schema_or_none() -> AsyncIterator[str | None]:
    """``pg_schema`` (a fresh schema, dropped afterwards) for the PostgreSQL half of a
    parametrized test, or None without a server outside CI, so the SQLite half still runs."""
    try:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {PG_DSN} under CI: {exc}")
        yield None
        return
    name = f"stowage_test_{secrets.token_hex(6)}"
    try:
        yield name
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await conn.close()


DAY = timedelta(days=1)


async def test_only_records_covered_by_a_compaction_older_than_the_retention_move(
    opened: Opened,
) -> None:
    """Compaction A (2020) covers 24: seqs 2-24 move but the settings change (12); compaction
    B (now) covers 37, but is younger than a day, so 25-37 stay; seq 1 always stays."""
    with anyio.fail_after(20):
        reports = await opened.store.archive(older_than=DAY)
        assert [(r.session_id, r.moved, r.archived_through) for r in reports] == [(SID, 22, 24)]
        assert await opened.seqs("archive") == [s for s in range(2, 25) if s != 12]
        assert await opened.seqs("hot") == [1, 12, *range(25, 43)]
        # a retention every compaction is older than: B's range goes too
        again = await opened.store.archive(older_than=timedelta(microseconds=1))
        assert [r.moved for r in again] == [13]
        assert await opened.seqs("hot") == [1, 12, *range(38, 43)]


async def test_every_reader_but_resume_sees_the_archived_records(opened: Opened) -> None:
    """After archiving, ``read`` is the whole log unchanged, ``read_tail`` what it was,
    resume's replay equals whole-log replay, and the identity read skips the archive."""
    with anyio.fail_after(20):
        store = opened.store
        before = (await store.read(SID)).records
        await store.archive(older_than=timedelta(microseconds=1))
        after = (await store.read(SID)).records
        assert after == before
        tail = (await store.read_tail(SID)).records
        assert tail == expected_tail(before)
        resumed, whole = replay(SID, tail), replay(SID, after)
        assert resumed.history == whole.history
        assert resumed.protected == whole.protected
        assert resumed.last_seq == whole.last_seq == 42
        identity = await session_identity(LineageStore(store), SID)
        assert identity == identity_from_records(before)
        assert identity.changes == 1 and identity.fields["keep_rounds"] == 5
        assert [r.seq for r in (await store.read_identity(SID)).records] == [1, 12]
        # what resume reads is all in the hot table
        hot = set(await opened.seqs("hot"))
        assert {r.seq for r in tail} <= hot and {1, 12} <= hot


async def test_a_rewind_to_before_an_archived_compaction_still_resumes(opened: Opened) -> None:
    """Archived through 37, then rewound to round 1 (seq 7) and compacted through 7: resume's
    tail now starts at 8, in the archive, and is read from there."""
    with anyio.fail_after(20):
        store = opened.store
        await store.archive(older_than=timedelta(microseconds=1))
        await store.append(SID, [RewindRecord(seq=43, to_round=1, to_seq=7)])
        await store.append(SID, [_compaction(44, 7, ts=None)])
        whole = (await store.read(SID)).records
        assert [r.seq for r in whole] == list(range(1, 45))
        tail = (await store.read_tail(SID)).records
        assert tail == expected_tail(whole)
        resumed = await LineageStore(store).read_tail(SID)
        assert replay(SID, resumed.records).history == replay(SID, whole).history


async def test_a_second_run_moves_nothing_and_appends_go_on(opened: Opened) -> None:
    with anyio.fail_after(20):
        store = opened.store
        await store.archive(older_than=DAY)
        assert [r.moved for r in await store.archive(older_than=DAY)] == [0]
        await store.append(SID, round_records(43, 10))
        records = (await store.read(SID)).records
        assert [r.seq for r in records] == list(range(1, 47))


async def test_fork_search_and_range_reads_reach_archived_records(opened: Opened) -> None:
    """A fork through round 2 reads its parent's archived prefix; a search finds an
    archived item; PostgreSQL's range read (recall of a worker's answer) spans both."""
    with anyio.fail_after(20):
        before = (await opened.store.read(SID)).records
        await opened.store.archive(older_than=DAY)
        lineage = LineageStore(opened.store)
        child = await lineage.fork(SID, "long-1-fork", at_round=2)
        forked = (await lineage.read(child)).records
        assert forked[:11] == before[:11]  # the parent's records 1-11, all archived but 1
        found = await search_records(opened.store, SID, ["careful"], deadline=float("inf"))
        assert [r.seq for r in found.records] == [2] and found.complete
        if isinstance(opened.store, PostgresStore):
            assert await opened.store.read_range(SID, 10, 27) == before[9:27]


async def test_a_batch_that_fails_midway_leaves_every_record_once(opened: Opened) -> None:
    """A batch whose insert fails part-way (a trigger refuses seq 15) is rolled back whole:
    the batches before it stay moved, nothing is lost or doubled, and a later run finishes."""
    if isinstance(opened.store, PostgresStore):
        await opened.sql(
            "CREATE FUNCTION refuse_15() RETURNS trigger AS $$ BEGIN "
            "IF NEW.seq = 15 THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$ "
            "LANGUAGE plpgsql; CREATE TRIGGER refuse BEFORE INSERT ON stowage_records_archive "
            "FOR EACH ROW EXECUTE FUNCTION refuse_15();"
        )
        lift = "DROP TRIGGER refuse ON stowage_records_archive;"
    else:
        await opened.sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON records_archive WHEN NEW.seq = 15 "
            "BEGIN SELECT RAISE(ABORT, 'boom'); END;"
        )
        lift = "DROP TRIGGER refuse;"
    with anyio.fail_after(20):
        store = opened.store
        before = (await store.read(SID)).records
        with pytest.raises(StoreError, match="boom"):
            await store.archive(older_than=DAY, batch=5)
        # batches 2-6 and 7-11 committed; 12-16 (with 15) rolled back whole
        assert await opened.seqs("archive") == list(range(2, 12))
        hot, archived = await opened.seqs("hot"), await opened.seqs("archive")
        assert sorted(hot + archived) == list(range(1, 43))
        assert (await store.read(SID)).records == before
        await opened.sql(lift)
        [report] = await store.archive(older_than=DAY, batch=5)
        assert report.moved == 12 and report.archived_through == 24
        assert (await store.read(SID)).records == before


async def test_a_run_stopped_between_batches_resumes_where_it_stopped(opened: Opened) -> None:
    """A process killed after its first batch: that batch is moved, the rest is not; running
    again moves the rest once."""
    store = opened.store

    class Killed(Exception):
        """Stands for the process dying after a batch committed."""

    def stop(session_id: str, moved: int) -> None:
        raise Killed

    with anyio.fail_after(20):
        before = (await store.read(SID)).records
        with pytest.raises(Killed):
            await store.archive(older_than=DAY, batch=4, on_batch=stop)
        assert await opened.seqs("archive") == [2, 3, 4, 5]
        [report] = await store.archive(older_than=DAY, batch=4)
        assert report.moved == 18
        assert await opened.seqs("archive") == [s for s in range(2, 25) if s != 12]
        assert (await store.read(SID)).records == before


def test_show_export_and_the_archive_command_on_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stowage archive`` moves the covered records; ``show`` and ``export`` still print
    them; no retention, or a JSONL store, is refused with exit 2."""
    path = tmp_path / "s.db"

    async def write() -> tuple[Record, ...]:
        store = SqliteStore(path)
        try:
            await store.create(SID, long_log())
            return (await store.read(SID)).records
        finally:
            await store.aclose()

    records = anyio.run(write)
    spec = f"sqlite:///{path}"
    assert main(["archive", "--store", spec]) == 2
    assert "archiving is off" in capsys.readouterr().err
    assert main(["archive", "--store", spec, "--older-than", "1d"]) == 0
    out = capsys.readouterr().out
    assert f"{SID}: moved 22 records (archived through seq 24)" in out
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM records_archive").fetchone() == (22,)
    assert main(["show", SID, "--store", spec]) == 0
    shown = capsys.readouterr().out
    assert shown.strip() == render_transcript(SID, records).strip()
    assert "[assistant] round 1" in shown and "You are a careful agent." in shown
    assert main(["export", SID, "--store", spec]) == 0
    exported = capsys.readouterr().out
    assert exported.strip() == markdown_export(SID, records).strip()
    assert "round 1" in exported
    assert main(["archive", "--store", str(tmp_path / "jsonl"), "--older-than", "1d"]) == 2
    assert "needs a SQLite" in capsys.readouterr().err


def test_durations_read_as_an_operator_writes_them() -> None:
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("90") == timedelta(seconds=90)
    for bad in ("", "x", "-1d", "0", "inf"):
        with pytest.raises(ConfigError, match="duration"):
            parse_duration(bad)


async def test_a_killed_archive_process_loses_and_doubles_nothing(
    pg_schema: str, cli_env: dict[str, str]
) -> None:
    """``stowage archive`` SIGKILLed once its first batches committed: every record is still
    read once, and a second run moves the rest."""
    store = PostgresStore(PG_DSN, schema=pg_schema, max_size=2)
    log: list[Record] = list(session_start())
    for number in range(1, 500):
        log += round_records(len(log) + 1, number)
    log.append(_compaction(len(log) + 1, len(log) - 4, ts=OLD))
    try:
        with anyio.fail_after(60):
            await store.create(SID, log)
            before = (await store.read(SID)).records
            command = [
                sys.executable, "-m", "stowage.cli", "archive", "--store", PG_DSN,
                "--schema", pg_schema, "--older-than", "1d", "--batch", "2",
            ]  # fmt: skip
            conn = await asyncpg.connect(PG_DSN)
            try:
                async with await anyio.open_process(command, env=cli_env) as process:
                    archived = 0
                    while archived == 0:  # polls the database, not the clock
                        archived = await conn.fetchval(
                            f'SELECT count(*) FROM "{pg_schema}".stowage_records_archive'
                        )
                    process.kill()
                    await process.wait()
                archived = await conn.fetchval(
                    f'SELECT count(*) FROM "{pg_schema}".stowage_records_archive'
                )
            finally:
                await conn.close()
            covered = len(log) - 5 - 1  # seqs 2 .. covers_through
            assert 0 < archived < covered  # killed part-way
            assert (await store.read(SID)).records == before
            [report] = await store.archive(older_than=DAY)
            # a COMMIT the killed process sent may still land after the count above, so the
            # second run moves at most the rest, and together they moved each record once
            assert 0 < report.moved <= covered - archived
            assert report.archived_through == covered + 1
            conn = await asyncpg.connect(PG_DSN)
            try:
                moved = await conn.fetchval(
                    f'SELECT count(*) FROM "{pg_schema}".stowage_records_archive'
                )
            finally:
                await conn.close()
            assert moved == covered
            assert (await store.read(SID)).records == before
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


def test_the_archive_point_is_the_newest_old_compaction_below_the_tail() -> None:
    """Pure: compactions recorded after the cutoff, or with a time that does not parse or
    names no zone, do not count; the point never reaches what resume reads."""
    from datetime import UTC, datetime

    from stowage.storage._archive import archive_through

    cutoff = datetime(2021, 1, 1, tzinfo=UTC)
    old, new = _compaction(25, 24, ts=OLD), _compaction(38, 37, ts="2022-01-01T00:00:00+00:00")
    assert archive_through([old, new], cutoff=cutoff, tail_from=38) == 24
    assert archive_through([old], cutoff=cutoff, tail_from=10) == 9  # never past the tail
    assert archive_through([new], cutoff=cutoff, tail_from=38) == 0
    naive, bad = replace(old, ts="2020-01-01T00:00:00"), replace(old, ts="yesterday")
    assert archive_through([naive, bad, *long_log()[:5]], cutoff=cutoff, tail_from=38) == 0
