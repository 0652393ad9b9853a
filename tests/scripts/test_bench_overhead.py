"""scripts/bench_overhead.py on a tiny configuration: the plain aiohttp loop (the floor), the
durable aiohttp loop, the plain httpx loop, the bare openai loop, stowage, with syncfs and
without fsync run the same agent against the fake server and make the same number of calls."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.slow  # the script runs in processes of its own

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_overhead.py"


@pytest.mark.parametrize(("wire", "stream"), [("chat", "on"), ("responses", "off")])
async def test_a_tiny_run_measures_the_four_clients(tmp_path: Path, wire: str, stream: str) -> None:
    out = tmp_path / "rows.json"
    argv = ["--concurrency", "2", "--min-sessions", "2", "--turns", "1", "--wire", wire,
            "--stream", stream, "--target", "1000", "--json", str(out),
            "--also", "httpx,bare,nosync,syncfs"]  # fmt: skip
    with anyio.fail_after(180):
        result = await anyio.run_process([sys.executable, str(SCRIPT), *argv], check=False)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    (row,) = json.loads(out.read_text())
    # 2 sessions x 1 turn x (3 tool rounds + the answer): every client ran the whole agent
    assert row["calls"] == {
        "aiohttp": 8, "durable": 8, "httpx": 8, "bare": 8, "nosync": 8, "syncfs": 8, "stowage": 8
    }  # fmt: skip
    assert row["aiohttp_ms"] > 0 and row["httpx_ms"] > 0
    assert row["bare_ms"] > 0 and row["stowage_ms"] > 0 and row["nosync_ms"] > 0
    assert row["nosync_ratio"] == pytest.approx(row["nosync_ms"] / row["aiohttp_ms"], rel=0.01)
    assert row["syncfs_ms"] > 0
    assert row["ratio_to_floor"] == pytest.approx(row["stowage_ms"] / row["aiohttp_ms"], rel=0.01)
    assert row["ratio_to_durable"] == pytest.approx(row["stowage_ms"] / row["durable_ms"], rel=0.01)
    assert "stowage / aiohttp (the HTTP floor)" in result.stdout.decode()
    assert "stowage / durable aiohttp loop" in result.stdout.decode()
