"""The ``Journal``: state changes only by records made durable, snapshots for the compactor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
from stowage.core import (
    ItemRecord,
    ProtectedRecord,
    Record,
    Settings,
    UserMessage,
    replay,
)

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
