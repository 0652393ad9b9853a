"""PostgresStore meets the store contract, and its leases fence off stale workers.

Needs PostgreSQL at ``STOWAGE_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
skipped when none answers, except under CI (``CI`` set), where .ci/run has started one and its
absence is a failure. Each test works in a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator

import anyio
import asyncpg  # type: ignore[import-untyped]
import pytest
from stowage.core._errors import FencingError, StoreError
from stowage.storage import LogStore, PostgresStore, open_store
from stowage.storage.contract import CHECKS, Check, round_records, session_start

DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A fresh schema name; the schema is dropped after the test."""
    try:
        conn = await asyncpg.connect(DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {DSN} under CI: {exc}")
        pytest.skip(f"no PostgreSQL at {DSN}: {exc}")
    name = f"stowage_test_{secrets.token_hex(6)}"
    try:
        yield name
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await conn.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_postgres_store_meets_contract(check: Check, schema: str) -> None:
    async def make() -> LogStore:
        return PostgresStore(DSN, schema=schema, max_size=4)

    with anyio.fail_after(20):
        await check(make)


async def test_append_with_a_stale_fencing_token_is_refused(schema: str) -> None:
    with anyio.fail_after(10):
        store = PostgresStore(DSN, schema=schema)
        await store.create("s", session_start())
        first = await store.acquire_lease("s", "worker-a", ttl=0.0)  # expires at once
        assert first is not None
        second = await store.acquire_lease("s", "worker-b", ttl=30.0)
        assert second is not None and second > first
        with pytest.raises(FencingError, match="stale"):
            await store.append("s", round_records(4, 1), fencing_token=first)
        await store.append("s", round_records(4, 1), fencing_token=second)
        assert await store.acquire_lease("s", "worker-a", ttl=30.0) is None  # b holds it
        records = (await store.read("s")).records
        await store.aclose()
    assert len(records) == 7


async def test_claim_takes_sessions_with_input_and_skips_leased_ones(schema: str) -> None:
    with anyio.fail_after(10):
        store = PostgresStore(DSN, schema=schema)
        for session_id in ("idle", "waiting", "busy"):
            await store.create(session_id, session_start())
        await store.push_inbox("waiting", {"text": "hello"})
        await store.push_inbox("busy", {"text": "hi"})
        busy_token = await store.acquire_lease("busy", "other", ttl=30.0)
        claimed = await store.claim_sessions("me", limit=10, ttl=30.0)
        assert [session_id for session_id, _ in claimed] == ["waiting"]
        inbox = await store.take_inbox("waiting", claimed[0][1])
        assert busy_token is not None
        with pytest.raises(FencingError):
            await store.take_inbox("busy", busy_token + 1)
        again = await store.claim_sessions("me", limit=10, ttl=30.0)
        await store.aclose()
    assert inbox == [{"text": "hello"}]
    assert again == []


def test_open_store_accepts_a_postgresql_url() -> None:
    assert isinstance(open_store(DSN), PostgresStore)


async def test_unreachable_database_is_a_store_error() -> None:
    with anyio.fail_after(10):
        store = PostgresStore("postgresql://postgres@127.0.0.1:1/none")
        with pytest.raises(StoreError, match="cannot open postgres store"):
            await store.exists("s")
        await store.aclose()
