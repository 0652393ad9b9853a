"""``stowage check --requests``: every request a round recorded is rebuilt from the log."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py


def test_check_requests_rebuilds_every_recorded_request_and_names_a_changed_one(
    tmp_path: Path, cli: Cli
) -> None:
    (tmp_path / "notes.txt").write_text("alpha beta gamma\n" * 20)
    for args in (("run", "--session", "d1", "read notes.txt"), ("resume", "d1", "and again")):
        done = cli(*args, "--store", "st", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    checked = cli("check", "d1", "--store", "st", "--requests", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "rebuilt from the log and matched their manifests" in checked.stdout
    shown = cli("show", "d1", "--store", "st", "--requests", cwd=tmp_path)
    rounds = [line for line in shown.stdout.splitlines() if " committed: " in line]
    requests = [line.strip() for line in shown.stdout.splitlines() if "  request " in line]
    assert len(requests) == len(rounds) >= 2
    assert all(" tokens: history #2" in line and "tools (" in line for line in requests)
    assert "  request " not in cli("show", "d1", "--store", "st", cwd=tmp_path).stdout
    # a tool output the next round's request carried, changed in the log after the fact
    log = tmp_path / "st" / "d1.jsonl"
    lines = log.read_text().splitlines()
    at = next(n for n, line in enumerate(lines) if '"function_call_output"' in line)
    record = json.loads(lines[at])
    record["item"]["output"] = "something else"
    lines[at] = json.dumps(record, separators=(",", ":"))
    log.write_text("\n".join(lines) + "\n")
    changed = cli("check", "d1", "--store", "st", "--requests", cwd=tmp_path)
    assert changed.returncode == 1
    assert f"problem: round {record['round'] + 1}: the request differs" in changed.stdout
    assert changed.stdout.rstrip().endswith("NOT OK")
    # without --requests the log itself is still sound
    assert cli("check", "d1", "--store", "st", cwd=tmp_path).returncode == 0
