"""A turn open across a compaction stays open for a resume: the compaction record says so, as a
resume reads the log from the newest compaction on, past the turn's "started" record. Before,
such a resume found the turn closed: a worker taking a killed worker's session over dropped
the message as answered-less instead of finishing its turn."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
from stowage import Runtime, Settings, replay
from stowage.core import CompactionRecord, TurnRecord
from stowage.model._scripted import ScriptedModel
from stowage.policy import check_log
from stowage.storage import JsonlStore
from stowage.storage.contract import expected_tail


async def _log_with_a_compaction_inside_a_turn(tmp_path: Path) -> list:  # type: ignore[type-arg]
    (tmp_path / "data.txt").write_text("x " * 2000)
    settings = Settings(
        store=tmp_path / "st", compact_threshold=900, workspace=tmp_path, durability="none"
    )
    async with Runtime(settings, gateway=ScriptedModel(tool_rounds=3)) as rt:
        session = await rt.create("s", system="sys")
        for n in range(3):
            await session.send(f"task {n}: read data.txt")
    store = JsonlStore(tmp_path / "st")
    try:
        return list((await store.read("s")).records)
    finally:
        await store.aclose()


async def test_a_resume_after_a_compaction_inside_a_turn_finds_the_turn_open(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        records = await _log_with_a_compaction_inside_a_turn(tmp_path)
    inside = [r for r in records if isinstance(r, CompactionRecord) and r.turn_open]
    assert inside, "a compaction should have landed inside a turn"
    # the log as a crash right after that compaction leaves it
    crashed = [r for r in records if r.seq <= inside[0].seq]
    whole, resumed = replay("s", crashed), replay("s", expected_tail(crashed))
    assert whole.turn_open and resumed.turn_open
    assert resumed.turn == whole.turn
    assert check_log("s", crashed, expected_tail(crashed)).ok
    # between turns, a compaction says nothing of the kind
    between = [r for r in records if isinstance(r, CompactionRecord) and not r.turn_open]
    for record in between:
        prefix = [r for r in records if r.seq <= record.seq]
        assert not replay("s", expected_tail(prefix)).turn_open


async def test_check_reports_a_log_whose_resume_would_lose_the_open_turn(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        records = await _log_with_a_compaction_inside_a_turn(tmp_path)
    inside = next(r for r in records if isinstance(r, CompactionRecord) and r.turn_open)
    # as an earlier release wrote it: the record did not say the turn was open
    old = [dataclasses.replace(r, turn_open=False) if r is inside else r for r in records]
    crashed = [r for r in old if r.seq <= inside.seq]
    assert not any(isinstance(r, TurnRecord) for r in expected_tail(crashed)[1:])
    report = check_log("s", crashed, expected_tail(crashed))
    assert not report.ok
    assert any("resume finds turn" in p and "closed" in p for p in report.problems)


async def test_a_resumed_session_finishes_the_turn_a_crash_left_open(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        records = await _log_with_a_compaction_inside_a_turn(tmp_path)
        inside = next(r for r in records if isinstance(r, CompactionRecord) and r.turn_open)
        crashed = tmp_path / "crashed"
        store = JsonlStore(crashed)
        try:
            await store.create("s", [r for r in records if r.seq <= inside.seq])
        finally:
            await store.aclose()
        settings = Settings(
            store=crashed, compact_threshold=900, workspace=tmp_path, durability="none"
        )
        async with Runtime(settings, gateway=ScriptedModel(tool_rounds=3)) as rt:
            session = await rt.open("s")
            assert session.state.turn_open
            result = await session.continue_turn()
            assert result.text and not session.state.turn_open
