"""A PostgreSQL store URL names its tables' schema (``?schema=NAME``), so every command that
takes ``--store`` reaches a fleet that runs in another schema than ``public``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from stowage.core import ConfigError
from stowage.storage import PostgresStore, open_store
from stowage.storage._postgres import resolve_schema
from stowage.storage.contract import round_records, session_start

from tests.conftest import PG_DSN

Cli = Callable[..., subprocess.CompletedProcess[str]]

_URL = "postgresql://app:se%26cret@db.example:5432/agents"


@pytest.mark.parametrize(
    ("dsn", "given", "expected"),
    [
        (_URL, None, (_URL, "public")),
        (_URL + "?schema=fleet_a", None, (_URL, "fleet_a")),
        (_URL + "?sslmode=disable&schema=fleet_a", None, (_URL + "?sslmode=disable", "fleet_a")),
        (_URL + "?schema=fleet_a&sslmode=disable", None, (_URL + "?sslmode=disable", "fleet_a")),
        (_URL + "?schema=fleet_a", "fleet_a", (_URL, "fleet_a")),
        (_URL + "?sslmode=disable", "fleet_b", (_URL + "?sslmode=disable", "fleet_b")),
    ],
)
def test_the_schema_comes_from_the_argument_or_the_url_and_leaves_the_url(
    dsn: str, given: str | None, expected: tuple[str, str]
) -> None:
    assert resolve_schema(dsn, given) == expected


@pytest.mark.parametrize(
    ("dsn", "given", "message"),
    [
        (_URL + "?schema=fleet_a", "fleet_b", "differs from the store URL's"),
        (_URL + "?schema=a&schema=b", None, "names its schema 2 times"),
        (_URL + "?schema=Bad-Name", None, "must be lower-case"),
        (_URL, "x;drop", "must be lower-case"),
    ],
)
def test_a_schema_that_conflicts_or_is_not_a_name_is_refused(
    dsn: str, given: str | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        resolve_schema(dsn, given)
    assert "se%26cret" not in str(caught.value)  # the password is never echoed


async def test_a_store_opened_from_a_url_with_a_schema_reads_that_schema(pg_schema: str) -> None:
    with anyio.fail_after(30):
        writer = PostgresStore(PG_DSN, schema=pg_schema)
        try:
            await writer.create("fleet-1", [*session_start(), *round_records(4, 1)])
        finally:
            await writer.aclose()
        by_url = open_store(f"{PG_DSN}?schema={pg_schema}")
        public = open_store(PG_DSN)
        try:
            assert isinstance(by_url, PostgresStore) and by_url.schema == pg_schema
            assert await by_url.list_sessions() == ["fleet-1"]
            assert [r.seq for r in (await by_url.read("fleet-1")).records] == list(range(1, 8))
            assert "fleet-1" not in await public.list_sessions()
        finally:
            await by_url.aclose()
            await public.aclose()


async def test_the_cli_lists_and_checks_a_session_in_the_urls_schema(
    pg_schema: str, cli: Cli, tmp_path: Path
) -> None:
    with anyio.fail_after(30):
        writer = PostgresStore(PG_DSN, schema=pg_schema)
        try:
            await writer.create("fleet-2", [*session_start(), *round_records(4, 1)])
        finally:
            await writer.aclose()
    store = f"{PG_DSN}?schema={pg_schema}"
    listed = await anyio.to_thread.run_sync(
        lambda: cli("list", "--json", "--store", store, cwd=tmp_path)
    )
    assert listed.returncode == 0, listed.stderr
    assert '"fleet-2"' in listed.stdout
    checked = await anyio.to_thread.run_sync(
        lambda: cli("check", "fleet-2", "--store", store, cwd=tmp_path)
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.rstrip().endswith("ok")
    conflicting = await anyio.to_thread.run_sync(
        lambda: cli("workers", "--store", store, "--schema", "another_one", cwd=tmp_path)
    )
    assert conflicting.returncode == 2, conflicting.stdout + conflicting.stderr
    assert "differs from the store URL's" in conflicting.stderr
