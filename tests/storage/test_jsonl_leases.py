"""JSONL writer leases hold no descriptor per session: thousands of live sessions cost the store
a bounded number of descriptors, and the single-writer guarantee is what it was (one winner among
racing processes, two stores of one process exclude each other, a killed holder frees the lease,
two ids sharing a lock byte never unlock each other)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest
import stowage.storage._jsonl_lock as lock_module
from anyio.streams.buffered import BufferedByteReceiveStream
from stowage.core import SessionBusy, StoreError
from stowage.storage import JsonlStore
from stowage.storage._jsonl_lock import LEASE_FILE, lease_byte, lease_is_locked
from stowage.storage.contract import round_records, session_start


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
async def test_two_thousand_live_sessions_hold_a_bounded_number_of_descriptors(
    tmp_path: Path,
) -> None:
    """Every session stays leased (another store is refused each one), yet the store's
    descriptors stay within its log cache plus the lease file, not one per session."""
    sessions = [f"s{n}" for n in range(2_000)]
    with anyio.fail_after(100):
        before = open_descriptors()
        store = JsonlStore(tmp_path, durability="none", max_open_files=16)
        peak = 0
        for session_id in sessions:
            await store.create(session_id, session_start())
            await store.append(session_id, round_records(4, 1))
            peak = max(peak, open_descriptors() - before)
        held_everywhere = [lease_is_locked(str(tmp_path), sid) for sid in sessions]
        other = JsonlStore(tmp_path)
        for session_id in sessions[::250]:
            with pytest.raises(SessionBusy) as busy:
                await other.acquire(session_id)
            assert busy.value.holder is not None and busy.value.holder.pid == os.getpid()
        in_store = store.open_descriptors
        await store.aclose()
        await other.aclose()
        after = open_descriptors() - before
    assert all(held_everywhere)
    assert in_store == 16 + 1
    assert peak <= 16 + 1 + 2, f"{peak} descriptors for {len(sessions)} live sessions"
    assert after == 0


async def test_two_ids_on_one_byte_share_its_lock_and_free_it_with_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte shared by two sessions of one store stays locked until both are released; a
    store that does not hold it is refused either (a false conflict, never a missed one)."""
    monkeypatch.setattr(lock_module, "lease_byte", lambda session_id: 7)
    with anyio.fail_after(10):
        holder, other = JsonlStore(tmp_path), JsonlStore(tmp_path)
        for session_id in ("a", "b"):
            await holder.create(session_id, session_start())
        await (await holder.acquire("a")).release()  # b still holds byte 7
        with pytest.raises(SessionBusy):
            await other.acquire("a")
        await (await holder.acquire("b")).release()
        lease = await other.acquire("a")
        await holder.aclose()
        await other.aclose()
    assert lease.token == 2  # create's (handed out by acquire, then released), then this one


async def test_a_deleted_lease_file_is_refused_while_the_store_holds_leases(
    tmp_path: Path,
) -> None:
    """A store whose lease file was deleted under its leases takes no more: a writer on a new
    file would not see the leases it holds."""
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        await store.create("a", session_start())
        (tmp_path / LEASE_FILE).unlink()
        with pytest.raises(StoreError, match=r"\.leases\.lock was deleted or replaced"):
            await store.create("b", session_start())
        await store.append("a", round_records(4, 1))  # a's own lease is still held
        await store.aclose()
    assert not (tmp_path / "b.jsonl").exists()


async def test_a_planted_lease_file_symlink_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    root = tmp_path / "root"
    root.mkdir()
    (root / LEASE_FILE).symlink_to(outside)
    with anyio.fail_after(10):
        store = JsonlStore(root)
        with pytest.raises(StoreError, match="cannot lock"):
            await store.create("s", session_start())
        await store.aclose()
    assert outside.read_text() == "keep me"


def test_lease_bytes_are_stable_and_within_a_signed_offset() -> None:
    """Every process must agree on a session's byte, and a lock offset is a signed 64-bit one."""
    assert lease_byte("s-1") == lease_byte("s-1") != lease_byte("s-2")
    assert all(0 <= lease_byte(f"s{n}") < 2**63 for n in range(1000))


RACER = """
import json, os, sys
import anyio
from stowage.core import SessionBusy
from stowage.storage import JsonlStore

async def main():
    store = JsonlStore(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        lease = await store.acquire("s")
        print(json.dumps({"won": lease.token}), flush=True)
    except SessionBusy as busy:
        print(json.dumps({"busy": busy.holder.pid if busy.holder else None}), flush=True)
    sys.stdin.readline()  # hold whatever it got until the test is done

anyio.run(main)
"""


@pytest.mark.slow
async def test_racing_processes_get_one_writer_and_the_rest_name_it(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        store = JsonlStore(tmp_path)
        await store.create("s", session_start())
        await store.aclose()
        racers = [
            await anyio.open_process([sys.executable, "-c", RACER, str(tmp_path)]) for _ in range(4)
        ]
        lines = [BufferedByteReceiveStream(racer.stdout) for racer in racers if racer.stdout]
        try:
            for line in lines:
                assert await line.receive_until(b"\n", 1000) == b"ready"
            for racer in racers:
                assert racer.stdin is not None
                await racer.stdin.send(b"go\n")
            outcomes = {}
            for racer, line in zip(racers, lines, strict=True):
                outcomes[racer.pid] = json.loads(await line.receive_until(b"\n", 1000))
        finally:
            for racer in racers:
                racer.kill()
                await racer.wait()
    winners = [pid for pid, outcome in outcomes.items() if "won" in outcome]
    assert len(winners) == 1, outcomes
    assert all(o == {"busy": winners[0]} for p, o in outcomes.items() if p != winners[0])
