"""A lineage store remembers where each log's own seqs start for the sessions it saw last: one
it forgot (a worker meets millions) is read again, and its writes still land right."""

from __future__ import annotations

from pathlib import Path

import pytest
import stowage.core._lineage as lineage_module
from stowage.core import ForkedFromRecord, lineage_store
from stowage.storage import JsonlStore
from stowage.storage.contract import round_records, session_start


async def test_a_forgotten_fork_offset_is_read_again_and_appends_land_in_lineage_seqs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lineage_module, "_OFFSETS_KEPT", 2)
    store = lineage_store(JsonlStore(tmp_path))
    try:
        parent = [*session_start(), *round_records(len(session_start()) + 1, 1)]
        await store.create("parent", parent)
        child = await store.fork("parent", "child")
        for n in range(3):  # more sessions than it keeps: the child's offset is forgotten
            await store.create(f"other-{n}", session_start())
        assert "child" not in store._offsets
        through = parent[-1].seq
        await store.append("child", round_records(through + 2, 2))
        records = (await store.read(child)).records
        assert [r.seq for r in records] == list(range(1, records[-1].seq + 1))
        own = (await store.inner.read("child")).records
        assert isinstance(own[0], ForkedFromRecord) and own[0].seq == 1
        assert [r.seq for r in own] == list(range(1, len(own) + 1))  # written from seq 1
        assert len(store._offsets) <= 2
    finally:
        await store.aclose()
