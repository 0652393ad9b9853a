"""Fixtures shared across the test folders; only what several test files would otherwise repeat.

- ``repo_root``: the checkout these tests belong to.
- ``cli_env``: the environment for a ``stowage`` subprocess: this one without any ``OPENAI_*``
  variable (a developer's own key or endpoint never reaches a test), unbuffered output.
- ``pg_schema``: a fresh PostgreSQL schema name at ``PG_DSN`` (``STOWAGE_TEST_PG``, else the local
  server), dropped after the test; the test is skipped without a server, and fails under CI.
- ``cli``: run the command line as a user runs it, ``cli("run", "hi", cwd=path)``: a subprocess
  of this interpreter (``python -m stowage.cli``) with ``cli_env``; returns the completed process
  with text stdout and stderr, whatever its exit status.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


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


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    try:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {PG_DSN} under CI: {exc}")
        pytest.skip(f"no PostgreSQL at {PG_DSN}: {exc}")
    name = f"stowage_test_{secrets.token_hex(6)}"
    try:
        yield name
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await conn.close()
