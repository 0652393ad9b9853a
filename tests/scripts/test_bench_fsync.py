"""scripts/bench_fsync.py: a tiny run prints both modes and the per-call figure; a --dir that
is not a directory is refused by name."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_fsync.py"


async def test_a_tiny_run_prints_both_modes_and_writes_only_in_its_directory(
    tmp_path: Path,
) -> None:
    argv = ["--dir", str(tmp_path), "--appends", "20", "--files", "3", "--repeat", "1"]
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, str(SCRIPT), *argv], check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    only = re.search(r"write only\s+([\d.]+) ms CPU", out)
    synced = re.search(r"write \+ fdatasync\s+([\d.]+) ms CPU", out)
    per_call = re.search(r"two syncs a model call: ([\d.]+) ms", out)
    assert only and synced and per_call, out
    assert abs(float(per_call.group(1)) - 2 * float(synced.group(1))) < 0.002
    assert not [p async for p in anyio.Path(tmp_path).iterdir()]  # its temp dir is gone


async def test_a_missing_directory_is_refused_by_name(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, str(SCRIPT), "--dir", str(missing)], check=False
        )
    assert done.returncode == 2
    assert f"--dir {missing}: not a directory" in done.stderr.decode()
