"""JsonlStore's group commits on its own writer thread, and its per-session locks: one thread
per store, started by the first commit and gone after ``aclose`` (or once the store is
dropped); errors raised in the caller; a cancelled commit still waits for its write."""

from __future__ import annotations

import gc
import os
import signal
import threading
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import stowage.storage._jsonl as jsonl_module
import stowage.storage._jsonl_files as files_module
from stowage.storage import JsonlStore
from stowage.storage.contract import round_records, session_start

_WRITER_NAME = "stowage-jsonl-writer"


def _writers(store: JsonlStore) -> list[threading.Thread]:
    name = f"{_WRITER_NAME} {store.root}"
    return [thread for thread in threading.enumerate() if thread.name == name]


async def test_group_commits_run_on_one_thread_that_aclose_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writing_threads: list[int] = []
    real_write = files_module._write_all

    def recording_write(fd: int, data: bytes) -> None:
        writing_threads.append(threading.get_ident())
        real_write(fd, data)

    monkeypatch.setattr(files_module, "_write_all", recording_write)
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("a", session_start())
        await store.create("b", session_start())
        assert _writers(store) == []  # started by the first group commit, not before
        writing_threads.clear()  # create writes on anyio's worker threads
        for round_number in range(1, 4):
            first = 4 * round_number
            outcomes = await store.append_batches(
                [
                    ("a", round_records(first, round_number)),
                    ("b", round_records(first, round_number)),
                ]
            )
            assert outcomes == {"a": None, "b": None}
        [writer] = _writers(store)
        await store.aclose()
    assert set(writing_threads) == {writer.ident}
    assert len(writing_threads) == 6
    assert not writer.is_alive()


async def test_a_store_dropped_without_aclose_ends_its_thread(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path, durability="none")
        await store.create("s", session_start())
        await store.append("s", round_records(4, 1))
        lease = await store.acquire("s")
        await lease.release()  # nothing left open but the thread
        [writer] = _writers(store)
        del store, lease
        gc.collect()
        await anyio.to_thread.run_sync(writer.join, 5)
    assert not writer.is_alive()


async def test_an_unexpected_error_in_the_thread_is_raised_in_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not one file's failure: raised whole, every file cut back, and the thread serves on."""

    def broken_write(fd: int, data: bytes) -> None:
        os.write(fd, data[: data.index(b"\n") + 1])  # a whole record, not acknowledged
        raise RuntimeError("the writer broke")

    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        before = (tmp_path / "s.jsonl").read_bytes()
        monkeypatch.setattr(files_module, "_write_all", broken_write)
        with pytest.raises(RuntimeError, match="the writer broke"):
            await store.append("s", round_records(4, 1))
        assert (tmp_path / "s.jsonl").read_bytes() == before
        monkeypatch.undo()
        await store.append("s", round_records(4, 1))  # the same seqs: nothing was kept
        read = await store.read("s")
        await store.aclose()
    assert [record.seq for record in read.records] == list(range(1, 8))


async def test_a_cancelled_group_commit_waits_for_its_write_and_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread's call is never abandoned: the caller returns only once the write is done, so
    the file is in a state the store knows (here: the batch written whole, and accepted)."""
    writing = threading.Event()
    may_finish = threading.Event()
    real_write = files_module._write_all

    def slow_write(fd: int, data: bytes) -> None:
        writing.set()
        may_finish.wait(10)
        real_write(fd, data)

    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        monkeypatch.setattr(files_module, "_write_all", slow_write)
        returned = anyio.Event()
        scope = anyio.CancelScope()

        async def commit() -> None:
            with scope:
                await store.append("s", round_records(4, 1))
            returned.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(commit)
            await anyio.to_thread.run_sync(writing.wait, 10)
            scope.cancel()
            for _ in range(20):
                await anyio.lowlevel.checkpoint()
            assert not returned.is_set()  # still waiting for the thread
            may_finish.set()
            await returned.wait()
        monkeypatch.undo()
        await store.append("s", round_records(8, 2))  # the store knows where the log ends
        read = await store.read("s")
        await store.aclose()
    assert [record.seq for record in read.records] == list(range(1, 12))


async def test_aclose_waits_for_a_write_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writing = threading.Event()
    may_finish = threading.Event()
    real_write = files_module._write_all

    def slow_write(fd: int, data: bytes) -> None:
        writing.set()
        may_finish.wait(10)
        real_write(fd, data)

    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        monkeypatch.setattr(files_module, "_write_all", slow_write)
        closed = anyio.Event()

        async def close() -> None:
            await store.aclose()
            closed.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(store.append, "s", round_records(4, 1))
            await anyio.to_thread.run_sync(writing.wait, 10)
            [writer] = _writers(store)
            tasks.start_soon(close)
            for _ in range(20):
                await anyio.lowlevel.checkpoint()
            assert not closed.is_set()
            may_finish.set()
        assert not writer.is_alive()
    monkeypatch.undo()
    reader = JsonlStore(tmp_path)
    read = await reader.read("s")
    await reader.aclose()
    assert [record.seq for record in read.records] == list(range(1, 8))


# -- per-session locks ----------------------------------------------------------------------------


async def test_session_locks_are_dropped_once_nobody_holds_or_waits() -> None:
    locks = jsonl_module._SessionLocks()
    with anyio.fail_after(10):
        async with locks.hold(["b", "a", "a"]):
            assert locks.known() == ["a", "b"]
        with pytest.raises(ValueError, match="in the body"):
            async with locks.hold(["a"]):
                raise ValueError("in the body")
    assert locks.known() == []


async def test_a_cancelled_waiter_holds_nothing_and_leaves_no_slot() -> None:
    locks = jsonl_module._SessionLocks()
    holding = anyio.Event()
    may_leave = anyio.Event()

    async def hold_a() -> None:
        async with locks.hold(["a"]):
            holding.set()
            await may_leave.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hold_a)
            await holding.wait()
            with anyio.move_on_after(0) as waiting:
                async with locks.hold(["a", "b"]):  # waits for "a" before it takes "b"
                    pytest.fail("entered while another held 'a'")
            assert waiting.cancelled_caught
            assert locks.known() == ["a"]
            async with locks.hold(["b"]):  # not left locked by the cancelled waiter
                pass
            may_leave.set()
    assert locks.known() == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
async def test_a_forked_process_commits_on_a_writer_thread_of_its_own(tmp_path: Path) -> None:
    """The writer thread does not survive a fork: the child's first commit starts its own
    instead of queueing for a thread that is not there (and waiting forever)."""
    store = JsonlStore(tmp_path)
    with anyio.fail_after(10):
        await store.create("parent", session_start())
        await store.create("child", session_start())
        await store.append_batches([("parent", round_records(4, 1))])
    assert len(_writers(store)) == 1

    async def child_commit() -> None:
        with anyio.fail_after(5):
            outcomes = await store.append_batches([("child", round_records(4, 1))])
        assert outcomes == {"child": None}

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            anyio.run(child_commit)
            code = 0
        finally:
            os._exit(code)
    try:
        with anyio.fail_after(20):
            _, status = await anyio.to_thread.run_sync(os.waitpid, pid, 0, abandon_on_cancel=True)
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)  # the child hangs: its commit waits for a dead thread
        await anyio.to_thread.run_sync(os.waitpid, pid, 0)
        raise
    assert os.waitstatus_to_exitcode(status) == 0
    with anyio.fail_after(10):
        records = (await JsonlStore(tmp_path).read("child")).records
        await store.aclose()
    assert [r.seq for r in records][-1] >= 4
