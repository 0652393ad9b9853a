"""The ``Journal``: state changes only by records made durable, snapshots for the compactor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import anyio
from stowage.actors import Append, SessionContext, Slot, mailbox
from stowage.actors._journal import Journal
from stowage.core import (
    ItemRecord,
    ModelGateway,
    ProtectedRecord,
    Record,
    Settings,
    UserMessage,
    replay,
)
from stowage.policy import Accounting
from stowage.tools import ToolRegistry

# the fixtures of tests/actors/conftest.py
JournalOn = Callable[[Settings, Sequence[Record]], AbstractAsyncContextManager[Any]]
RoundsLog = Callable[[Sequence[str]], list[Record]]

SETTINGS = Settings(model="mystery", compact_threshold=1000, tools="none")


async def test_a_write_is_folded_into_the_state_and_made_durable_in_order(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        log = rounds_log(["z" * 100])
        async with journal_on(SETTINGS, log) as rig:
            seq = rig.journal.state.last_seq
            batch = [ItemRecord(seq=seq + 1, item=UserMessage(text="and now?"))]
            await rig.journal.write(batch)
            await rig.journal.write([])  # an empty batch writes nothing
        assert rig.written == batch
        assert rig.journal.state.items == replay("helpers", [*log, *batch]).items
        assert rig.journal.compactor.peek() is None


async def test_the_compactor_gets_the_snapshot_of_a_boundary_batch_once_it_is_durable(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(SETTINGS, rounds_log(["z" * 100] * 2)) as rig:
            seq = rig.journal.state.last_seq
            ops = ({"op": "add_constraint", "id": "c1", "text": "keep it short"},)
            batch = [ProtectedRecord(seq=seq + 1, ops=ops, source="user")]
            await rig.journal.write(batch, boundary="applied")
            assert rig.written == batch  # in the store by the time the compactor has it
            snapshot = rig.journal.compactor.take()
        assert snapshot is not None and snapshot.cause == "applied"
        assert snapshot.last_seq == seq + 1 and snapshot.round == 2
        assert rig.journal.boundary_seq == seq + 1
        assert snapshot.history == tuple(rig.journal.state.history)
        assert snapshot.protected_text == rig.journal.protected_text()
        assert snapshot.protected_text is not None and "keep it short" in snapshot.protected_text
        # the figure of the next request, computed once for the compactor
        assert snapshot.status is not None and snapshot.status.tokens is not None


async def test_a_batch_that_ends_at_no_boundary_is_not_handed_to_the_compactor(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(SETTINGS, rounds_log(["z" * 100])) as rig:
            seq = rig.journal.state.last_seq
            await rig.journal.write([ItemRecord(seq=seq + 1, item=UserMessage(text="half"))])
        assert rig.journal.compactor.peek() is None and rig.journal.boundary_seq == 0


async def test_a_write_cancelled_in_flight_is_answered_before_its_task_goes(
    rounds_log: RoundsLog,
) -> None:
    """A write already sent to persistence is waited for even when its task is cancelled:
    the write returns once answered (its caller sees it done) and the cancellation lands at
    the task's next checkpoint."""
    with anyio.fail_after(5):
        box = mailbox(8, Append)
        ctx = SessionContext(
            session_id="helpers",
            settings=SETTINGS,
            gateway=cast(ModelGateway, object()),
            tools=ToolRegistry(),
            publish=lambda event: None,
            persistence=box.send,
            write_timeout=5.0,
        )
        journal = Journal(
            ctx=ctx,
            state=replay("helpers", rounds_log(["z" * 100])),
            compactor=Slot(),
            accounting=Accounting.of(SETTINGS, ()),
        )
        seq = journal.state.last_seq
        ended: list[bool] = []
        scope = anyio.CancelScope()

        async def write() -> None:
            with scope:
                await journal.write([ItemRecord(seq=seq + 1, item=UserMessage(text="now"))])
            ended.append(scope.cancelled_caught)

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            append = await box.receive.receive()
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            assert not ended  # still waiting for its answer
            append.reply.set(None)
        assert ended == [False]  # answered and returned; nothing else awaited in the scope
