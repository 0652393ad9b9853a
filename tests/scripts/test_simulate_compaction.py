"""scripts/simulate_compaction.py on a small run: its report is whole, its exit status agrees
with the violations it counted, and a small mixed zoo breaks no compaction promise."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.slow  # the script runs in a process of its own

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "simulate_compaction.py"
KINDS = ("refused", "stopped", "orphan_call", "orphan_output", "grew", "replay", "prefix_break")


async def simulate(*argv: str) -> tuple[int, dict[str, str], str]:
    with anyio.fail_after(120):
        result = await anyio.run_process([sys.executable, str(SCRIPT), *argv], check=False)
    out = result.stdout.decode()
    rows: dict[str, str] = {}
    for line in out.splitlines():
        name, _, value = line.rpartition("  ")
        if name.strip() and value.strip():
            rows[name.strip()] = value.strip()
    return result.returncode, rows, out + result.stderr.decode()[-2000:]


async def test_the_report_counts_everything_and_the_exit_status_follows_the_violations() -> None:
    code, rows, out = await simulate("--sessions", "5", "--seed", "3", "--turns", "4")
    assert code in (0, 1), out
    for name in ("sessions", "turns", "rounds", "requests", "cached share"):
        assert name in rows, out
    for part in ("full", "fallback", "micro"):
        assert f"compactions {part}" in rows, out
    assert rows["sessions"] == "5"
    assert int(rows["turns"]) >= 1 and int(rows["requests"]) >= int(rows["rounds"]) >= 1
    violations = {kind: int(rows[f"violations {kind}"]) for kind in KINDS}
    assert code == (1 if any(violations.values()) else 0), out


async def test_a_small_mixed_zoo_breaks_no_compaction_promise() -> None:
    code, rows, out = await simulate("--sessions", "5", "--seed", "1")
    assert {kind: rows[f"violations {kind}"] for kind in KINDS} == dict.fromkeys(KINDS, "0"), out
    assert code == 0, out
