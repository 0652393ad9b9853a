"""scripts/bench_archive.py on a tiny session: both stores are measured at each stage, and the
archived one's hot table holds fewer rows than the one never archived."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest

pytestmark = pytest.mark.slow  # the script runs in a process of its own

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_archive.py"
DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


async def test_the_archived_session_keeps_a_small_hot_table(tmp_path: Path) -> None:
    try:
        await (await asyncpg.connect(DSN, timeout=3)).close()
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {DSN} under CI: {exc}")
        pytest.skip(f"no PostgreSQL at {DSN}: {exc}")
    out = tmp_path / "rows.json"
    command = [
        sys.executable, str(SCRIPT), "--dsn", DSN, "--stages", "2100,4198",
        "--archive-every", "2000", "--repeat", "1", "--json", str(out),
    ]  # fmt: skip
    with anyio.fail_after(120):
        done = await anyio.run_process(command, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    rows = {(row["records"], row["store"]): row for row in json.loads(out.read_text())}
    assert set(rows) == {(n, s) for n in (2100, 4198) for s in ("plain", "archived")}
    assert rows[4198, "plain"]["hot_rows"] == 4198
    # archived at 4,000 records through the compaction at 3005 (covering 2964): 1 + 2965..4198
    assert rows[4198, "archived"]["hot_rows"] == 1 + 4198 - 2964
    assert rows[4198, "archived"]["archive_mb"] > 0 and rows[4198, "plain"]["archive_mb"] == 0
    assert all(row["resume_ms"] > 0 for row in rows.values())
    assert b"archived" in done.stdout
