"""SqliteStore meets the store contract."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import anyio
import pytest
from stowage.storage import LogStore, SqliteStore
from stowage.storage.contract import CHECKS, Check


@pytest.mark.parametrize("durability", ["fsync", "none"])
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
async def test_sqlite_store_meets_contract(
    check: Check, durability: Literal["fsync", "none"], tmp_path: Path
) -> None:
    async def open_store() -> LogStore:
        return SqliteStore(tmp_path / "db" / "logs.db", durability=durability)

    with anyio.fail_after(10):
        await check(open_store)
