"""Milestones and phases: a phase that ends above the soft mark is where the session compacts,
and the summary is told which phase ended; a turn count can trigger a compaction too."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import anyio
import pytest
from stowage import (
    AssistantMessage,
    ConfigError,
    Event,
    FunctionCall,
    HistoryCompacted,
    ModelRequest,
    ModelResponse,
    Runtime,
    Settings,
    UserMessage,
)
from stowage.core import CompactionRecord, MilestoneReached, MilestoneRecord, replay
from stowage.model._brain import is_summary_request, scripted_usage
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore

_spec = importlib.util.spec_from_file_location(
    "policy_session", Path(__file__).with_name("test_policy_session.py")
)
assert _spec is not None and _spec.loader is not None
policy_session = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(policy_session)


def reader(milestone_after: int | None = None) -> object:
    """One read a turn, then an answer; with ``milestone_after``, turn N marks a milestone
    through the tool before it answers."""
    state = {"calls": 0}

    def brain(request: ModelRequest) -> ModelResponse:
        items: tuple[AssistantMessage | FunctionCall, ...]
        if is_summary_request(request):
            items = (AssistantMessage(text="SUMMARY"),)
        else:
            last = max(i for i, item in enumerate(request.input) if isinstance(item, UserMessage))
            called = [i for i in request.input[last:] if isinstance(i, FunctionCall)]
            user = request.input[last]
            assert isinstance(user, UserMessage)
            wants_mark = milestone_after is not None and f"turn {milestone_after}:" in user.text
            if not called:
                state["calls"] += 1
                n = state["calls"]
                items = (FunctionCall(call_id=f"c{n}", name="big", arguments=json.dumps({"n": n})),)
            elif wants_mark and not any(c.name == "mark_milestone" for c in called):
                args = json.dumps({"name": "reading", "note": "every file read"})
                items = (FunctionCall(call_id="m1", name="mark_milestone", arguments=args),)
            else:
                items = (AssistantMessage(text="done"),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


def settings(tmp_path: Path, **changes: object) -> Settings:
    return Settings(
        store=tmp_path, model="scripted", context_window=6000, max_output_tokens=500,
        user_budget_chars=300, background_compaction=False, **changes,
    )  # fmt: skip


async def log_of(tmp_path: Path) -> list[object]:
    disk = JsonlStore(tmp_path)
    try:
        return list((await disk.read("s1")).records)
    finally:
        await disk.aclose()


async def test_a_milestone_above_the_soft_mark_is_where_the_session_compacts(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(brain=reader())
    events: list[Event] = []
    with anyio.fail_after(30):
        async with Runtime(
            settings(tmp_path, soft_mark=0.2), gateway=model, tools=policy_session.big_tools(2000)
        ) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", system="be brief")
            for n in range(3):
                await session.send(f"turn {n}: read a file")
            assert not any(isinstance(e, HistoryCompacted) for e in events)
            status = session.state
            await session.milestone("exploration", "the three files are read")
            assert session.state.milestones == 1 and status is session.state
    compactions = [e for e in events if isinstance(e, HistoryCompacted)]
    assert [e.kind for e in compactions] == ["full"]
    assert "milestone 'exploration: the three files are read' reached" in compactions[0].reason
    summary = next(r for r in model.requests if is_summary_request(r))
    assert "The phase 'exploration: the three files are read' has just ended" in "\n".join(
        getattr(i, "text", "") for i in summary.input
    )
    reached = [e for e in events if isinstance(e, MilestoneReached)]
    assert [(e.name, e.note, e.source) for e in reached] == [
        ("exploration", "the three files are read", "user")
    ]
    records = await log_of(tmp_path)
    milestone = next(r for r in records if isinstance(r, MilestoneRecord))
    compaction = next(r for r in records if isinstance(r, CompactionRecord))
    assert milestone.seq < compaction.seq and compaction.covers_through >= milestone.seq - 1
    assert replay("s1", records).last_milestone == milestone


async def test_below_the_soft_mark_a_milestone_is_recorded_and_nothing_is_compacted(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    async with Runtime(settings(tmp_path), gateway=ScriptedModel(brain=reader()),
                       tools=policy_session.big_tools(200)) as rt:  # fmt: skip
        rt.subscribe(events.append)
        session = await rt.create("s1", system="be brief")
        await session.send("turn 0: read a file")
        await session.milestone("setup")
        with pytest.raises(ConfigError, match="needs a name"):
            await session.milestone("  ")
        # a name is a name: a 60,000-character one is refused, naming the figures, before
        # anything is written (a summary request could never carry it)
        with pytest.raises(ConfigError, match="60,000 characters, more than the 200"):
            await session.milestone("x" * 60_000)
        with pytest.raises(ConfigError, match="more than the 2,000"):
            await session.milestone("setup", note="n" * 2_001)
    assert sum(isinstance(e, MilestoneReached) for e in events) == 1
    assert not any(isinstance(e, HistoryCompacted) for e in events)


async def test_compact_every_turns_compacts_after_that_many_turns_whatever_the_marks(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    config = settings(tmp_path, compact_every_turns=2)
    async with Runtime(config, gateway=ScriptedModel(brain=reader()),
                       tools=policy_session.big_tools(200)) as rt:  # fmt: skip
        rt.subscribe(events.append)
        session = await rt.create("s1", system="be brief")
        for n in range(5):
            await session.send(f"turn {n}: read a file")
    compactions = [e for e in events if isinstance(e, HistoryCompacted)]
    assert len(compactions) == 2
    assert all("2 turns since the last compaction" in e.reason for e in compactions)


async def test_the_model_can_mark_a_milestone_with_its_tool(tmp_path: Path) -> None:
    events: list[Event] = []
    config = settings(tmp_path, milestone_tool=True)
    model = ScriptedModel(brain=reader(milestone_after=1))
    async with Runtime(config, gateway=model, tools=policy_session.big_tools(200)) as rt:
        rt.subscribe(events.append)
        session = await rt.create("s1", system="be brief")
        for n in range(3):
            await session.send(f"turn {n}: read a file")
    assert "mark_milestone" in {t.name for t in model.requests[0].tools}
    records = await log_of(tmp_path)
    [milestone] = [r for r in records if isinstance(r, MilestoneRecord)]
    assert (milestone.name, milestone.note, milestone.source) == (
        "reading",
        "every file read",
        "model",
    )
    # without the setting the model is not offered the tool
    plain = ScriptedModel(brain=reader())
    async with Runtime(settings(tmp_path / "plain"), gateway=plain,
                       tools=policy_session.big_tools(200)) as rt:  # fmt: skip
        await (await rt.create("s1")).send("turn 0: read a file")
    assert "mark_milestone" not in {t.name for t in plain.requests[0].tools}
