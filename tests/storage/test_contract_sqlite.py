"""SqliteStore meets the store contract, its readers create and change nothing, its leases
expire and fence, and a writer in another process holds a session until it dies."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from stowage.core import ConfigError, Durability, SessionNotFound
from stowage.storage import LogStore, SqliteStore
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


def tree(root: Path) -> dict[str, bytes | None]:
    """Every directory (``None``) and file (its bytes) under ``root`` but SQLite's ``-shm``
    files: the shared memory index, where readers mark what they read."""
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
        if not path.name.endswith("-shm")
    }


def backing(tmp_path: Path) -> Backing:
    async def snapshot() -> object:
        return tree(tmp_path)

    return Backing(snapshot=snapshot)


@pytest.mark.parametrize("durability", ["fsync", "syncfs", "none"])
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_sqlite_store_meets_contract(
    check: Check, durability: Durability, tmp_path: Path
) -> None:
    async def open_store() -> LogStore:
        return SqliteStore(tmp_path / "db" / "logs.db", durability=durability)

    with anyio.fail_after(10):
        await check(open_store)


@pytest.mark.parametrize("check", BACKING_CHECKS, ids=lambda check: check.__name__)
async def test_sqlite_readers_change_nothing(check: BackingCheck, tmp_path: Path) -> None:
    async def open_store() -> LogStore:
        return SqliteStore(tmp_path / "db" / "logs.db")

    with anyio.fail_after(10):
        await check(open_store, backing(tmp_path))


@pytest.mark.parametrize("check", EXPIRY_CHECKS, ids=lambda check: check.__name__)
async def test_sqlite_leases_expire_and_fence(check: ExpiryCheck, tmp_path: Path) -> None:
    async def open_store(ttl: float) -> LogStore:
        return SqliteStore(tmp_path / "logs.db", durability="none", lease_ttl=ttl)

    with anyio.fail_after(10):
        await check(open_store)


async def test_a_writer_in_another_process_holds_the_session_until_killed(
    tmp_path: Path,
) -> None:
    """A dead pid on this host frees its leases at once: no wait for the TTL."""
    path = tmp_path / "logs.db"

    async def open_store() -> LogStore:
        return SqliteStore(path)

    with anyio.fail_after(40):
        await check_writer_in_another_process(open_store, f"SqliteStore({str(path)!r})")


async def test_a_read_of_a_file_without_tables_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with anyio.fail_after(10):
        store = SqliteStore(path)
        assert await store.list_sessions() == []
        assert not await store.exists("s")
        await store.aclose()
    assert path.read_bytes() == b""


async def test_a_closed_store_released_its_leases_for_another_process(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        one = SqliteStore(tmp_path / "logs.db")
        await one.create("s", session_start())
        await one.aclose()
        two = SqliteStore(tmp_path / "logs.db", lease_ttl=3600)
        lease = await two.acquire("s")
        await two.aclose()
    assert lease.token == 2 and lease.released


@pytest.mark.parametrize(
    ("ttl", "every"), [(0, None), (-1, None), (10, 10), (10, 0), (10, 11), (float("nan"), None)]
)
def test_lease_times_are_checked(tmp_path: Path, ttl: float, every: float | None) -> None:
    with pytest.raises(ConfigError, match="lease_"):
        SqliteStore(tmp_path / "logs.db", lease_ttl=ttl, lease_renew_every=every)


async def test_refused_writes_create_no_file(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = SqliteStore(tmp_path / "db" / "logs.db")
        with pytest.raises(SessionNotFound):
            await store.acquire("s")
        with pytest.raises(SessionNotFound):
            await store.append("s", round_records(4, 1))
        await store.aclose()
    assert tree(tmp_path) == {}
