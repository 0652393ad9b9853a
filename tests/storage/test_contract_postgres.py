"""PostgresStore meets the store contract, and its leases fence off stale workers.

Needs PostgreSQL at ``STOWAGE_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
skipped when none answers, except under CI (``CI`` set), where .ci/run has started one and its
absence is a failure. Each test works in a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import os

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.core import FencingError, SessionBusy, StoreError
from stowage.storage import LogStore, PostgresStore, open_store
from stowage.storage.contract import (
    BACKING_CHECKS,
    CHECKS,
    EXPIRY_CHECKS,
    Backing,
    BackingCheck,
    Check,
    ExpiryCheck,
    check_writer_in_another_process,
    round_records,
    session_start,
)

DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def schema(pg_schema: str) -> str:
    """A fresh schema name; the schema is dropped after the test."""
    return pg_schema


def backing(schema: str) -> Backing:
    async def snapshot() -> object:
        conn = await asyncpg.connect(DSN, timeout=3)
        try:
            tables = await conn.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 "
                "ORDER BY table_name",
                schema,
            )
            out = {}
            for table in tables:
                rows = await conn.fetch(f'SELECT * FROM "{schema}"."{table[0]}"')
                out[table[0]] = sorted(repr(tuple(row.values())) for row in rows)
            return out
        finally:
            await conn.close()

    return Backing(snapshot=snapshot)


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_postgres_store_meets_contract(check: Check, schema: str) -> None:
    async def make() -> LogStore:
        return PostgresStore(DSN, schema=schema, max_size=4)

    with anyio.fail_after(20):
        await check(make)


@pytest.mark.parametrize("check", BACKING_CHECKS, ids=lambda check: check.__name__)
async def test_postgres_readers_change_nothing(check: BackingCheck, schema: str) -> None:
    async def make() -> LogStore:
        return PostgresStore(DSN, schema=schema, max_size=4)

    with anyio.fail_after(20):
        await check(make, backing(schema))


@pytest.mark.parametrize("check", EXPIRY_CHECKS, ids=lambda check: check.__name__)
async def test_postgres_leases_expire_and_fence(check: ExpiryCheck, schema: str) -> None:
    async def make(ttl: float) -> LogStore:
        return PostgresStore(DSN, schema=schema, max_size=4, lease_ttl=ttl)

    with anyio.fail_after(20):
        await check(make)


async def test_a_worker_in_another_process_holds_the_session_until_its_lease_expires(
    schema: str,
) -> None:
    """A killed worker blocks its sessions until its lease (1 s here) expires, then not."""

    async def make() -> LogStore:
        return PostgresStore(DSN, schema=schema, max_size=4)

    child = f"PostgresStore({DSN!r}, schema={schema!r}, lease_ttl=1.0, lease_renew_every=0.2)"
    with anyio.fail_after(40):
        await check_writer_in_another_process(make, child, takeover_within=5.0)


async def test_claim_takes_sessions_with_input_and_skips_leased_ones(schema: str) -> None:
    with anyio.fail_after(10):
        store = PostgresStore(DSN, schema=schema)
        other = PostgresStore(DSN, schema=schema)
        for session_id in ("idle", "waiting", "busy"):
            await store.create(session_id, session_start())
        await store.aclose()  # its implicit leases go
        store = PostgresStore(DSN, schema=schema)
        await store.push_inbox("waiting", {"text": "hello"})
        await store.push_inbox("busy", {"text": "hi"})
        busy_lease = await other.acquire("busy")
        claimed = await store.claim_sessions(limit=10)
        assert [lease.session_id for lease in claimed] == ["waiting"]
        assert claimed[0].token == 2 and claimed[0].holder.pid == os.getpid()
        inbox = await store.take_inbox("waiting")
        await store.append("waiting", round_records(4, 1))  # claimed leases write
        with pytest.raises(FencingError, match="holds no lease"):
            await store.take_inbox("busy")
        with pytest.raises(SessionBusy):
            await store.acquire("busy")
        with pytest.raises(SessionBusy):
            await store.acquire("waiting")  # claim handed it out already
        again = await store.claim_sessions(limit=10)
        assert await other.take_inbox("busy") == [{"text": "hi"}]
        await busy_lease.release()
        await store.aclose()
        await other.aclose()
    assert inbox == [{"text": "hello"}]
    assert again == []


async def test_a_stale_worker_cannot_take_the_inbox(schema: str) -> None:
    with anyio.fail_after(10):
        slow = PostgresStore(DSN, schema=schema, lease_ttl=0.3)
        fast = PostgresStore(DSN, schema=schema)
        await slow.create("s", session_start())
        await slow.push_inbox("s", {"text": "hi"})
        await anyio.sleep(0.5)
        await fast.acquire("s")
        with pytest.raises(FencingError, match="stale"):
            await slow.take_inbox("s")
        assert await fast.take_inbox("s") == [{"text": "hi"}]
        await slow.aclose()
        await fast.aclose()


async def test_leases_name_the_holder_in_the_row(schema: str) -> None:
    with anyio.fail_after(10):
        store = PostgresStore(DSN, schema=schema, lease_ttl=60)
        await store.create("s", session_start())
        lease = await store.acquire("s")
        conn = await asyncpg.connect(DSN)
        row = await conn.fetchrow(
            f"SELECT lease_owner, lease_token, lease_pid, lease_host, lease_since, lease_expires "
            f'FROM "{schema}".stowage_sessions'
        )
        await lease.release()
        released = await conn.fetchrow(
            f'SELECT lease_owner, lease_token, lease_expires FROM "{schema}".stowage_sessions'
        )
        await conn.close()
        await store.aclose()
    assert row["lease_owner"] == lease.holder.owner and row["lease_pid"] == os.getpid()
    assert row["lease_token"] == lease.token and row["lease_since"] == lease.holder.since
    assert row["lease_expires"] > row["lease_since"]
    assert released["lease_owner"] is None and released["lease_token"] == lease.token


async def test_a_table_made_before_holders_were_named_gets_the_columns(schema: str) -> None:
    conn = await asyncpg.connect(DSN)
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    await conn.execute(
        f'CREATE TABLE "{schema}".stowage_sessions (session_id text PRIMARY KEY, '
        "last_seq bigint NOT NULL DEFAULT 0, tail_from bigint NOT NULL DEFAULT 1, "
        "lease_owner text, lease_token bigint NOT NULL DEFAULT 0, lease_expires timestamptz, "
        "inbox jsonb NOT NULL DEFAULT '[]'::jsonb)"
    )
    await conn.close()
    with anyio.fail_after(10):
        store = PostgresStore(DSN, schema=schema)
        await store.create("s", session_start())
        lease = await store.acquire("s")
        await store.aclose()
    assert lease.token == 1


def test_open_store_accepts_a_postgresql_url() -> None:
    assert isinstance(open_store(DSN), PostgresStore)


async def test_unreachable_database_is_a_store_error() -> None:
    with anyio.fail_after(10):
        store = PostgresStore("postgresql://postgres@127.0.0.1:1/none")
        with pytest.raises(StoreError, match="cannot open postgres store"):
            await store.exists("s")
        await store.aclose()
