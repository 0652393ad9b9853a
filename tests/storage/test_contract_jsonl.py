"""JsonlStore meets the store contract, with fsync, syncfs and none, and with a tiny fd cache; its
readers change no byte, and a writer in another process holds a session until it dies."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from stowage.core import Durability
from stowage.storage import JsonlStore, LogStore
from stowage.storage.contract import (
    BACKING_CHECKS,
    CHECKS,
    Backing,
    BackingCheck,
    Check,
    check_writer_in_another_process,
)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every directory (``None``) and file (its bytes) under ``root``."""
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


def backing(tmp_path: Path, root: Path) -> Backing:
    async def snapshot() -> object:
        return tree(tmp_path)

    async def tear(session_id: str) -> None:
        with (root / f"{session_id}.jsonl").open("ab") as log:
            log.write(b'{"v":1,"seq":8,"ts":"2025-01-01T00:00:00Z","ty')

    return Backing(snapshot=snapshot, tear=tear)


@pytest.mark.parametrize("durability", ["fsync", "syncfs", "none"])
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_jsonl_store_meets_contract(
    check: Check, durability: Durability, tmp_path: Path
) -> None:
    async def open_store() -> LogStore:
        return JsonlStore(tmp_path / "logs", durability=durability)

    with anyio.fail_after(10):
        await check(open_store)


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_jsonl_store_evicting_descriptors_meets_contract(
    check: Check, tmp_path: Path
) -> None:
    """A cache of two descriptors (evicting on nearly every write) changes no outcome."""

    async def open_store() -> LogStore:
        return JsonlStore(tmp_path, durability="none", max_open_files=2)

    with anyio.fail_after(10):
        await check(open_store)


@pytest.mark.parametrize("check", BACKING_CHECKS, ids=lambda check: check.__name__)
async def test_jsonl_readers_change_no_byte(check: BackingCheck, tmp_path: Path) -> None:
    root = tmp_path / "deep" / "logs"  # missing: readers must not create it

    async def open_store() -> LogStore:
        return JsonlStore(root)

    with anyio.fail_after(10):
        await check(open_store, backing(tmp_path, root))


async def test_a_writer_in_another_process_holds_the_session_until_killed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "logs"

    async def open_store() -> LogStore:
        return JsonlStore(root)

    with anyio.fail_after(40):
        await check_writer_in_another_process(open_store, f"JsonlStore({str(root)!r})")


def test_jsonl_store_is_a_log_store(tmp_path: Path) -> None:
    assert isinstance(JsonlStore(tmp_path), LogStore)
