"""scripts/adversary.py on PostgreSQL, the only store a worker serves: every command killed
once, the worker and the archive too. A file of its own, so that under ``pytest -n`` it runs
beside the JSONL and SQLite run (tests/scripts/test_adversary.py) rather than after it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "adversary.py"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.bwrap
async def test_every_command_killed_once_on_postgresql_holds_worker_and_archive_too(
    tmp_path: Path, pg_schema: str
) -> None:
    """One kill of each command on PostgreSQL (the only store a worker serves), and a race."""
    out = tmp_path / "figures.json"
    argv = ["--store-kinds", "postgresql", "--pg-schema", pg_schema, "--kills", "5"]
    argv += ["--lies", "0", "--json", str(out)]
    with anyio.fail_after(850):
        done = await anyio.run_process([sys.executable, str(SCRIPT), *argv], check=False)
    assert done.returncode == 0, done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:]
    probes = json.loads(out.read_text())["stores"]["postgresql"]
    for name in ("kill run", "kill resume", "kill approve", "kill archive", "kill worker"):
        assert probes[name]["tried"] == probes[name]["held"] == 1, probes
    assert probes["race resume"]["held"] == 1
    assert probes["disk full"]["skipped"]
