"""JsonlStore beyond the contract: torn tails, corrupt lines, failed writes, fast resume."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import stowage.storage._jsonl as jsonl_module
import stowage.storage._jsonl_scan as scan_module
from stowage.core._errors import CorruptLogError, InvalidSessionId, StoreError
from stowage.core._items import UserMessage
from stowage.core._records import ItemRecord, Record
from stowage.storage import JsonlStore, TornTail, encode_record
from stowage.storage.contract import compaction, expected_tail, round_records, session_start
from structlog.testing import capture_logs


def _log(rounds: int) -> list[Record]:
    log: list[Record] = session_start()
    for round_number in range(1, rounds + 1):
        log += round_records(len(log) + 1, round_number)
    return log


def _write_log(path: Path, records: list[Record]) -> None:
    path.write_bytes(b"".join(encode_record(r) for r in records))


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def _put(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _file_is_whole(path: Path) -> bool:
    data = path.read_bytes()
    return data.endswith(b"\n") and all(line for line in data.split(b"\n")[:-1])


@pytest.fixture
def log_path(tmp_path: Path) -> Iterator[Path]:
    """A two-round log (11 records) written straight to disk as session ``s``."""
    path = tmp_path / "s.jsonl"
    _write_log(path, _log(2))
    yield path


# -- torn tails -----------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["read", "read_tail"])
async def test_torn_last_line_is_cut_reported_and_logged(
    reader: str, log_path: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10):
        whole = _bytes(log_path)
        torn = encode_record(ItemRecord(seq=12, item=UserMessage(text="cut")))[:-9]
        _put(log_path, whole + torn)
        store = JsonlStore(tmp_path)
        with capture_logs() as logs:
            read = await getattr(store, reader)("s")
        await store.aclose()
    assert read.torn_tail == TornTail(path=str(log_path), line=12, bytes_removed=len(torn))
    assert read.records[-1].seq == 11
    assert _bytes(log_path) == whole
    assert [e["event"] for e in logs] == ["log_torn_tail_repaired"]
    assert logs[0]["line"] == 12 and logs[0]["bytes_removed"] == len(torn)


async def test_append_after_a_torn_tail_continues_cleanly(log_path: Path, tmp_path: Path) -> None:
    """The first append of a fresh store cuts the torn line itself, then writes after it."""
    with anyio.fail_after(10):
        _put(log_path, _bytes(log_path) + b'{"v":1,"seq":12,"ts":"2025')
        store = JsonlStore(tmp_path)
        with capture_logs() as logs:
            await store.append("s", round_records(12, 3))
        read = await store.read("s")
        await store.aclose()
    assert read.torn_tail is None
    assert [r.seq for r in read.records] == list(range(1, 16))
    assert [e["event"] for e in logs] == ["log_torn_tail_repaired"]


async def test_whole_but_undecodable_last_line_counts_as_torn(
    log_path: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10):
        whole = _bytes(log_path)
        _put(log_path, whole + b"\x00\x00\x00\x00\n")
        store = JsonlStore(tmp_path)
        read = await store.read_tail("s")
        again = await store.read("s")
        await store.aclose()
    assert read.torn_tail == TornTail(path=str(log_path), line=12, bytes_removed=5)
    assert again.torn_tail is None
    assert _bytes(log_path) == whole


async def test_a_log_torn_inside_its_first_line_reads_empty(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        _put(tmp_path / "s.jsonl", b'{"v":1,"seq":1,"ty')
        store = JsonlStore(tmp_path)
        read = await store.read("s")
        await store.append("s", session_start())
        after = await store.read_tail("s")
        await store.aclose()
    assert read.records == ()
    assert read.torn_tail is not None and read.torn_tail.line == 1
    assert after.records == tuple(session_start())


# -- corruption -----------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["read", "read_tail"])
async def test_corrupt_middle_line_names_file_and_line(
    reader: str, log_path: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10):
        lines = _bytes(log_path).split(b"\n")
        lines[6] = b'{"v":1,"seq":7,"type":"item"'  # line 7, cut short, not the last
        _put(log_path, b"\n".join(lines))
        store = JsonlStore(tmp_path)
        with pytest.raises(CorruptLogError) as caught:
            await getattr(store, reader)("s")
        await store.aclose()
    assert caught.value.path == str(log_path)
    assert caught.value.line == 7
    assert f"{log_path}:7:" in str(caught.value)
    assert _bytes(log_path) == b"\n".join(lines), "a corrupt log must not be repaired"


@pytest.mark.parametrize("reader", ["read", "read_tail"])
async def test_seq_regression_in_file_is_detected(
    reader: str, log_path: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10):
        records = _log(2)
        records[9] = ItemRecord(seq=9, item=UserMessage(text="again"))  # line 10 says seq 9
        _write_log(log_path, records)
        store = JsonlStore(tmp_path)
        with pytest.raises(CorruptLogError, match="seq 9 on line 10") as caught:
            await getattr(store, reader)("s")
        await store.aclose()
    assert caught.value.line == 10


async def test_seq_gap_before_the_compaction_is_detected_by_read_tail(tmp_path: Path) -> None:
    """A tail that cannot line up with the compaction's seq falls back to a full check."""
    with anyio.fail_after(10):
        records = _log(2)
        records.append(compaction(12, covers_through=4))
        del records[5]  # seqs 1-5, 7-12: every line after 5 is off by one
        _write_log(tmp_path / "s.jsonl", records)
        store = JsonlStore(tmp_path)
        with pytest.raises(CorruptLogError) as caught:
            await store.read_tail("s")
        await store.aclose()
    assert caught.value.line == 6


# -- durability and whole batches -----------------------------------------------------------------


