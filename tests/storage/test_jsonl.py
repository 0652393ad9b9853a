"""JsonlStore beyond the contract: torn tails, corrupt lines, failed writes, fast resume, and
the writer lease (its record file, a killed holder, planted symlinks); the lease's lock itself
in ``test_jsonl_leases``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
import stowage.storage._jsonl_files as files_module
import stowage.storage._jsonl_scan as scan_module
from stowage.core import (
    ConfigError,
    CorruptLogError,
    InvalidSessionId,
    SessionBusy,
    SessionNotFound,
    StoreError,
)
from stowage.core._items import UserMessage
from stowage.core._records import ItemRecord, Record
from stowage.storage import JsonlStore, TornTail, encode_record
from stowage.storage._jsonl_lock import LEASE_FILE, lease_is_locked
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


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


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


@pytest.mark.parametrize("call", ["read", "read_tail", "acquire", "append"])
async def test_a_whole_last_line_that_does_not_decode_is_corrupt_not_torn(
    call: str, log_path: Path, tmp_path: Path
) -> None:
    """Only a line the crash cut short (no newline) is a torn tail; nobody cuts this one."""
    with anyio.fail_after(10):
        data = _bytes(log_path) + b"\x00\x00\x00\x00\n"
        _put(log_path, data)
        store = JsonlStore(tmp_path)
        args = (round_records(12, 3),) if call == "append" else ()
        with pytest.raises(CorruptLogError) as caught:
            await getattr(store, call)("s", *args)
        await store.aclose()
    assert caught.value.line == 12 and caught.value.path == str(log_path)
    assert _bytes(log_path) == data


@pytest.mark.parametrize("reader", ["read", "read_tail"])
async def test_a_reader_reports_a_torn_tail_and_changes_no_byte(
    reader: str, log_path: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10):
        data = _bytes(log_path) + b'{"v":1,"seq":12,"ty'
        _put(log_path, data)
        store = JsonlStore(tmp_path)
        with capture_logs() as logs:
            read = await getattr(store, reader)("s", repair=False)
            again = await getattr(store, reader)("s", repair=False)
        await store.aclose()
    expected = TornTail(path=str(log_path), line=12, bytes_removed=19, removed=False)
    assert read.torn_tail == again.torn_tail == expected
    assert read.records[-1].seq == 11
    assert _bytes(log_path) == data
    assert _names(tmp_path) == ["s.jsonl"], "a reader made a lock file"
    assert logs == []


async def test_acquire_cuts_the_torn_tail_and_reports_it_on_the_lease(
    log_path: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10):
        whole = _bytes(log_path)
        _put(log_path, whole + b'{"v":1,"seq":12,"ty')
        store = JsonlStore(tmp_path)
        with capture_logs() as logs:
            lease = await store.acquire("s")
        cut = _bytes(log_path)
        read = await store.read("s", repair=False)
        await lease.release()
        await store.aclose()
    assert lease.repaired == TornTail(path=str(log_path), line=12, bytes_removed=19)
    assert cut == whole
    assert read.torn_tail is None and len(read.records) == 11
    assert [e["event"] for e in logs] == ["log_torn_tail_repaired"]


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
        monkeypatch.setattr(files_module, "_write_all", write_half_then_fail)
        with pytest.raises(StoreError, match="No space left"):
            await store.append("s", round_records(4, 1))
        assert _bytes(path) == before
        monkeypatch.undo()
        await store.append("s", round_records(4, 1))  # the same seqs, accepted now
        read = await store.read("s")
        await store.aclose()
    assert list(read.records) == _log(1)


async def test_a_failed_fsync_fails_that_session_only_and_cuts_its_file_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sync = files_module._sync_data

    def fail_sync_of_b(fd: int) -> None:
        if os.fstat(fd).st_ino == (tmp_path / "b.jsonl").stat().st_ino:
            raise OSError(5, "Input/output error")
        real_sync(fd)

    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        for session_id in ("a", "b"):
            await store.create(session_id, session_start())
        before = _bytes(tmp_path / "b.jsonl")
        monkeypatch.setattr(files_module, "_sync_data", fail_sync_of_b)
        outcomes = await store.append_batches(
            [("a", round_records(4, 1)), ("b", round_records(4, 1))]
        )
        monkeypatch.undo()
        after = _bytes(tmp_path / "b.jsonl")
        await store.append("b", round_records(4, 1))  # the same seqs, accepted now
        a, b = await store.read("a"), await store.read("b")
        await store.aclose()
    assert outcomes["a"] is None
    assert isinstance(outcomes["b"], StoreError) and "Input/output error" in str(outcomes["b"])
    assert after == before
    assert list(a.records) == list(b.records) == _log(1)


async def test_create_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path / "new" / "root")
        await store.create("s", session_start())
        await store.aclose()
    assert sorted(p.name for p in (tmp_path / "new" / "root").iterdir()) == [
        LEASE_FILE,
        "s.jsonl",
        "s.lock",
    ]


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


# -- the writer lease -----------------------------------------------------------------------------

HOLD_LOCK = """
import sys, time
import anyio
from stowage.storage import JsonlStore

