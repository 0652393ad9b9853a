"""``Pressure`` alone, on a real journal and applier, with the test playing the compactor.

Figures: no usage is reported, so tokens are characters / 4; the budget is the window less
the output reserve (no tools). Four 2,000-character outputs are ~2,016 tokens; twenty of 500
characters (too short to stub) are ~2,562.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

import anyio
import pytest
from stowage.actors import CommittedSnapshot, PlanOutcome, Slot
from stowage.actors._journal import Journal
from stowage.actors._messages import Plan, PlanFailed
from stowage.actors._plans import PlanApplier
from stowage.actors._pressure import Pressure
from stowage.core import (
    CompactionDecided,
    CompactionRecord,
    CompactionSkipped,
    CompactionWaited,
    ContextLengthExceeded,
    Microcompacted,
    MicrocompactRecord,
    Record,
    Settings,
    replay,
)

# the fixtures of tests/actors/conftest.py
JournalOn = Callable[[Settings, Sequence[Record]], AbstractAsyncContextManager[Any]]
RoundsLog = Callable[[Sequence[str]], list[Record]]

BIG_OUTPUTS = ["x" * 2000] * 4  # ~2,016 tokens, three outputs old enough to stub
SMALL_OUTPUTS = ["y" * 500] * 20  # ~2,562 tokens, none worth a stub


def watermark_settings(usable: int, **changes: Any) -> Settings:
    """Watermark mode with ``usable`` tokens for history; microcompaction spares one round."""
    return Settings(
        model="mystery",
        context_window=usable + 1000,
        max_output_tokens=1000,
        tools="none",
        keep_rounds=1,
        **changes,
    )


def pressure_on(journal: Journal, outcomes: Slot[PlanOutcome]) -> Pressure:
    return Pressure(journal.ctx, journal, PlanApplier(journal.ctx, journal), outcomes)


def plan_for(snapshot: CommittedSnapshot) -> Plan:
    """What the compactor answers a snapshot with."""
    return Plan(
        round=snapshot.round,
        summary="twenty reads, all fine",
        covers_through=snapshot.last_seq,
        reason=snapshot.request.reason if snapshot.request else "test",
        tokens_before=snapshot.request.tokens if snapshot.request else None,
        estimated=True,
        based_on_compaction_seq=snapshot.last_compaction_seq,
    )


async def test_below_the_soft_mark_nothing_is_written_or_asked(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(watermark_settings(10_000), rounds_log(BIG_OUTPUTS)) as rig:
            pressure = pressure_on(rig.journal, Slot())
            assert pressure.active
            await pressure.after_commit()
        assert rig.written == [] and rig.events == []
        assert rig.journal.compactor.peek() is None


async def test_in_threshold_mode_the_watermark_policy_stays_out_of_the_way(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        settings = Settings(model="mystery", compact_threshold=100, tools="none")
        async with journal_on(settings, rounds_log(BIG_OUTPUTS)) as rig:
            pressure = pressure_on(rig.journal, Slot())
            assert pressure.threshold == 100 and not pressure.active
            await pressure.after_commit()
            await pressure.before_request()
        assert rig.written == [] and rig.journal.compactor.peek() is None


async def test_the_soft_mark_stubs_old_outputs_without_asking_for_a_plan(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        log = rounds_log(BIG_OUTPUTS)
        async with journal_on(watermark_settings(2800), log) as rig:
            pressure = pressure_on(rig.journal, Slot())
            assert pressure.decision().action == "microcompact"
            await pressure.after_commit()
            assert pressure.decision().action == "none"
        [record] = rig.written
        # one batch of every old output: it frees at least micro_min_free (20%) of 2800
        assert isinstance(record, MicrocompactRecord) and len(record.stubbed) == 3
        assert record.tokens_before - record.tokens_after >= 0.20 * 2800
        assert rig.journal.state.stubbed == set(record.stubbed)
        assert replay("helpers", [*log, record]).stubbed == rig.journal.state.stubbed
        assert [e.action for e in rig.published(CompactionDecided)] == ["microcompact"]
        [event] = rig.published(Microcompacted)
        assert event.stubbed == 3 and event.tokens_after < event.tokens_before
        assert rig.journal.compactor.peek() is None and pressure.requested is None


async def test_microcompaction_stubs_nothing_when_the_batch_would_free_too_little(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        # three stubbable outputs free ~1,425 tokens: less than 60% of 2800
        settings = watermark_settings(2800, micro_min_free=0.6)
        async with journal_on(settings, rounds_log(BIG_OUTPUTS)) as rig:
            pressure = pressure_on(rig.journal, Slot())
            assert pressure.decision().action == "microcompact"
            await pressure.after_commit()
        assert not [r for r in rig.written if isinstance(r, MicrocompactRecord)]
        assert rig.published(Microcompacted) == []


async def test_after_a_batch_the_prefix_is_left_alone_until_the_soft_mark_is_crossed_again(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        # 2100 usable, three rounds kept: the one old output is stubbed (96% -> ~73%), still
        # above the soft mark
        settings = watermark_settings(2100, compact_mark=0.99, hard_mark=1.0).with_(keep_rounds=3)
        async with journal_on(settings, rounds_log(BIG_OUTPUTS)) as rig:
            pressure = pressure_on(rig.journal, Slot())
            await pressure.after_commit()
            first = [r for r in rig.written if isinstance(r, MicrocompactRecord)]
            assert len(first) == 1 and len(first[0].stubbed) == 1
            assert pressure.decision().action == "microcompact"  # still above the soft mark
            # two more outputs become old enough to stub: the next round still leaves them
            pressure.marks = replace(pressure.marks, keep_rounds=1)
            await pressure.after_commit()
            again = [r for r in rig.written if isinstance(r, MicrocompactRecord)]
            assert again == first  # no second break while it stays above the soft mark


async def test_the_compaction_mark_asks_for_a_plan_in_the_background(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(watermark_settings(2900), rounds_log(SMALL_OUTPUTS)) as rig:
            pressure = pressure_on(rig.journal, Slot())
            await pressure.after_commit()  # returns: rounds go on while the compactor works
            snapshot = rig.journal.compactor.take()
        assert rig.written == []
        assert isinstance(snapshot, CommittedSnapshot) and snapshot.request is not None
        assert not snapshot.request.urgent and snapshot.request.estimated
        assert snapshot.round == 20 and snapshot.last_seq == rig.journal.state.last_seq
        assert pressure.requested == 20


async def test_the_hard_mark_blocks_the_request_until_the_plan_is_applied(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        log = rounds_log(SMALL_OUTPUTS)
        async with journal_on(watermark_settings(2650), log) as rig:
            outcomes: Slot[PlanOutcome] = Slot()
            pressure = pressure_on(rig.journal, outcomes)
            assert pressure.decision().action == "block"
            async with anyio.create_task_group() as tg:
                tg.start_soon(pressure.before_request)
                snapshot = await rig.journal.compactor.get()
                assert snapshot.request is not None and snapshot.request.urgent
                assert rig.written == []  # nothing happens until the plan comes
                outcomes.put(plan_for(snapshot))
            assert pressure.decision().action == "none"
        [record] = rig.written
        assert isinstance(record, CompactionRecord) and record.kind == "full"
        assert rig.journal.state.compactions == 1 and pressure.requested is None
        assert pressure.turn_compactions == 1
        assert replay("helpers", [*log, record]).items == rig.journal.state.items
        [waited] = rig.published(CompactionWaited)
        assert waited.reason == "hard mark before a request"


async def test_a_failed_plan_at_the_hard_mark_falls_back_without_a_model(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(watermark_settings(2650), rounds_log(SMALL_OUTPUTS)) as rig:
            outcomes: Slot[PlanOutcome] = Slot()
            pressure = pressure_on(rig.journal, outcomes)
            async with anyio.create_task_group() as tg:
                tg.start_soon(pressure.before_request)
                snapshot = await rig.journal.compactor.get()
                outcomes.put(PlanFailed(round=snapshot.round, error="summary refused"))
            assert pressure.decision().action == "none"
        [record] = rig.written
        assert isinstance(record, CompactionRecord) and record.kind == "fallback"
        assert pressure.requested is None


async def test_a_plan_waiting_in_the_slot_is_applied_at_the_next_boundary(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(watermark_settings(2900), rounds_log(SMALL_OUTPUTS)) as rig:
            outcomes: Slot[PlanOutcome] = Slot()
            pressure = pressure_on(rig.journal, outcomes)
            await pressure.apply_ready_plan()  # nothing there: never waits
            await pressure.after_commit()
            snapshot = rig.journal.compactor.take()
            assert snapshot is not None
            outcomes.put(plan_for(snapshot))
            await pressure.apply_ready_plan()
        assert [type(r) for r in rig.written] == [CompactionRecord]
        assert pressure.requested is None and outcomes.peek() is None


async def test_when_nothing_can_be_freed_the_request_is_refused_and_nothing_is_asked(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        # a budget of 5 tokens: the system and user messages alone are over the hard mark,
        # and a compaction keeps both, so it would free nothing
        async with journal_on(watermark_settings(5), rounds_log([])) as rig:
            pressure = pressure_on(rig.journal, Slot())
            with pytest.raises(ContextLengthExceeded, match="compaction cannot free more"):
                await pressure.before_request()
        assert rig.written == [] and rig.journal.compactor.peek() is None
        assert [e.reason for e in rig.published(CompactionSkipped)] == [
            "a compaction would free only 0 of 6 tokens"
        ]
