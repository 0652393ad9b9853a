"""One writer per session, from the runtime's side: it holds each live session's writer lease,
refuses a session another writer holds, renews what expires, and stops only the session whose
lease is lost. Real stores on real files (JSONL, SQLite) and real PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage import (
    Event,
    LogRepaired,
    RoundStarted,
    Runtime,
    SessionBusy,
    SessionLeaseLost,
    SessionLeaseLostEvent,
    Settings,
)
from stowage.core import ItemRecord, SessionRecord, TurnRecord
from stowage.storage import JsonlStore, LogStore, PostgresStore, SqliteStore
from stowage.storage._jsonl_lock import LeaseTable
from stowage.testing import FakeOpenAIServer, ScriptedModel

PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def settings(tmp_path: Path) -> Settings:
    return Settings(store=tmp_path / "st", workspace=Path(__file__).parent, tools="none")


def runtime(tmp_path: Path, store: LogStore) -> Runtime:
    return Runtime(settings(tmp_path), store=store, gateway=ScriptedModel(tool_rounds=0))


StoreFactory = Callable[..., LogStore]


@pytest.fixture(params=["jsonl", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Stores of one backing: every call is another writer (another store object)."""
    if request.param == "jsonl":
        return lambda **_: JsonlStore(tmp_path / "st")
    return lambda **kw: SqliteStore(tmp_path / "st.db", **kw)


async def log_of(make_store: StoreFactory, session_id: str) -> tuple[object, ...]:
    reader = make_store()
    try:
        return (await reader.read(session_id, repair=False)).records
    finally:
        await reader.aclose()