async def main():
    await JsonlStore(sys.argv[1]).acquire("s")
    print("held", flush=True)
    await anyio.sleep(3600)

anyio.run(main)
"""


async def test_opening_and_reading_a_missing_root_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet"
    with anyio.fail_after(10):
        store = JsonlStore(root)
        assert await store.list_sessions() == []
        assert not await store.exists("s")
        for call in (store.read, store.read_tail, store.acquire):
            with pytest.raises(SessionNotFound):
                await call("s")
        with pytest.raises(SessionNotFound):
            await store.append("s", round_records(4, 1))
        await store.aclose()
    assert _names(tmp_path) == []


def test_a_root_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        JsonlStore(tmp_path / "file")


async def test_the_lock_file_names_the_holder_and_keeps_the_token_count(tmp_path: Path) -> None:
    lock = tmp_path / "s.lock"
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        lease = await store.acquire("s")
        held = json.loads(lock.read_text())
        await lease.release()
        released = json.loads(lock.read_text())
        again = await store.acquire("s")
        await store.aclose()
    assert held == {
        "owner": lease.holder.owner,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": lease.holder.since.isoformat(),
        "token": lease.token,
    }
    assert released == {"token": lease.token}
    assert again.token == lease.token + 1
    assert not lease_is_locked(str(tmp_path), "s")


async def test_a_killed_holder_leaves_its_lock_file_and_no_lock(tmp_path: Path) -> None:
    """The record stays (naming the dead process) but the lock died with the process."""
    lock = tmp_path / "s.lock"
    with anyio.fail_after(30):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        await store.aclose()
        child = subprocess.Popen(  # noqa: ASYNC220 - a plain child, waited for in a thread
            [sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None
            assert await anyio.to_thread.run_sync(child.stdout.readline) == "held\n"
            assert lease_is_locked(str(tmp_path), "s")
            store = JsonlStore(tmp_path)
            with pytest.raises(SessionBusy) as caught:
                await store.acquire("s")
            assert caught.value.holder is not None and caught.value.holder.pid == child.pid
            child.send_signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(child.wait)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
        assert json.loads(lock.read_text())["pid"] == child.pid  # still names the dead one
        assert not lease_is_locked(str(tmp_path), "s")
        lease = await store.acquire("s")
        await store.append("s", round_records(4, 1))
        await store.aclose()
    assert lease.token == 3  # create's, the child's, this one


async def test_a_planted_lock_symlink_is_not_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "precious.txt"
    root.mkdir()
    outside.write_text("keep me")
    _write_log(root / "s.jsonl", _log(0))
    (root / "s.lock").symlink_to(outside)
    with anyio.fail_after(10):
        store = JsonlStore(root)
        with pytest.raises(StoreError, match="cannot lock"):
            await store.acquire("s")
        with pytest.raises(StoreError, match="cannot lock"):
            await store.append("s", round_records(4, 1))
        await store.aclose()
    assert outside.read_text() == "keep me"
    assert _bytes(root / "s.jsonl").count(b"\n") == 3


async def test_a_group_commit_with_one_busy_session_writes_the_others(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        holder, other = JsonlStore(tmp_path), JsonlStore(tmp_path)
        for session_id in ("a", "b"):
            await holder.create(session_id, session_start())
        await (await holder.acquire("a")).release()  # a is free, b stays held
        before_b = _bytes(tmp_path / "b.jsonl")
        outcomes = await other.append_batches(
            [("a", round_records(4, 1)), ("b", round_records(4, 1))]
        )
        after_b = _bytes(tmp_path / "b.jsonl")
        with pytest.raises(SessionBusy):
            await holder.acquire("a")  # other took a's lease with its write, and keeps it
        await other.aclose()
        lease = await holder.acquire("a")
        read = await holder.read("a")
        await holder.aclose()
    assert outcomes["a"] is None and isinstance(outcomes["b"], SessionBusy)
    assert after_b == before_b
    assert list(read.records) == _log(1)
    assert lease.token == 3


async def test_a_refused_session_gives_back_the_lease_the_group_took_for_it(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(10):
        first, second = JsonlStore(tmp_path), JsonlStore(tmp_path)
        await first.create("a", session_start())
        await first.aclose()
        outcomes = await second.append_batches([("a", round_records(9, 1))])  # a gap
        third = JsonlStore(tmp_path)
        lease = await third.acquire("a")  # free again: second let go of it
        await third.aclose()
        await second.aclose()
    assert isinstance(outcomes["a"], StoreError) and "gap" in str(outcomes["a"])
    assert lease.token == 3


# -- a log deleted or replaced under a live session -------------------------------------------


def _delete(path: Path, tmp_path: Path) -> None:
    path.unlink()


def _move_away(path: Path, tmp_path: Path) -> None:
    path.rename(tmp_path / "elsewhere.jsonl")


def _replace(path: Path, tmp_path: Path) -> None:
    other = tmp_path / "incoming.jsonl"
    _write_log(other, _log(1))
    os.replace(other, path)


@pytest.mark.parametrize(
    ("change", "what"),
    [(_delete, "deleted"), (_move_away, "moved away"), (_replace, "replaced by another file")],
    ids=["deleted", "moved-away", "replaced"],
)
@pytest.mark.parametrize("cache", [512, 1], ids=["fd-cached", "fd-evicted"])
async def test_a_log_deleted_or_replaced_under_a_live_session_fails_its_appends(
    change: Callable[[Path, Path], None], what: str, cache: int, tmp_path: Path
) -> None:
    """The next append names the file and writes nothing, while the fd cache still holds the
    old file or after it evicted it (a reopen by path finds the replacement); appends keep
    failing, and another session in the same group commit is written."""
    root = tmp_path / "logs"
    path = root / "s.jsonl"
    with anyio.fail_after(10):
        store = JsonlStore(root, max_open_files=cache)
        await store.create("s", session_start())
        await store.create("t", session_start())
        await store.append("s", round_records(4, 1))
        await store.append("t", round_records(4, 1))  # with one descriptor, evicts s's
        change(path, tmp_path)
        now = path.read_bytes() if path.exists() else None
        outcomes = await store.append_batches(
            [("s", round_records(8, 2)), ("t", round_records(8, 2))]
        )
        with pytest.raises(StoreError) as again:
            await store.append("s", round_records(8, 2))
        t = await store.read("t")
        await store.aclose()
    error = outcomes["s"]
    assert isinstance(error, StoreError) and not isinstance(error, SessionNotFound)
    assert str(path) in str(error) and what in str(error), error
    assert str(path) in str(again.value) and what in str(again.value)
    assert (path.read_bytes() if path.exists() else None) == now, "the changed file was written"
    assert outcomes["t"] is None and len(t.records) == 11


async def test_a_reader_repairing_with_the_lease_free_takes_it_and_gives_it_back(
    log_path: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(10):
        whole = _bytes(log_path)
        _put(log_path, whole + b'{"v":1,"seq":12,"ty')
        reader, writer = JsonlStore(tmp_path), JsonlStore(tmp_path)
        read = await reader.read("s")  # repair=True, the default for now
        lease = await writer.acquire("s")
        await reader.aclose()
        await writer.aclose()
    assert read.torn_tail is not None and read.torn_tail.removed
    assert _bytes(log_path) == whole
    assert lease.repaired is None and lease.token == 2
