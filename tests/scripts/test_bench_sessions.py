"""scripts/bench_sessions.py on a tiny configuration: memory with and without tracemalloc, the
sweep over sizes of one runtime, and resume time, each printing the figures it names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.slow  # the script runs in a process of its own

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_sessions.py"


async def _run(tmp_path: Path, *argv: str) -> dict[str, object]:
    out = tmp_path / "report.json"
    with anyio.fail_after(180):
        done = await anyio.run_process(
            [sys.executable, str(SCRIPT), *argv, "--json", str(out)], check=False
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report: dict[str, object] = json.loads(out.read_text())
    return report


async def test_memory_measures_live_sessions_beyond_their_history(tmp_path: Path) -> None:
    report = await _run(tmp_path, "memory", "--sessions", "4", "--turns", "1")
    assert report["sessions"] == 4
    live, beyond, history = (
        report["live_kb_per_session"], report["live_kb_beyond_history"],
        report["history_kb_per_session"],
    )  # fmt: skip
    assert isinstance(live, float) and isinstance(beyond, float) and isinstance(history, float)
    assert history > 0 and live == pytest.approx(beyond + history, abs=0.05)
    assert report["live_kb_per_session_by_file"]


async def test_memory_without_tracemalloc_reports_resident_memory_only(tmp_path: Path) -> None:
    report = await _run(tmp_path, "memory", "--sessions", "4", "--turns", "1", "--no-trace")
    assert report["live_kb_per_session"] is None
    assert report["live_kb_per_session_by_file"] == []
    rss = report["rss_mb_with_live_sessions"]
    assert isinstance(rss, float) and rss > 0


async def test_memory_drives_sessions_a_few_at_a_time_or_under_a_running_bound(
    tmp_path: Path,
) -> None:
    few = await _run(tmp_path, "memory", "--sessions", "4", "--turns", "1", "--no-trace",
                     "--at-once", "2")  # fmt: skip
    assert few["sessions_at_once"] == 2 and few["max_running_sessions"] is None
    bounded = await _run(tmp_path, "memory", "--sessions", "4", "--turns", "1", "--no-trace",
                         "--max-running", "2")  # fmt: skip
    assert bounded["sessions_at_once"] == 4 and bounded["max_running_sessions"] == 2
    # every session ran its turn (a user message, tool rounds and an answer) either way
    items = few["history_items_per_session"]
    assert isinstance(items, float) and items > 3 and bounded["history_items_per_session"] == items


async def test_sizes_grows_one_runtime_and_reports_each_size(tmp_path: Path) -> None:
    report = await _run(tmp_path, "sizes", "--sizes", "6,3", "--at-once", "2", "--probe", "2")
    rows = report["by_size"]
    assert isinstance(rows, list) and [row["live_sessions"] for row in rows] == [3, 6]
    for row in rows:
        # every session stayed live (none hibernated to make room) and each figure was taken
        assert row["hibernated"] == 0
        assert row["rss_kb_per_live_session"] > 0 and row["descriptors_in_use"] > 0
        assert row["turns_per_second_growing"] > 0 and row["turns_per_second_all_live"] > 0


async def test_resume_times_a_long_log(tmp_path: Path) -> None:
    report = await _run(tmp_path, "resume", "--records", "400", "--repeat", "1")
    # resume reads from the newest compaction on and rebuilds the same history as a whole read
    assert report["history_items_after_resume"] == report["whole_log_history_items"]
    seconds = report["resume_seconds_best"]
    assert isinstance(seconds, float) and seconds > 0
