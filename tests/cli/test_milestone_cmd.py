"""``stowage milestone ID NAME``: a phase that ended, recorded as the session."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py


def test_a_milestone_is_recorded_shown_and_an_empty_name_refused(tmp_path: Path, cli: Cli) -> None:
    assert cli("run", "--session", "m1", "hello", "--store", "st", cwd=tmp_path).returncode == 0
    done = cli("milestone", "m1", "setup", "--note", "the tools work", "--store", "st",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "milestone 'setup' recorded at round" in done.stdout
    shown = cli("show", "m1", "--store", "st", cwd=tmp_path)
    assert "** milestone (user) 'setup': the tools work" in shown.stdout
    empty = cli("milestone", "m1", " ", "--store", "st", cwd=tmp_path)
    assert empty.returncode == 2 and "needs a name" in empty.stderr
    assert "Traceback" not in empty.stderr
