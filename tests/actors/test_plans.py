"""``PlanApplier`` alone, on a real journal: plans and protected changes, checked before written."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import pytest
import stowage.actors._plans
from stowage.actors._journal import Journal
from stowage.actors._plans import PlanApplier
from stowage.core import (
    CompactionRecord,
    CompactionSkipped,
    CompactionSummary,
    ErrorRecord,
    HistoryCompacted,
    ProtectedChanged,
    ProtectedRecord,
    ProtectedRefused,
    ProtectedState,
    ProtectedStateViolation,
    Record,
    Settings,
    SystemMessage,
    UserMessage,
    render,
    replay,
)
from stowage.policy import Accounting, Plan

# the fixtures of tests/actors/conftest.py
JournalOn = Callable[[Settings, Sequence[Record]], AbstractAsyncContextManager[Any]]
RoundsLog = Callable[[Sequence[str]], list[Record]]
SETTINGS = Settings(model="mystery", compact_threshold=1000, tools="none")
FIGURES: dict[str, Any] = {"accounting": Accounting.of(SETTINGS, ()), "chars_per_token": 4.0}


def plan_for(journal: Journal, **changes: Any) -> Plan:
    """A plan covering everything so far, based on the journal's newest compaction."""
    fields: dict[str, Any] = {
        "round": journal.state.round,
        "summary": "read three files; nothing failed",
        "covers_through": journal.state.last_seq,
        "reason": "test",
        "tokens_before": None,
        "estimated": True,
        "based_on_compaction_seq": journal.state.last_compaction_seq,
    }
    return Plan(**(fields | changes))


def kinds(records: list[Record]) -> list[str]:
    return [type(r).__name__ for r in records]


async def test_a_plan_is_written_as_one_compaction_record_and_replays_to_the_live_history(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        log = rounds_log(["z" * 800] * 3)
        async with journal_on(SETTINGS, log) as rig:
            applier = PlanApplier(rig.journal.ctx, rig.journal)
            assert await applier.apply(plan_for(rig.journal), **FIGURES)
        state = rig.journal.state
        assert kinds(rig.written) == ["CompactionRecord"]
        assert state.compactions == 1
        assert state.items == (
            SystemMessage(text="be brief"),
            CompactionSummary(text="read three files; nothing failed"),
            UserMessage(text="read every file"),
        )
        assert replay("helpers", [*log, *rig.written]).items == state.items
        [event] = rig.published(HistoryCompacted)
        assert event.kind == "full" and event.covers_through == log[-1].seq


async def test_a_stale_plan_is_dropped_and_says_so_as_a_boundary(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    """History stays; the error record that says why is a boundary the machine hears (a
    request waiting for room takes the next step)."""
    with anyio.fail_after(5):
        async with journal_on(SETTINGS, rounds_log(["z" * 800] * 3)) as rig:
            applier = PlanApplier(rig.journal.ctx, rig.journal)
            before = list(rig.journal.state.history)
            stale = plan_for(rig.journal, based_on_compaction_seq=99, id=7)
            assert not await applier.apply(stale, **FIGURES)
            boundary = rig.journal.snapshot("dropped")
        [record] = rig.written
        assert isinstance(record, ErrorRecord) and record.kind == "compaction_stale"
        assert rig.journal.state.history == before
        assert rig.journal.boundary_seq == record.seq and boundary.last_seq == record.seq
        [skipped] = rig.published(CompactionSkipped)
        assert "history was compacted since" in skipped.reason


async def test_a_plan_no_smaller_than_what_it_replaces_is_dropped(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(SETTINGS, rounds_log(["z" * 800])) as rig:
            applier = PlanApplier(rig.journal.ctx, rig.journal)
            long = plan_for(rig.journal, summary="s" * 5000)
            assert not await applier.apply(long, **FIGURES)
        [record] = rig.written
        assert isinstance(record, ErrorRecord) and record.kind == "compaction_no_smaller"
        assert rig.journal.state.compactions == 0


async def test_a_forbidden_summarizer_update_is_refused_and_the_rest_of_the_plan_applies(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(SETTINGS, rounds_log(["z" * 800] * 3)) as rig:
            applier = PlanApplier(rig.journal.ctx, rig.journal)
            ops = (
                {"op": "add_decision", "text": "parse the config as TOML"},
                {"op": "set_objective", "text": "do something else entirely"},
            )
            assert await applier.apply(plan_for(rig.journal, protected_ops=ops), **FIGURES)
        assert kinds(rig.written) == ["ErrorRecord", "ProtectedRecord", "CompactionRecord"]
        refused, accepted, compaction = rig.written
        assert isinstance(refused, ErrorRecord) and refused.kind == "protected_refused"
        assert isinstance(accepted, ProtectedRecord) and accepted.source == "summarizer"
        assert isinstance(compaction, CompactionRecord)
        protected = rig.journal.state.protected
        assert [e.text for e in protected.decisions] == ["parse the config as TOML"]
        assert protected.objective is None
        assert [e.source for e in rig.published(ProtectedRefused)] == ["summarizer"]
        assert [(e.source, e.ops) for e in rig.published(ProtectedChanged)] == [("summarizer", 1)]


async def test_a_plan_whose_projection_would_lose_a_protected_entry_is_refused_whole(
    journal_on: JournalOn, rounds_log: RoundsLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    with anyio.fail_after(5):
        async with journal_on(SETTINGS, rounds_log(["z" * 800] * 3)) as rig:
            applier = PlanApplier(rig.journal.ctx, rig.journal)
            await applier.protect([{"op": "add_constraint", "text": "never touch prod"}])
            before = list(rig.journal.state.history)

            def forgetful(state: ProtectedState) -> str:
                return render(state).replace("never touch prod", "touch prod when needed")

            monkeypatch.setattr(stowage.actors._plans, "render_protected", forgetful)
            assert not await applier.apply(plan_for(rig.journal), **FIGURES)
        assert kinds(rig.written) == ["ProtectedRecord", "ErrorRecord"]
        assert rig.journal.boundary_seq == rig.written[-1].seq
        refusal = rig.written[-1]
        assert isinstance(refusal, ErrorRecord) and refusal.kind == "compaction_refused"
        assert rig.journal.state.history == before and rig.journal.state.compactions == 0
        assert [(e.entry, e.plan_refused) for e in rig.published(ProtectedRefused)] == [
            ("c1", True)
        ]


async def test_a_user_change_is_logged_once_and_a_bad_one_writes_nothing(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    with anyio.fail_after(5):
        async with journal_on(SETTINGS, rounds_log(["z" * 800])) as rig:
            applier = PlanApplier(rig.journal.ctx, rig.journal)
            change = [{"op": "add_constraint", "text": "stay on Python 3.11"}]
            await applier.protect(change)
            await applier.protect(change)  # repeating an entry is a no-op
            with pytest.raises(ProtectedStateViolation, match="no constraint 'c9'"):
                await applier.protect([{"op": "drop_constraint", "id": "c9"}])
        assert kinds(rig.written) == ["ProtectedRecord"]
        assert [e.text for e in rig.journal.state.protected.constraints] == ["stay on Python 3.11"]
        assert [(e.source, e.ops) for e in rig.published(ProtectedChanged)] == [("user", 1)]
