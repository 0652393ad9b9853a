"""scripts/bench_load_ratio.py on a tiny configuration: the small runs around every large one,
each a whole `stowage load` with its checks, and the ratio against their median."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import anyio
import pytest

from ..conftest import slowness

# every run is a process of its own, with its fake server; the net is past the runs' own bound
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_load_ratio.py"


async def _run(*argv: str) -> tuple[int, str]:
    with anyio.fail_after(240 * min(4.0, slowness())):
        done = await anyio.run_process([sys.executable, str(SCRIPT), *argv], check=False)
    return done.returncode, done.stdout.decode() + done.stderr.decode()


async def test_each_large_run_is_compared_with_the_median_of_the_small_runs_around_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ratio.json"
    argv = ["--small", "2", "--large", "5", "--turns", "1", "--small-runs", "2",
            "--large-runs", "2", "--json", str(out)]  # fmt: skip
    code, text = await _run(*argv)
    assert code == 0, text[-2000:]
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert [r["run"] for r in runs] == [
        "small 1",
        "small 2",
        "large 1",
        "small 3",
        "small 4",
        "large 2",
        "small 5",
        "small 6",
    ]
    assert all(r["ok"] for r in runs)
    # 2 tool rounds and the answer a turn (the fake server's default)
    assert [r["rounds"] for r in runs] == [6 if r["sessions"] == 2 else 15 for r in runs]
    rates = [r["throughput_rounds_per_s"] for r in runs]
    first, second = report["ratios"]
    assert first["small_median_rounds_per_s"] == statistics.median(rates[0:2] + rates[3:5])
    assert second["small_median_rounds_per_s"] == statistics.median(rates[3:5] + rates[6:8])
    assert first["ratio"] == round(rates[2] / first["small_median_rounds_per_s"], 3)
    assert first["run"] == "large 1" and "large 2: " in text and "(goal: at least 90%)" in text


async def test_a_run_that_fails_its_checks_fails_the_script(tmp_path: Path) -> None:
    # every request refused: no turn is answered, so the load's checks fail
    code, text = await _run("--small", "1", "--large", "2", "--turns", "1",
                            "--small-runs", "1", "--", "--faults", "500:1.0")  # fmt: skip
    assert code == 1
    assert "small 1 (1 sessions) failed:" in text
