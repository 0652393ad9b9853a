"""Onboarding: the README's first Python example runs as a reader copies it, and runs again
(the second run continues the session the first one made instead of failing with
``SessionExists``); ``make test`` makes the database the PostgreSQL tests use."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.core import ItemRecord, UserMessage
from stowage.storage import JsonlStore

from tests.conftest import PG_DSN, ensure_database


def _python_example(readme: str) -> str:
    section = re.split(r"^#+ .*In Python\n", readme, maxsplit=1, flags=re.MULTILINE)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "no python block under 'In Python'"
    return found.group(1)


def test_the_readme_example_runs_twice_and_the_second_run_continues_the_session(
    repo_root: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    example = tmp_path / "example.py"
    example.write_text(_python_example((repo_root / "README.md").read_text(encoding="utf-8")))
    for run in (1, 2):
        done = subprocess.run(
            [sys.executable, str(example)],
            cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"run {run}: {done.stderr}"
        assert "Traceback" not in done.stderr
    log = anyio.run(JsonlStore(tmp_path / ".stowage").read, "my-session").records
    said = [
        r.item.text for r in log if isinstance(r, ItemRecord) and isinstance(r.item, UserMessage)
    ]
    assert said == ["Survey this directory", "Go on"] * 2


async def test_a_missing_test_database_is_made_before_the_suite_runs() -> None:
    """What ``make test`` does first (``tests/conftest.py``'s ``pytest_sessionstart``): the
    database the PostgreSQL tests use is created when the server answers and it is missing."""
    parts = urlsplit(PG_DSN)
    name = f"stowage_made_{secrets.token_hex(4)}"
    admin_dsn = urlunsplit(parts._replace(path="/postgres"))
    try:
        admin = await asyncpg.connect(admin_dsn, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.skip(f"no PostgreSQL at {admin_dsn}: {exc}")
    try:
        dsn = urlunsplit(parts._replace(path=f"/{name}"))
        with anyio.fail_after(30):
            assert await ensure_database(dsn) is True
            conn = await asyncpg.connect(dsn, timeout=3)
            assert await conn.fetchval("SELECT current_database()") == name
            await conn.close()
            assert await ensure_database(dsn) is False  # there already: left as it is
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.close()
