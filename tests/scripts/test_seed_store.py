"""scripts/seed_store.py on a tiny store: the sessions it COPYs are real logs that the store reads
and checks, whose messages are answered, idle (no lease, nothing queued), and the report names
their sizes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from stowage.policy import check_log
from stowage.storage import PostgresStore

from tests.conftest import PG_DSN

pytestmark = pytest.mark.slow  # the script runs in a process of its own

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "seed_store.py"


async def test_seeded_sessions_are_readable_answered_and_idle(
    pg_schema: str, tmp_path: Path
) -> None:
    out = tmp_path / "seed.json"
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [sys.executable, str(SCRIPT), "--dsn", PG_DSN, "--schema", pg_schema,
             "--sessions", "30", "--json", str(out)],
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        report = json.loads(out.read_text())
        assert report["sessions"] == 30
        assert report["records_per_session"] > 10  # turns with tool rounds, not a stub
        assert report["tables"]["stowage_records"]["total_bytes"] > 0
        store = PostgresStore(PG_DSN, schema=pg_schema)
        try:
            ids = await store.list_sessions()
            assert len(ids) == 30
            log = await store.read(ids[7])
            tail = await store.read_tail(ids[7])
            assert len(log.records) == report["records_per_session"]
            assert check_log(ids[7], log.records, tail.records).problems == ()
            answered = await store.message_status(ids[7], "t0")
            assert answered is not None and answered["status"] == "answered"
            assert await store.lease_holder(ids[7]) is None
            assert await store.queue_depth() == (0, 0)
        finally:
            await store.aclose()
