"""The store contract's checks of the writer lease: one writer per session, across stores and
processes, and for stores whose leases expire, the fence that stops a writer taken over."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from functools import partial

import anyio
from stowage.core import FencingError, Record, SessionBusy, SessionExists, StoreError, WriterLease

from ._contract_kit import (
    ExpiringStoreFactory,
    ExpiryCheck,
    StoreFactory,
    all_written,
    group_append,
    is_this_process,
    opened,
    raises,
    records_of,
    refused,
    round_records,
    session_start,
)

__all__ = [
    "EXPIRY_CHECKS",
    "check_fenced_session_among_30",
    "check_release_then_reacquire",
    "check_renewed_lease_outlives_its_ttl",
    "check_second_writer_refused_naming_the_holder",
    "check_taken_over_writer_is_fenced",
    "check_writer_in_another_process",
    "check_writer_that_let_go_is_refused",
]


async def check_second_writer_refused_naming_the_holder(open_store: StoreFactory) -> None:
    """While one store holds a session's lease (taken by ``create``, or handed out by
    ``acquire``), another store's acquire and appends raise ``SessionBusy`` naming the holder,
    and so does a second ``acquire`` through the holding store; readers are not refused."""
    log = session_start()
    async with opened(open_store) as holder, opened(open_store) as other:
        await holder.create("s1", log)
        busy = await raises(SessionBusy, other.acquire("s1"), "acquire by a second store")
        named = is_this_process(getattr(busy, "holder", None), "acquire by a second store")
        for store, what in ((other, "another store"), (holder, "the holding store")):
            seen = is_this_process(await store.lease_holder("s1"), f"lease_holder, {what}")
            assert seen.owner == named.owner, f"lease_holder through {what}: {seen}"
        assert str(os.getpid()) in str(busy), f"the message does not name the holder: {busy}"
        await raises(SessionBusy, other.append("s1", round_records(4, 1)), "append, 2nd store")
        grouped = group_append(other, "s1", round_records(4, 1))
        await raises(SessionBusy, grouped, "append_batches, 2nd store")
        lease = await holder.acquire("s1")  # hands out the lease create took
        assert isinstance(lease, WriterLease), f"{lease!r} is not a WriterLease"
        assert lease.session_id == "s1" and lease.token >= 1, lease
        assert lease.holder.owner == named.owner, "the holder named is not the lease's"
        again = await raises(SessionBusy, holder.acquire("s1"), "a second acquire, same store")
        is_this_process(getattr(again, "holder", None), "a second acquire through one store")
        await holder.append("s1", round_records(4, 1))
        log = [*log, *round_records(4, 1)]
        assert list(await records_of(other, "s1")) == log, "a reader was refused or saw old data"
        assert (await other.read_tail("s1", repair=False)).records == tuple(log)
        await raises(SessionBusy, other.acquire("s1"), "acquire after the reads")
        await raises(SessionExists, other.create("s1", session_start()), "create of a held log")
        await holder.append_batches([("s1", round_records(8, 2))])
        assert len(await records_of(holder, "s1")) == 11


async def check_release_then_reacquire(open_store: StoreFactory) -> None:
    """A released lease can be taken by another store, with a greater token, and back; a
    released lease cannot be renewed; closing a store releases its leases."""
    log: list[Record] = session_start()
    async with opened(open_store) as one, opened(open_store) as two:
        await one.create("s1", log)
        first = await one.acquire("s1")
        await first.renew()
        assert await one.renew_leases() == [], "a held lease reported lost"
        await first.release()
        await first.release()  # idempotent
        assert await one.lease_holder("s1") is None, "a released lease still has a holder"
        assert await two.lease_holder("s1") is None, "a released lease has a holder elsewhere"
        await raises(FencingError, first.renew(), "renew of a released lease")
        second = await two.acquire("s1")
        assert second.token > first.token, f"token {second.token} after {first.token}"
        await two.append("s1", round_records(4, 1))
        log += round_records(4, 1)
        await second.release()
        async with await one.acquire("s1") as third:
            assert third.token > second.token
            await one.append("s1", round_records(8, 2))
            log += round_records(8, 2)
        fourth = await two.acquire("s1")  # the async with released it
        assert fourth.token > third.token
        await two.append("s1", round_records(12, 3))
        log += round_records(12, 3)
    async with opened(open_store) as three:  # closing two released fourth
        fifth = await three.acquire("s1")
        assert fifth.token > fourth.token
        assert list(await records_of(three, "s1")) == log


async def check_writer_that_let_go_is_refused(open_store: StoreFactory) -> None:
    """A store that released its lease, which another store then took, cannot write: its
    append is refused and writes nothing, and its old lease cannot be renewed."""
    log = session_start()
    async with opened(open_store) as stale, opened(open_store) as fresh:
        await stale.create("s1", log)
        old = await stale.acquire("s1")
        await old.release()
        new = await fresh.acquire("s1")
        await raises(StoreError, stale.append("s1", round_records(4, 1)), "stale append")
        await raises(FencingError, old.renew(), "renew of the stale lease")
        assert list(await records_of(fresh, "s1")) == log, "the stale writer wrote"
        await fresh.append("s1", round_records(4, 1))
        await new.release()
        assert len(await records_of(stale, "s1")) == 7


# -- leases that expire ---------------------------------------------------------------------------

_TTL = 0.5


async def check_taken_over_writer_is_fenced(open_store: ExpiringStoreFactory) -> None:
    """A lease left unrenewed past its TTL can be taken by another store; from then on the
    first holder cannot write one record, renew, or acquire while the new lease is live."""
    log = session_start()
    async with (
        opened(partial(open_store, _TTL)) as slow,
        opened(partial(open_store, _TTL)) as other,
    ):
        await slow.create("s1", log)
        await slow.create("s2", log)
        lease = await slow.acquire("s1")
        every = lease.renew_every
        assert every is not None and 0 < every < _TTL, f"renew_every {every} for a TTL {_TTL}"
        await raises(SessionBusy, other.acquire("s1"), "acquire of a live lease")
        await anyio.sleep(_TTL + 0.3)  # slow stalls; its leases expire
        taken = await other.acquire("s1")
        assert taken.token > lease.token
        await other.append("s2", round_records(4, 1))  # an implicit lease is taken over too
        for session_id in ("s1", "s2"):
            batch = round_records(4, 1)
            await raises(FencingError, slow.append(session_id, batch), f"stale append {session_id}")
            grouped = group_append(slow, session_id, batch)
            await raises(FencingError, grouped, "stale append_batches")
        await raises(FencingError, lease.renew(), "renew of a lease taken over")
        assert await slow.renew_leases() == ["s1", "s2"]
        await taken.renew()
        await raises(SessionBusy, slow.acquire("s1"), "acquire while the new lease is live")
        assert list(await records_of(other, "s1")) == log, "the fenced writer wrote"
        await other.append("s1", round_records(4, 1))
        await lease.release()  # gives up nothing of the new holder's
        await other.append("s1", round_records(8, 2))
        await taken.renew()
        assert len(await records_of(other, "s1")) == 11


async def check_renewed_lease_outlives_its_ttl(open_store: ExpiringStoreFactory) -> None:
    """A lease renewed in time stays with its holder well past its TTL."""
    async with (
        opened(partial(open_store, _TTL)) as holder,
        opened(partial(open_store, _TTL)) as other,
    ):
        await holder.create("s1", session_start())
        lease = await holder.acquire("s1")
        for n in range(6):
            await anyio.sleep(_TTL / 3)
            if n % 2:
                assert await holder.renew_leases() == [], "a renewed lease reported lost"
            else:
                await lease.renew()
            await raises(SessionBusy, other.acquire("s1"), f"acquire after {n + 1} renewals")
        await holder.append("s1", round_records(4, 1))
        await lease.release()
        await other.acquire("s1")


async def check_fenced_session_among_30(open_store: ExpiringStoreFactory) -> None:
    """A group commit of 30 sessions, one of which was taken over by another store since: that
    one gets ``FencingError`` and keeps the new holder's log; the 29 others (their leases
    expired, but nobody took them) are written and durable."""
    ids = [f"s{n:02d}" for n in range(30)]
    async with (
        opened(partial(open_store, _TTL)) as slow,
        opened(partial(open_store, _TTL)) as other,
    ):
        for session_id in ids:
            await slow.create(session_id, session_start())
        await anyio.sleep(_TTL + 0.3)  # slow stalls; its leases expire
        taken = await other.acquire("s13")
        outcomes = await slow.append_batches([(sid, round_records(4, 1)) for sid in ids])
        assert set(outcomes) == set(ids), f"outcomes for {sorted(outcomes)}"
        refused(FencingError, outcomes, "s13", "a session taken over")
        healthy = [sid for sid in ids if sid != "s13"]
        all_written(outcomes, healthy, "a group with a fenced session")
        await other.append("s13", round_records(4, 1))
        await taken.release()
    async with opened(partial(open_store, _TTL)) as fresh:
        for session_id in ids:
            log = [*session_start(), *round_records(4, 1)]
            assert list(await records_of(fresh, session_id)) == log, session_id


EXPIRY_CHECKS: tuple[ExpiryCheck, ...] = (
    check_taken_over_writer_is_fenced,
    check_renewed_lease_outlives_its_ttl,
    check_fenced_session_among_30,
)
"""Checks for stores whose leases expire, in a stable order."""


# -- a second process ------------------------------------------------------------------------------

_CHILD = """
import json, os
import anyio
from stowage.storage import *

