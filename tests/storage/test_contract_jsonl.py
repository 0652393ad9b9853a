"""JsonlStore meets the store contract, with and without fsync, and with a tiny fd cache."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import anyio
import pytest
from stowage.storage import JsonlStore, LogStore
from stowage.storage.contract import CHECKS, Check


@pytest.mark.parametrize("durability", ["fsync", "none"])
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_jsonl_store_meets_contract(
    check: Check, durability: Literal["fsync", "none"], tmp_path: Path
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


def test_jsonl_store_is_a_log_store(tmp_path: Path) -> None:
    assert isinstance(JsonlStore(tmp_path), LogStore)
