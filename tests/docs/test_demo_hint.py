"""The demo's closing hint runs as printed: ``make demo`` starts ``.venv/bin/stowage``, which is
not on PATH until the venv is activated, so the hint names the command the way it was started;
with the venv active it names ``stowage``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)


def _env(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "STOWAGE_"))}
    env["PATH"] = path
    env["COLUMNS"] = "60"  # narrower than the hint: it must not be wrapped
    return env


def _hint(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"^inspect it: (.+)$", done.stdout, re.MULTILINE)
    assert found is not None, done.stdout
    return found.group(1)


@pytest.mark.parametrize("activated", [False, True], ids=["make-demo", "venv-active"])
def test_the_demo_hint_runs_as_printed(tmp_path: Path, activated: bool) -> None:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "stowage").exists(), "the stowage script of this environment"
    (tmp_path / ".venv").symlink_to(bin_dir.parent, target_is_directory=True)
    system_path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != bin_dir
    )
    path = (
        os.pathsep.join([str(tmp_path / ".venv" / "bin"), system_path])
        if activated
        else system_path
    )
    env = _env(path)
    # what the Makefile runs: $(BIN)/stowage demo, from the checkout
    hint = _hint([".venv/bin/stowage", "demo", "--turns", "1"], tmp_path, env)
    assert hint.startswith("stowage show " if activated else ".venv/bin/stowage show "), hint
    shown = subprocess.run(
        ["bash", "-c", hint], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "[user] Survey this package" in shown.stdout
