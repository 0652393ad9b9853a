"""scripts/bench_scale.py and explain_worker_queries.py --schema on a tiny seeded store: a burst
answered by a worker process, paced claims timed, statements counted, plans printed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import PG_DSN

pytestmark = pytest.mark.slow  # the scripts run in processes of their own

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


async def _run(*argv: str) -> str:
    done = await anyio.run_process([sys.executable, *argv], check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


async def test_a_tiny_store_is_benchmarked_and_explained(pg_schema: str, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    with anyio.fail_after(240):
        await _run(
            str(SCRIPTS / "seed_store.py"), "--dsn", PG_DSN, "--schema", pg_schema,
            "--sessions", "40",
        )  # fmt: skip
        printed = await _run(
            str(SCRIPTS / "bench_scale.py"), "--dsn", PG_DSN, "--schema", pg_schema,
            "--busy", "12", "--workers", "1", "--paced", "6", "--paced-rate", "10",
            "--counted", "4", "--json", str(out),
        )  # fmt: skip
        report = json.loads(out.read_text())
        run = report["runs"][0]
        assert run["burst"]["messages"] == 12 and run["burst"]["dropped"] == 0
        assert run["burst"]["rounds"] >= 12 and run["burst"]["worker_cpu_ms_per_round"] > 0
        assert run["paced"]["claimed"] == 6  # every paced message was a claim, timed
        assert run["paced"]["claim_statement_ms_p50"] > 0
        assert report["statements"]["statements_per_round"] > 0
        assert report["after"]["sessions"] == 40
        assert "claim stmt p50/p99 ms" in printed
        plans = await _run(
            str(SCRIPTS / "explain_worker_queries.py"), "--dsn", PG_DSN, "--schema", pg_schema,
        )  # fmt: skip
    assert "--- claim 32 sessions" in plans
    assert plans.count("Execution Time") >= 10  # each query's plan, run (a tiny table: any scan)
    assert "--- a worker's beat" in plans
