"""scripts/crash_acting.py: ``stowage run`` killed while it writes, edits and runs commands
in a bubblewrap sandbox, on JSONL and on SQLite; after every resume nothing was applied
twice, no result was lost and the log checks clean."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = [
    pytest.mark.slow,  # the script runs the command line in processes of its own
    pytest.mark.timeout(600),
    pytest.mark.bwrap,
]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "crash_acting.py"


@pytest.mark.parametrize(("store", "kills"), [("jsonl", 12), ("sqlite", 4)])
async def test_kills_while_acting_apply_nothing_twice_and_lose_nothing(
    tmp_path: Path, store: str, kills: int
) -> None:
    spec = str(tmp_path / "logs") if store == "jsonl" else f"sqlite:///{tmp_path / 'logs.db'}"
    out = tmp_path / "figures.json"
    command = [sys.executable, str(SCRIPT), "--kills", str(kills), "--store", spec]
    command += ["--json", str(out), "--max-seconds", "500"]
    with anyio.fail_after(560):
        done = await anyio.run_process(command, check=False)
    assert done.returncode == 0, done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:]
    report = json.loads(out.read_text())
    figures = report["figures"]
    assert report["failures"] == []
    assert figures["kills"] == kills
    assert figures["doubles"] == 0 and figures["lost"] == 0 and figures["check problems"] == 0
    # the kills landed among the acting calls: the resumes had something to find
    found = sum(v for k, v in figures.items() if k.split()[0] in ("write_file", "edit_file"))
    assert found + sum(v for k, v in figures.items() if k.startswith("run_command")) > 0
