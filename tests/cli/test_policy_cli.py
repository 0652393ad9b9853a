"""The policy's command line, run in subprocesses on real files."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py


def test_compact_with_focus_compacts_by_hand_and_show_lists_it(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "notes.txt").write_text("the launch code is 4242\n" * 50)
    done = cli("run", "--session", "s1", "--store", "st", "read the notes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    compacted = cli("compact", "s1", "--store", "st", "--focus", "the launch code", cwd=tmp_path)
    assert compacted.returncode == 0, compacted.stderr
    assert "compacted (full)" in compacted.stdout
    shown = cli("show", "s1", "--store", "st", cwd=tmp_path)
    assert "== compaction 1 (full)" in shown.stdout and "manual compaction" in shown.stdout
    assert "landed in the background (no request waited)" in shown.stdout
    # the same figure as the console's card and chart: tokens in use when it was applied,
    # over the recorded usable budget, and each round's figure after it committed
    assert re.search(
        r"applied at [\d,]+ tokens in use \((reported|estimated)\), \d+% of usable "
        r"\([\d,]+ tokens\)",
        shown.stdout,
    )
    assert re.search(r"round 1 committed: .*; in use [\d,]+ \((reported|estimated)\)", shown.stdout)
    # no --compact-threshold and a registered model: the session runs the watermark policy
    records = [json.loads(line) for line in (tmp_path / "st" / "s1.jsonl").read_text().splitlines()]
    assert records[0]["settings"]["compact_threshold"] is None
    assert records[0]["settings"]["watermarks"] == [0.7, 0.85, 0.95, 0.5]


def test_a_small_context_window_from_the_command_line_microcompacts_and_compacts(
    tmp_path: Path, cli: Cli, repo_root: Path
) -> None:
    src = repo_root / "runtime"
    # 2,600 - 300 of output - ~780 of tool schemas leaves ~1,500 usable: a few turns of
    # survey cross the soft mark (the schemas are outside usable, not counted in use again;
    # each read is a part of at most a fifth of usable, so it takes a turn or two more)
    shown = ""
    for n in range(8):
        args = ["--session", "w"] if n == 0 else []
        command = "run" if n == 0 else "resume"
        target = [] if n == 0 else ["w"]
        done = cli(
            command, *target, *args, f"survey the code, part {n}", "--store", str(tmp_path / "st"),
            "--context-window", "2600", "--max-output-tokens", "300", cwd=src,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        shown = cli("show", "w", "--store", str(tmp_path / "st"), cwd=src).stdout
        if "~~ microcompaction" in shown or "== compaction" in shown:
            break
    assert "~~ microcompaction" in shown or "== compaction" in shown
    checked = cli("check", "w", "--store", str(tmp_path / "st"), cwd=src)
    assert checked.returncode == 0, checked.stdout
