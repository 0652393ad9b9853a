"""Fixtures shared across the test folders; only what several test files would otherwise repeat.

- ``repo_root``: the checkout these tests belong to.
- ``cli_env``: the environment for a ``stowage`` subprocess: this one without any ``OPENAI_*``
  variable (a developer's own key or endpoint never reaches a test), unbuffered output.
- ``cli``: run the command line as a user runs it, ``cli("run", "hi", cwd=path)``: a subprocess
  of this interpreter (``python -m stowage.cli``) with ``cli_env``; returns the completed process
  with text stdout and stderr, whatever its exit status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The root of the checkout: pyproject.toml, README.md, runtime/, actors/, storage/."""
    assert (REPO_ROOT / "pyproject.toml").is_file(), REPO_ROOT
    return REPO_ROOT


@pytest.fixture
def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def cli(cli_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stowage.cli", *args],
            cwd=cwd,
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run
