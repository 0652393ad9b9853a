"""``durability="syncfs"``: a group commit of several logs is made durable by one ``syncfs`` of
their filesystem instead of an ``fdatasync`` per log; a lone log is still ``fdatasync``ed; a
failed ``syncfs`` acknowledges none of the group and cuts every log back; a system that cannot
give a ``syncfs`` that reports failures is refused, saying what to use instead."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
import stowage.storage._jsonl as jsonl_module
import stowage.storage._jsonl_files as files_module
from stowage.core import ConfigError, StoreError
from stowage.storage import JsonlStore, load_syncfs, open_store
from stowage.storage.contract import round_records, session_start

IDS = ("a", "b", "c")


def _counting(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> tuple[list[int], list[int]]:
    """(syncfs calls, fdatasync calls) of the stores made after this, by descriptor."""
    syncs: list[int] = []
    datasyncs: list[int] = []
    real_sync_data = files_module._sync_data
    real_load = jsonl_module.load_syncfs

    def sync_data(fd: int) -> None:
        datasyncs.append(fd)
        real_sync_data(fd)

    def load() -> Callable[[int], None]:
        real = real_load()

        def syncfs(fd: int) -> None:
            syncs.append(fd)
            if fail:
                raise OSError(5, "syncfs: Input/output error")
            real(fd)

        return syncfs

    monkeypatch.setattr(files_module, "_sync_data", sync_data)
    monkeypatch.setattr(jsonl_module, "load_syncfs", load)
    return syncs, datasyncs


async def test_a_group_of_several_logs_is_synced_once_and_a_lone_log_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs, datasyncs = _counting(monkeypatch)
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path, durability="syncfs")
        for session_id in IDS:
            await store.create(session_id, session_start())
        datasyncs.clear()  # creating a log syncs it and its directory, as with "fsync"
        outcomes = await store.append_batches([(s, round_records(4, 1)) for s in IDS])
        assert outcomes == dict.fromkeys(IDS)
        assert (len(syncs), datasyncs) == (1, [])
        await store.append("a", round_records(8, 2))  # alone in its group commit
        assert (len(syncs), len(datasyncs)) == (1, 1)
        await store.aclose()
        reader = JsonlStore(tmp_path)
        seqs = {s: [r.seq for r in (await reader.read(s)).records] for s in IDS}
    assert seqs == {"a": list(range(1, 12)), "b": list(range(1, 8)), "c": list(range(1, 8))}
    assert repr(store).endswith("durability='syncfs')")


async def test_a_failed_syncfs_acknowledges_none_of_its_group_and_cuts_every_log_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs, _ = _counting(monkeypatch, fail=True)
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path, durability="syncfs")
        for session_id in IDS:
            await store.create(session_id, session_start())
        before = {s: (tmp_path / f"{s}.jsonl").read_bytes() for s in IDS}
        outcomes = await store.append_batches([(s, round_records(4, 1)) for s in IDS])
        assert len(syncs) == 1
        assert set(outcomes) == set(IDS)
        for session_id, error in outcomes.items():
            assert isinstance(error, StoreError), error
            assert "Input/output error" in str(error)
            assert (tmp_path / f"{session_id}.jsonl").read_bytes() == before[session_id]
        await store.aclose()


def test_syncfs_is_refused_where_it_cannot_report_a_failed_write() -> None:
    with pytest.raises(ConfigError, match=r"needs Linux \(this is darwin\); use 'fsync'"):
        load_syncfs(platform="darwin")
    with pytest.raises(ConfigError, match=r"needs Linux 5\.8 or later \(this is 5\.4\.0-150"):
        load_syncfs(platform="linux", release="5.4.0-150-generic")
    with pytest.raises(ConfigError, match=r"needs Linux 5\.8 or later"):
        load_syncfs(platform="linux", release="garbled")


@pytest.mark.skipif(
    os.uname().sysname != "Linux", reason="syncfs exists on Linux only (refusal tested above)"
)
def test_the_real_syncfs_syncs_and_reports_a_bad_descriptor(tmp_path: Path) -> None:
    syncfs = load_syncfs()
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"x\n")
        syncfs(fd)
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="syncfs: Bad file descriptor"):
        syncfs(fd)


def test_every_store_takes_syncfs_and_refuses_an_unknown_durability(tmp_path: Path) -> None:
    assert "syncfs" in repr(open_store(tmp_path / "logs", durability="syncfs"))
    open_store(f"sqlite:///{tmp_path}/s.db", durability="syncfs")  # one sync per commit anyway
    with pytest.raises(ConfigError, match=r"'fsync', 'syncfs' or 'none', got 'always'"):
        JsonlStore(tmp_path / "logs", durability="always")  # type: ignore[arg-type]