async def test_a_live_session_holds_its_lease_until_closed_or_hibernated(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    with anyio.fail_after(30):
        other = make_store()
        async with runtime(tmp_path, make_store()) as rt:
            await rt.send("s1", "hello")
            with pytest.raises(SessionBusy) as busy:
                await other.acquire("s1")
            assert busy.value.holder is not None and busy.value.holder.pid == os.getpid()
            await rt.close("s1")
            lease = await other.acquire("s1")  # given back on close
            await lease.release()
            await rt.send("s1", "again")
            with pytest.raises(SessionBusy):
                await other.acquire("s1")
            assert await rt.hibernate("s1")
            lease = await other.acquire("s1")  # given back on hibernate
            await lease.release()
        await other.aclose()


async def test_open_resume_and_send_refuse_a_session_another_writer_holds(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    with anyio.fail_after(30):
        async with runtime(tmp_path, make_store()) as rt:
            await rt.send("held", "hello")
        before = await log_of(make_store, "held")
        holder = make_store()
        lease = await holder.acquire("held")
        async with runtime(tmp_path, make_store()) as rt:
            for call in (rt.open, rt.resume, lambda sid: rt.send(sid, "again")):
                with pytest.raises(SessionBusy) as busy:
                    await call("held")
                assert busy.value.session_id == "held"
                assert busy.value.holder is not None
                assert busy.value.holder.pid == os.getpid()
                assert busy.value.holder.owner == lease.holder.owner
                assert rt.sessions == {}  # nothing started
        assert await log_of(make_store, "held") == before
        await lease.release()
        await holder.aclose()


async def test_create_refuses_an_id_another_process_is_creating(tmp_path: Path) -> None:
    """JSONL: the writer lease is a lock on the session's byte of ``.leases.lock``; a log
    being created by another writer (its lease held, no log yet) is busy, and nothing is
    written."""
    with anyio.fail_after(30):
        root = tmp_path / "st"
        root.mkdir()
        other = LeaseTable(str(root), "elsewhere:1:ab")
        try:
            other.take("fresh", str(root / "fresh.lock"))
            async with runtime(tmp_path, JsonlStore(root)) as rt:
                with pytest.raises(SessionBusy):
                    await rt.create("fresh")
                with pytest.raises(SessionBusy):
                    await rt.send("fresh", "hello")
                assert rt.sessions == {}
        finally:
            other.close()
        assert not (root / "fresh.jsonl").exists()


async def test_resume_reports_the_torn_tail_its_lease_cut(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with runtime(tmp_path, JsonlStore(tmp_path / "st")) as rt:
            await rt.send("torn", "hello")
        log = tmp_path / "st" / "torn.jsonl"
        whole = log.read_bytes()
        log.write_bytes(whole + b'{"v":1,"seq":99,"ty')
        events: list[Event] = []
        async with runtime(tmp_path, JsonlStore(tmp_path / "st")) as rt:
            rt.subscribe(events.append)
            await rt.resume("torn")
            assert log.read_bytes() == whole  # cut by the lease holder, before the read
        repaired = [e for e in events if isinstance(e, LogRepaired)]
        assert len(repaired) == 1
        assert repaired[0].bytes_removed == len(b'{"v":1,"seq":99,"ty')
        assert repaired[0].line == whole.count(b"\n") + 1


async def test_a_live_session_keeps_an_expiring_lease_by_renewing_it(tmp_path: Path) -> None:
    """SQLite leases expire 0.3 s after their last renewal: a session live for 4 TTLs is still
    held (without renewals another writer could take it after one)."""
    with anyio.fail_after(30):
        store = SqliteStore(tmp_path / "st.db", lease_ttl=0.3, lease_renew_every=0.05)
        other = SqliteStore(tmp_path / "st.db")
        async with runtime(tmp_path, store) as rt:
            await rt.send("kept", "hello")
            await anyio.sleep(1.2)  # time passing is what is tested, not a synchronisation
            with pytest.raises(SessionBusy):
                await other.acquire("kept")
            assert (await rt.send("kept", "still mine")).stopped == "answered"
        await other.aclose()


def expire_sqlite_lease(path: Path, session_id: str) -> None:
    """As if the holder had stalled past its TTL (a paused VM, a long GC)."""
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE leases SET expires = 0 WHERE session_id = ?", (session_id,))


async def take_over(thief: LogStore, expire: Callable[[], None], session_id: str) -> None:
    """Expire the session's lease and take it; a renewal landing in between wins the race, so
    try again."""
    for _ in range(100):
        expire()
        try:
            await thief.acquire(session_id)
            return
        except SessionBusy:
            continue
    raise AssertionError("could not take the lease over")


def lease_lost_waiter(rt: Runtime) -> tuple[anyio.Event, list[SessionLeaseLostEvent]]:
    lost = anyio.Event()
    seen: list[SessionLeaseLostEvent] = []

    def on_event(event: Event) -> None:
        if isinstance(event, SessionLeaseLostEvent):
            seen.append(event)
            lost.set()

    rt.subscribe(on_event)
    return lost, seen


async def test_a_renewal_that_finds_the_lease_taken_stops_that_session_only(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        path = tmp_path / "st.db"
        store = SqliteStore(path, lease_ttl=30, lease_renew_every=0.05)
        thief = SqliteStore(path)
        async with runtime(tmp_path, store) as rt:
            lost, seen = lease_lost_waiter(rt)
            victim = await rt.open("victim")
            await victim.send("hello")
            await rt.send("bystander", "hello")
            await take_over(thief, lambda: expire_sqlite_lease(path, "victim"), "victim")
            taken_at = len((await thief.read("victim", repair=False)).records)
            await lost.wait()
            assert [e.session_id for e in seen] == ["victim"]
            assert "victim" not in rt.sessions and victim.stopped
            assert isinstance(victim.failed, SessionLeaseLost)
            with pytest.raises(SessionLeaseLost):
                await victim.send("one more")
            with pytest.raises(SessionBusy):  # the thief holds it now
                await rt.send("victim", "one more")
            assert (await rt.send("bystander", "still here")).stopped == "answered"
            assert "bystander" in rt.sessions
        assert len((await thief.read("victim", repair=False)).records) == taken_at
        await thief.aclose()


async def fenced_append_stops_only_its_session(
    tmp_path: Path, store: LogStore, thief: LogStore, take: Callable[[], Awaitable[None]]
) -> tuple[list[Any], list[Any]]:
    """No renewal noticed the takeover (the interval is long): the next append is refused,
    the asker gets ``SessionLeaseLost``, the other session goes on. Returns the victim's log
    as the thief read it at the takeover and after the refused turn (the same if nothing of
    the turn was written)."""
    async with runtime(tmp_path, store) as rt:
        lost, seen = lease_lost_waiter(rt)
        await rt.send("victim", "hello")
        await rt.send("bystander", "hello")
        await take()
        before = (await thief.read("victim", repair=False)).records
        with pytest.raises(SessionLeaseLost) as raised:
            await rt.send("victim", "this must not be written")
        assert raised.value.session_id == "victim"
        await lost.wait()
        assert [e.session_id for e in seen] == ["victim"]
        assert "fenced" in seen[0].error
        assert (await rt.send("bystander", "still here")).stopped == "answered"
    after = (await thief.read("victim", repair=False)).records
    await thief.aclose()
    return list(before), list(after)


async def test_an_append_fenced_by_a_takeover_stops_that_session_without_writing_sqlite(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        path = tmp_path / "st.db"
        thief = SqliteStore(path)

        async def take() -> None:
            await take_over(thief, lambda: expire_sqlite_lease(path, "victim"), "victim")

        store = SqliteStore(path, lease_ttl=300, lease_renew_every=200)
        before, after = await fenced_append_stops_only_its_session(tmp_path, store, thief, take)
        assert after == before


async def test_an_append_fenced_by_a_takeover_stops_that_session_without_writing_postgres(
    tmp_path: Path, pg_schema: str
) -> None:
    with anyio.fail_after(30):
        thief = PostgresStore(PG_DSN, schema=pg_schema)

        async def take() -> None:
            conn = await asyncpg.connect(PG_DSN, timeout=3)
            try:
                await conn.execute(
                    f'UPDATE "{pg_schema}".stowage_sessions '
                    "SET lease_expires = now() - interval '1 hour' WHERE session_id = $1",
                    "victim",
                )
            finally:
                await conn.close()
            await thief.acquire("victim")

        store = PostgresStore(PG_DSN, schema=pg_schema, lease_ttl=300, lease_renew_every=200)
        before, after = await fenced_append_stops_only_its_session(tmp_path, store, thief, take)
        assert after == before


async def test_an_interrupted_runtime_abandons_a_model_call_at_once_and_writes_nothing_half_done(
    tmp_path: Path,
) -> None:
    """Cancelled (Ctrl-C) in the middle of a 30-second model call: out in well under a second,
    the lease given back, the log holding the user's message and no half round."""
    with anyio.fail_after(20):
        async with FakeOpenAIServer(latency=30) as server:
            live = Settings(
                store=tmp_path / "st",
                workspace=Path(__file__).parent,
                tools="none",
                model="fake-model",
                base_url=server.base_url,
                api_key="sk-test",
            )
            sampling = anyio.Event()
            with anyio.CancelScope() as ctrl_c:
                async with Runtime(live) as rt, anyio.create_task_group() as tg:
                    rt.subscribe(lambda e: sampling.set() if isinstance(e, RoundStarted) else None)
                    tg.start_soon(rt.send, "cut", "hello")
                    await sampling.wait()  # the model call is going out: Ctrl-C now
                    cancelled = anyio.current_time()
                    ctrl_c.cancel()
            # a bound a quiet machine meets, times the load per core (the suite's slowness())
            slowness = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
            assert anyio.current_time() - cancelled < 3 * slowness
        store = JsonlStore(tmp_path / "st")
        lease = await store.acquire("cut")  # free again
        records = (await store.read("cut", repair=False)).records
        await lease.release()
        await store.aclose()
        assert [type(r) for r in records] == [SessionRecord, ItemRecord, TurnRecord]
