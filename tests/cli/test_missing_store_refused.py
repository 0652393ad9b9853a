"""``archive``, ``migrate`` and ``workers`` keep a store that exists: one that does not (a
JSONL directory, a SQLite file, a PostgreSQL database or schema) is refused with exit 2 in one
line that names it and says which commands create stores, and nothing is created. ``list``
refuses a PostgreSQL database or schema that does not exist as it refuses a directory."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.cli._main import main
from stowage.storage import PostgresStore, SqliteStore
from stowage.storage.contract import session_start

PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
CREATE_HINT = "('stowage run' and 'stowage worker' do)"

COMMANDS = {
    "archive": ["archive", "--older-than", "1d"],
    "migrate": ["migrate", "--partitions", "4"],
    "workers": ["workers"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_jsonl_or_sqlite_store_is_refused_and_not_created(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    for spec in ("nodir", "sqlite:///missing.db"):
        assert main([*COMMANDS[command], "--store", spec]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("stowage: error: ")
        assert list(tmp_path.iterdir()) == [], f"{command} --store {spec} created something"
        if command == "archive" and spec.startswith("sqlite"):
            assert f"store sqlite:///{tmp_path / 'missing.db'}: no such file" in line
            assert CREATE_HINT in line
        elif command == "archive":
            assert "needs a SQLite (sqlite:///FILE) or PostgreSQL" in line
        else:  # the PostgreSQL-only commands say so first
            assert "PostgreSQL store (postgresql://" in line


def test_an_existing_sqlite_store_is_archived(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def write() -> None:
        store = SqliteStore(tmp_path / "s.db")
        try:
            await store.create("s1", session_start())
        finally:
            await store.aclose()

    anyio.run(write)
    assert main(["archive", "--older-than", "1d", "--store", f"sqlite:///{tmp_path}/s.db"]) == 0
    assert "archived 0 records" in capsys.readouterr().out


async def _cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "stowage.cli", *args], env=env, check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def _schemas(name: str) -> list[str]:
    conn = await asyncpg.connect(PG_DSN)
    try:
        rows = await conn.fetch("SELECT nspname FROM pg_namespace WHERE nspname = $1", name)
    finally:
        await conn.close()
    return [row["nspname"] for row in rows]


async def test_a_missing_postgresql_schema_or_database_is_refused_and_not_created(
    pg_schema: str, cli_env: dict[str, str]
) -> None:
    """The schema ``pg_schema`` names does not exist until a writer makes it."""
    database = f"stowage_missing_{secrets.token_hex(4)}"
    base = PG_DSN.rsplit("/", 1)[0]
    with anyio.fail_after(90):
        for command, argv in {**COMMANDS, "list": ["list"]}.items():
            code, out, err = await _cli(
                *argv, "--store", f"{PG_DSN}?schema={pg_schema}", env=cli_env
            )
            assert (code, out) == (2, ""), err
            [line] = err.splitlines()
            assert f"no such schema '{pg_schema}'" in line and CREATE_HINT in line
            assert f"'stowage {command}' creates no store" in line
            assert await _schemas(pg_schema) == [], f"{command} created the schema"
            code, out, err = await _cli(*argv, "--store", f"{base}/{database}", env=cli_env)
            assert (code, out) == (2, ""), err
            [line] = err.splitlines()
            assert f"no such database '{database}'" in line and CREATE_HINT in line


async def test_an_existing_postgresql_store_is_served(
    pg_schema: str, cli_env: dict[str, str]
) -> None:
    store = PostgresStore(PG_DSN, schema=pg_schema, max_size=1)
    try:
        await store.create("s1", session_start())
    finally:
        await store.aclose()
    with anyio.fail_after(90):
        for argv in COMMANDS.values():
            code, _, err = await _cli(*argv, "--store", f"{PG_DSN}?schema={pg_schema}", env=cli_env)
            assert code == 0, (argv, err)
