"""Nothing lost, nothing leaked: one session's bad append in a group commit fails that session
only. Thirty appends wait for the real persistence actor, so they go to the store as one group
commit; one of them is poisoned (a seq gap, a record that cannot be encoded, a session another
writer holds, a session whose lease was taken over), and the 29 others are acknowledged,
durable and readable from a fresh store, on every store.

PostgreSQL is at ``STOWAGE_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
skipped when none answers, except under CI (``CI`` set).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.actors import Append, Reply, Slot, mailbox, run_persistence
from stowage.core import (
    FencingError,
    FunctionCallOutput,
    ItemRecord,
    LogStore,
    Record,
    SessionBusy,
    StoreError,
)
from stowage.policy import Snapshot, TokenStatus
from stowage.storage import JsonlStore, PostgresStore, SqliteStore
from stowage.storage.contract import round_records, session_start

DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
SESSIONS = [f"s{n:02d}" for n in range(30)]
POISONED = "s17"
HEALTHY = [sid for sid in SESSIONS if sid != POISONED]
TTL = 0.5
HELD = 60.0  # a lease TTL no test outlives

OpenStore = Callable[[float], Awaitable[LogStore]]  # a store over the same data, with a lease TTL


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenStore]:
    """Opens a store of the kind, over the same data every time (a fresh PostgreSQL schema)."""
    kind = request.param
    if kind == "jsonl":

        async def jsonl(ttl: float) -> LogStore:  # a JSONL lease never expires: no ttl
            return JsonlStore(tmp_path / "logs")

        yield jsonl
    elif kind == "sqlite":

        async def sqlite(ttl: float) -> LogStore:
            return SqliteStore(tmp_path / "logs.db", lease_ttl=ttl)

        yield sqlite
    else:
        try:
            conn = await asyncpg.connect(DSN, timeout=3)
        except (OSError, asyncpg.PostgresError) as exc:
            if os.environ.get("CI"):
                pytest.fail(f"no PostgreSQL at {DSN} under CI: {exc}")
            pytest.skip(f"no PostgreSQL at {DSN}: {exc}")
        schema = f"stowage_test_{secrets.token_hex(6)}"

        async def postgres(ttl: float) -> LogStore:
            return PostgresStore(DSN, schema=schema, max_size=4, lease_ttl=ttl)

        try:
            yield postgres
        finally:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await conn.close()


@dataclass(eq=False)
class CountingStore:
    """A real store, and the sessions of every group commit the persistence actor made."""

    store: LogStore
    groups: list[list[str]] = field(default_factory=list)

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> dict[str, Exception | None]:
        self.groups.append([session_id for session_id, _ in batches])
        return dict(await self.store.append_batches(batches))


@dataclass(eq=False)
class Sent:
    """One append handed to the actor, and what it answered."""

    append: Append
    notify: Slot[Snapshot]
    outcome: Exception | None = None


def _snapshot(session_id: str) -> Snapshot:
    return Snapshot(
        session_id=session_id,
        cause="round",
        round=1,
        turn=1,
        turn_open=True,
        history=(),
        usage=None,
        last_seq=7,
        last_compaction_seq=0,
        status=TokenStatus(
            tokens=0, estimated=True, reported=None, estimated_since=0, chars_per_token=4.0
        ),
    )


async def _through_the_actor(
    store: LogStore, batches: dict[str, Sequence[Record]]
) -> tuple[dict[str, Sent], list[list[str]]]:
    """Queue one append per session, then run the persistence actor until it has served them:
    all are waiting when it starts, so it writes them as one group commit."""
    counting = CountingStore(store)
    box = mailbox(len(batches), Append)
    sent: dict[str, Sent] = {}
    for session_id, records in batches.items():
        notify: Slot[Snapshot] = Slot()
        append = Append(
            session_id=session_id,
            records=tuple(records),
            reply=Reply(),
            boundary=_snapshot(session_id),
            notify=notify,
        )
        sent[session_id] = Sent(append=append, notify=notify)
        box.send.send_nowait(append)
    box.send.close()
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_persistence, cast(LogStore, counting), box.receive)
    for each in sent.values():
        assert each.append.reply.done, "an append got no answer"
        try:
            await each.append.reply.wait()
        except StoreError as exc:
            each.outcome = exc
    return sent, counting.groups


def _unencodable() -> list[Record]:
    output = FunctionCallOutput(call_id="c", output="a tool's bytes \udcff, not UTF-8")
    return [ItemRecord(seq=4, item=output)]


async def _check_isolated(
    open_store: OpenStore,
    poison: Sequence[Record],
    expected: type[StoreError],
    *,
    held_elsewhere: bool = False,
    taken_over: bool = False,
) -> None:
    # a lease expires only where the test means it to: a busy machine that delays the holder's
    # renewal past a short TTL would hand the session over behind the test's back
    ttl = TTL if taken_over else HELD
    writer = await open_store(ttl)
    other = await open_store(ttl)
    try:
        for session_id in SESSIONS:
            creator = other if held_elsewhere and session_id == POISONED else writer
            await creator.create(session_id, session_start())
        if taken_over:
            await anyio.sleep(TTL + 0.3)  # the writer stalls; its leases expire
            await (await other.acquire(POISONED)).release()  # taken over, then let go
        batches = {sid: round_records(4, 1) for sid in SESSIONS}
        batches[POISONED] = poison
        sent, groups = await _through_the_actor(writer, batches)
    finally:
        with anyio.CancelScope(shield=True):
            await writer.aclose()
            await other.aclose()
    assert groups == [SESSIONS], f"not one group commit of the 30: {groups}"
    refused = sent[POISONED].outcome
    assert isinstance(refused, expected), f"the poisoned append got {refused!r}"
    assert sent[POISONED].notify.peek() is None, "a refused round reached the compactor"
    failed = {sid: sent[sid].outcome for sid in HEALTHY if sent[sid].outcome is not None}
    assert failed == {}, f"{len(failed)} of 29 healthy appends failed: {failed}"
    assert all(sent[sid].notify.peek() is not None for sid in HEALTHY)
    fresh = await open_store(TTL)
    try:
        for session_id in HEALTHY:
            read = await fresh.read(session_id)
            assert list(read.records) == [*session_start(), *round_records(4, 1)], session_id
        assert list((await fresh.read(POISONED)).records) == session_start()
    finally:
        await fresh.aclose()


async def test_a_seq_gap_fails_only_its_session(open_store: OpenStore) -> None:
    with anyio.fail_after(30):
        await _check_isolated(open_store, round_records(9, 1), StoreError)


async def test_a_record_that_cannot_be_encoded_fails_only_its_session(
    open_store: OpenStore,
) -> None:
    with anyio.fail_after(30):
        await _check_isolated(open_store, _unencodable(), StoreError)


async def test_a_session_another_writer_holds_fails_only_itself(open_store: OpenStore) -> None:
    with anyio.fail_after(30):
        await _check_isolated(open_store, round_records(4, 1), SessionBusy, held_elsewhere=True)


async def test_a_fenced_session_fails_only_itself(
    open_store: OpenStore, request: pytest.FixtureRequest
) -> None:
    """A lease taken over by another writer (SQLite, PostgreSQL: leases expire)."""
    if "jsonl" in request.node.callspec.id:
        pytest.skip("a JSONL lease is a kernel lock: it never expires, so it is never taken over")
    with anyio.fail_after(30):
        await _check_isolated(open_store, round_records(4, 1), FencingError, taken_over=True)
