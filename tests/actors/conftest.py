"""A sampler's helpers without a sampler: a real ``Journal`` on the real persistence actor.

- ``rounds_log(outputs)``: the records of a session with one committed tool round per output
  (no usage reported, so every figure is the estimate: characters / 4).
- ``journal_on``: ``async with journal_on(settings, records) as rig:`` runs the persistence
  actor over an in-memory store; ``rig.journal`` starts from ``records`` replayed,
  ``rig.written`` is every record it made durable since and ``rig.events`` what was published.
  No model is reachable: a helper that calls one fails the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import anyio
import pytest
from stowage.actors import Append, SessionContext, Slot, mailbox, run_persistence
from stowage.actors._journal import Journal
from stowage.core import (
    Event,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    LogStore,
    ModelGateway,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    Settings,
    SystemMessage,
    UserMessage,
    replay,
)
from stowage.policy import Accounting
from stowage.tools import ToolRegistry

SESSION = "helpers"


@dataclass(eq=False)
class Rig:
    """A journal on a running persistence actor, and what came out of it."""

    journal: Journal
    #: records made durable since the start, in order
    written: list[Record]
    events: list[Event]

    def published(self, kind: type[Any]) -> list[Any]:
        """The events of type ``kind``, in order."""
        return [e for e in self.events if isinstance(e, kind)]


JournalOn = Callable[[Settings, Sequence[Record]], AbstractAsyncContextManager[Rig]]


class _ListStore:
    """As much of a ``LogStore`` as the persistence actor uses: it only appends batches."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> dict[str, Exception | None]:
        for _, records in batches:
            self.records.extend(records)
        return {session_id: None for session_id, _ in batches}


class _NoModel:
    """A gateway the helpers must never reach: compaction plans come from the compactor."""

    async def create(self, request: object) -> object:
        raise AssertionError("a sampler helper called the model")

    def stream(self, request: object) -> object:
        raise AssertionError("a sampler helper called the model")

    async def aclose(self) -> None:
        return None


def _rounds_log(outputs: Sequence[str]) -> list[Record]:
    """session, system, user, then one committed tool round per output, no usage reported."""
    records: list[Record] = [
        SessionRecord(seq=1, model="mystery"),
        ItemRecord(seq=2, item=SystemMessage(text="be brief")),
        ItemRecord(seq=3, item=UserMessage(text="read every file")),
    ]
    for n, output in enumerate(outputs, start=1):
        seq = records[-1].seq
        call = FunctionCall(call_id=f"c{n}", name="read", arguments="{}")
        records += [
            ItemRecord(seq=seq + 1, item=call, round=n),
            ItemRecord(seq=seq + 2, item=FunctionCallOutput(call_id=f"c{n}", output=output), round=n),
            RoundCommittedRecord(seq=seq + 3, round=n, usage=None, first_seq=seq + 2, last_seq=seq + 3),
        ]  # fmt: skip
    return records


@pytest.fixture
def rounds_log() -> Callable[[Sequence[str]], list[Record]]:
    return _rounds_log


@pytest.fixture
def journal_on() -> JournalOn:
    @asynccontextmanager
    async def running(settings: Settings, records: Sequence[Record]) -> AsyncIterator[Rig]:
        store = _ListStore()
        events: list[Event] = []
        box = mailbox(8, Append)
        ctx = SessionContext(
            session_id=SESSION,
            settings=settings,
            gateway=cast(ModelGateway, _NoModel()),
            tools=ToolRegistry(),
            publish=events.append,
            persistence=box.send,
            write_timeout=5.0,
        )
        journal = Journal(
            ctx=ctx,
            state=replay(SESSION, records),
            compactor=Slot(),
            accounting=Accounting.of(settings, ()),
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_persistence, cast(LogStore, store), box.receive)
            async with box.send:
                yield Rig(journal=journal, written=store.records, events=events)

    return running