async def main():
    store = {store}
    lease = await store.acquire({session_id!r})
    print(json.dumps({{"pid": os.getpid(), "token": lease.token}}), flush=True)
    while True:
        await anyio.sleep(lease.renew_every or 3600)
        await lease.renew()

anyio.run(main)
"""


async def check_writer_in_another_process(
    open_store: StoreFactory, store_source: str, *, takeover_within: float = 0.0
) -> None:
    """A session another process holds is refused with ``SessionBusy`` naming that process; once the
    process is killed (SIGKILL), its lease frees within ``takeover_within`` seconds."""
    async with opened(open_store) as store:
        await store.create("s1", session_start())
    code = _CHILD.format(store=store_source, session_id="s1")
    async with await anyio.open_process([sys.executable, "-c", code]) as child:
        try:
            line = b""
            assert child.stdout is not None and child.stderr is not None
            with anyio.move_on_after(30):
                async for chunk in child.stdout:
                    line += chunk
                    if b"\n" in line:
                        break
            if b"\n" not in line:
                error = b""
                with anyio.move_on_after(1):
                    async for chunk in child.stderr:
                        error += chunk
                raise AssertionError(f"the child did not take the lease: {error.decode()}")
            held = json.loads(line)
            assert held["pid"] == child.pid
            async with opened(open_store) as store:
                busy = await raises(SessionBusy, store.acquire("s1"), "acquire held elsewhere")
                holder = getattr(busy, "holder", None)
                assert holder is not None and holder.pid == child.pid, f"holder {holder}"
                seen = await store.lease_holder("s1")
                assert seen is not None and seen.pid == child.pid, f"lease_holder {seen}"
                assert holder.host == socket.gethostname(), f"holder {holder}"
                assert str(child.pid) in str(busy), f"the message does not name the pid: {busy}"
                await raises(SessionBusy, store.append("s1", round_records(4, 1)), "append")
                assert list(await records_of(store, "s1")) == session_start()
                child.send_signal(signal.SIGKILL)
                await child.wait()
                deadline = anyio.current_time() + takeover_within
                while True:
                    try:
                        lease = await store.acquire("s1")
                        break
                    except SessionBusy:
                        if anyio.current_time() >= deadline:
                            raise AssertionError(
                                f"the lease of the killed writer still blocks after "
                                f"{takeover_within} s"
                            ) from None
                        await anyio.sleep(0.1)
                assert lease.token > held["token"], f"token {lease.token} after {held['token']}"
                seen = await store.lease_holder("s1")
                assert seen is not None and seen.pid == os.getpid(), f"lease_holder {seen}"
                await store.append("s1", round_records(4, 1))
                assert len(await records_of(store, "s1")) == 7
        finally:
            if child.returncode is None:
                child.kill()
                with anyio.CancelScope(shield=True):
                    await child.wait()
