"""scripts/bench_compaction_policy.py on a tiny configuration: every policy runs the same
workload through the fake server, and the figures hold together."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.slow  # the script runs in a process of its own

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_compaction_policy.py"


async def test_a_tiny_run_compares_the_four_policies(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = ["--rounds", "40", "--round-latency", "0", "--summary-latency", "0.01"]
    argv += ["--output-chars", "4000"]
    with anyio.fail_after(120):
        result = await anyio.run_process(
            [sys.executable, str(SCRIPT), *argv, "--json", str(out)], check=False
        )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    rows = {r["policy"]: r for r in json.loads(out.read_text())["results"]}
    assert list(rows) == ["stowage", "codex-like", "claude-code-like", "unlimited"]
    for row in rows.values():
        assert row["output_chars"] == 4000
        assert row["rounds"] >= 40 and row["replay_ok"]
        assert row["input_tokens"] >= row["uncached_tokens"] > 0
        assert 0 <= row["recall"] <= 1
    unlimited = rows["unlimited"]
    assert unlimited["prefix_breaks"] == 0 and unlimited["micro"] == unlimited["full"] == 0
    stowage = rows["stowage"]
    assert stowage["prefix_breaks"] <= stowage["micro"] + stowage["full"] + stowage["fallbacks"]
    # stubbing every round past the soft mark breaks the prefix more often than batches do
    assert rows["claude-code-like"]["prefix_breaks"] > stowage["prefix_breaks"]
    assert "stowage" in result.stdout.decode()


async def test_each_output_size_is_a_workload_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = ["--rounds", "20", "--round-latency", "0", "--summary-latency", "0.01"]
    argv += ["--output-chars", "800", "3000", "--policies", "stowage", "unlimited"]
    with anyio.fail_after(120):
        result = await anyio.run_process(
            [sys.executable, str(SCRIPT), *argv, "--json", str(out)], check=False
        )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    rows = json.loads(out.read_text())["results"]
    assert [(r["output_chars"], r["policy"]) for r in rows] == [
        (800, "stowage"), (800, "unlimited"), (3000, "stowage"), (3000, "unlimited"),
    ]  # fmt: skip
    small, large = rows[1], rows[3]
    # larger outputs: more input for the same rounds
    assert large["input_tokens"] > small["input_tokens"]
    assert "800-char tool outputs" in result.stdout.decode()
    assert "3000-char tool outputs" in result.stdout.decode()


async def test_the_anthropic_wire_reports_the_breakpoint_cache_figures(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = ["--rounds", "30", "--round-latency", "0", "--summary-latency", "0.01", "--wire"]
    argv += ["anthropic", "--output-chars", "1200", "--policies", "stowage", "unlimited"]
    with anyio.fail_after(120):
        result = await anyio.run_process(
            [sys.executable, str(SCRIPT), *argv, "--json", str(out)], check=False
        )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    rows = {r["policy"]: r for r in json.loads(out.read_text())["results"]}
    for row in rows.values():
        # the cache read most of each round's input and wrote each new tail once
        assert 0.5 < row["prefix_reuse"] < 1 and row["replay_ok"]
        assert row["uncached_tokens"] >= row["cache_write_tokens"] > 0
    assert rows["unlimited"]["prefix_breaks"] == 0
    assert "anthropic wire" in result.stdout.decode()