async def test_fsynced_append_is_visible_to_a_fresh_store(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        writer = JsonlStore(tmp_path, durability="fsync")
        await writer.create("s", session_start())
        await writer.append("s", round_records(4, 1))
        reader = JsonlStore(tmp_path)
        read = await reader.read("s")
        await reader.aclose()
        await writer.aclose()
    assert list(read.records) == _log(1)


async def test_file_holds_only_whole_batches_after_each_append(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        for round_number in range(1, 6):
            await store.append("s", round_records(4 * round_number, round_number))
            assert _file_is_whole(path)
            assert _bytes(path).count(b"\n") == 3 + 4 * round_number
        await store.aclose()


async def test_failed_write_leaves_no_part_of_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"

    def write_half_then_fail(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        before = _bytes(path)
        monkeypatch.setattr(jsonl_module, "_write_all", write_half_then_fail)
        with pytest.raises(StoreError, match="No space left"):
            await store.append("s", round_records(4, 1))
        assert _bytes(path) == before
        monkeypatch.undo()
        await store.append("s", round_records(4, 1))  # the same seqs, accepted now
        read = await store.read("s")
        await store.aclose()
    assert list(read.records) == _log(1)


async def test_failed_fsync_in_a_group_rolls_every_file_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail_sync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        for session_id in ("a", "b"):
            await store.create(session_id, session_start())
        before = {sid: _bytes(tmp_path / f"{sid}.jsonl") for sid in ("a", "b")}
        monkeypatch.setattr(jsonl_module, "_sync_data", fail_sync)
        with pytest.raises(StoreError, match="Input/output error"):
            await store.append_batches([("a", round_records(4, 1)), ("b", round_records(4, 1))])
        monkeypatch.undo()
        after = {sid: _bytes(tmp_path / f"{sid}.jsonl") for sid in ("a", "b")}
        await store.append("b", round_records(4, 1))
        await store.aclose()
    assert after == before


async def test_create_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path / "new" / "root")
        await store.create("s", session_start())
        await store.aclose()
    assert sorted(p.name for p in (tmp_path / "new" / "root").iterdir()) == ["s.jsonl"]


# -- resume cost ----------------------------------------------------------------------------------


async def test_read_tail_of_a_100k_record_log_decodes_only_the_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _log(24_999)  # 3 + 4 * 24_999 = 99_999 records
    records.append(compaction(len(records) + 1, covers_through=len(records) - 40))
    records += round_records(len(records) + 1, 25_000)
    _write_log(tmp_path / "big.jsonl", records)
    decoded = 0
    real_decode = scan_module.decode_record

    def counting_decode(line: bytes | str) -> Record:
        nonlocal decoded
        decoded += 1
        return real_decode(line)

    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        started = time.perf_counter()
        tail = await store.read_tail("big")
        elapsed = time.perf_counter() - started
        monkeypatch.setattr(scan_module, "decode_record", counting_decode)
        await store.read_tail("big")
        await store.aclose()
    assert tail.records == expected_tail(records)
    assert len(tail.records) == 1 + 40 + 1 + 4
    assert decoded < 100, f"decoded {decoded} lines for a 46-record tail"
    assert elapsed < 0.2, f"read_tail took {elapsed:.3f}s"


# -- paths, listing, lifecycle --------------------------------------------------------------------


async def test_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside.jsonl"
    root.mkdir()
    _write_log(outside, _log(0))
    (root / "evil.jsonl").symlink_to(outside)
    with anyio.fail_after(10):
        store = JsonlStore(root)
        with pytest.raises(InvalidSessionId, match="outside"):
            await store.append("evil", round_records(4, 1))
        await store.aclose()
    assert _bytes(outside).count(b"\n") == 3


async def test_list_sessions_ignores_files_that_are_not_logs(tmp_path: Path) -> None:
    for name in ("notes.txt", ".s.1234.tmp", "bad name.jsonl", "x.jsonl.bak"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub.jsonl").mkdir()
    _write_log(tmp_path / "ok.jsonl", _log(0))
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        listed = await store.list_sessions()
        await store.aclose()
    assert listed == ["ok"]


async def test_open_descriptors_stay_within_the_bound(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path, durability="none", max_open_files=3)
        for n in range(10):
            await store.create(f"s{n}", session_start())
            await store.append(f"s{n}", round_records(4, 1))
        open_now = len(store._fds)
        await store.aclose()
        closed_now = len(store._fds)
    assert open_now == 3
    assert closed_now == 0


async def test_closed_store_refuses_calls(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        await store.aclose()
        await store.aclose()  # idempotent
        with pytest.raises(StoreError, match="closed"):
            await store.append("s", round_records(4, 1))
        with pytest.raises(StoreError, match="closed"):
            await store.read("s")


def test_unknown_durability_is_a_config_error(tmp_path: Path) -> None:
    from stowage.core._errors import ConfigError

    with pytest.raises(ConfigError, match="durability"):
        JsonlStore(tmp_path, durability="sometimes")  # type: ignore[arg-type]


async def test_reads_during_appends_see_only_whole_batches(tmp_path: Path) -> None:
    """A reader never mistakes a batch being written for a torn tail (and never cuts it)."""
    seen: list[int] = []
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path, durability="none")
        await store.create("s", session_start())

        async def append_rounds() -> None:
            for round_number in range(1, 101):
                await store.append("s", round_records(4 * round_number, round_number))

        async def read_repeatedly() -> None:
            for _ in range(100):
                for read in (await store.read("s"), await store.read_tail("s")):
                    assert read.torn_tail is None
                    seen.append(len(read.records))

        async with anyio.create_task_group() as tg:
            tg.start_soon(append_rounds)
            tg.start_soon(read_repeatedly)
        final = await store.read("s")
        await store.aclose()
    assert all((n - 3) % 4 == 0 for n in seen)
    assert len(final.records) == 403
