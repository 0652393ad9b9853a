"""Protected state in live sessions: kept through compactions, guarded against the summarizer,
checked before a plan applies, and replayed exactly; with the scripted model and JSONL logs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
import stowage.actors._plans
from stowage import (
    AssistantMessage,
    Event,
    ModelRequest,
    ModelResponse,
    ProtectedChanged,
    ProtectedRefused,
    ProtectedState,
    ProtectedStateViolation,
    Runtime,
    Settings,
    SystemMessage,
    replay,
)
from stowage.cli._main import main
from stowage.core._protected import render
from stowage.core._protected_updates import parse_summary_updates, updates_block
from stowage.core._records import ErrorRecord, ProtectedRecord
from stowage.model._brain import ScriptedBrain, is_summary_request
from stowage.model._scripted import ScriptedModel
from stowage.policy._check import check_log
from stowage.storage import JsonlStore

OBJECTIVE = "port the config parser to the new schema"
CONSTRAINTS = ("never commit code", "must stay compatible with Python 3.12")


def settings(tmp_path: Path) -> Settings:
    # manual compaction only: each test decides exactly when history is compacted
    return Settings(store=tmp_path, tools="none", auto_compact=False, durability="none")


def verbose(
    brain: Callable[[ModelRequest], ModelResponse],
) -> Callable[[ModelRequest], ModelResponse]:
    """``brain`` whose answers carry long working notes: what a compaction replaces is then
    larger than its summary, as in a real session (no compaction that grows history is
    written, a manual one included)."""

    def answer(request: ModelRequest) -> ModelResponse:
        response = brain(request)
        if is_summary_request(request):
            return response
        notes = "\n(working notes) " + "checked the parser and the schema again; " * 40
        return ModelResponse(
            items=(AssistantMessage(text=response.text + notes),), usage=response.usage
        )

    return answer


def brain_adding(ops: Sequence[dict[str, Any]] | str) -> Callable[[ModelRequest], ModelResponse]:
    """The scripted brain, whose summaries carry ``ops`` (or a raw block) as their updates."""
    base = ScriptedBrain(tool_rounds=0)
    answers = verbose(base)

    def brain(request: ModelRequest) -> ModelResponse:
        if not is_summary_request(request):
            return answers(request)
        response = base(request)
        summary = parse_summary_updates(response.text)[0]
        block = ops if isinstance(ops, str) else updates_block(list(ops))
        text = f"{summary}\n\n{block}"
        return ModelResponse(items=(AssistantMessage(text=text),), usage=response.usage)

    return brain


def round_requests(model: ScriptedModel) -> list[ModelRequest]:
    return [r for r in model.requests if not is_summary_request(r)]


async def test_protected_fields_stay_complete_and_equal_through_25_lossy_compactions(
    tmp_path: Path,
) -> None:
    """Seed 002, second case: repeated compactions, protected fields complete and unchanged,
    while the (deliberately lossy) summary forgets."""
    with anyio.fail_after(30):
        model = ScriptedModel(brain=verbose(ScriptedBrain(tool_rounds=0, loss=0.5, seed=11)))
        # only the newest user message is kept verbatim: older words live in the summary alone
        only_newest = settings(tmp_path).with_(user_budget_chars=0)
        async with Runtime(only_newest, gateway=model) as rt:
            session = await rt.create(
                "s1", system="be brief", objective=OBJECTIVE, constraints=CONSTRAINTS
            )
            await session.send("failed: pip install numpy==2.1 because ABI mismatch in _core.so")
            assert await session.compact()
            original = session.protected
            assert [e.id for e in original.entries] == ["o1", "c1", "c2", "f1"]
            for n in range(24):
                await session.send(f"step {n}: tune the retry budget to {n * 3} ms")
                assert await session.compact()
                assert session.protected == original
            await session.send("what must hold?")
        assert session.state.compactions == 25
        first, *later = round_requests(model)
        assert len(later) == 25
        for request in (first, *later):
            assert request.input[0] == SystemMessage(text="be brief")
            protected = request.input[1]
            assert isinstance(protected, SystemMessage)
            for entry in (original.objective, *original.constraints):
                assert entry is not None and entry.line in protected.text
        for request in later:
            assert request.input[1] == SystemMessage(text=render(original))
        # the prose did lose facts: without protected state they would be gone
        final_summary = round_requests(model)[-1].input[2]
        assert "ABI mismatch" not in getattr(final_summary, "text", "")


async def test_the_summarizer_dropping_or_rewording_a_constraint_is_refused_and_named(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(10):
        attack = [
            {"op": "drop_constraint", "id": "c1"},
            {"op": "set_objective", "text": "commit everything"},
            {"op": "add_constraint", "text": "commits are fine"},
            {"op": "add_decision", "text": "parse with tomllib"},
        ]
        model = ScriptedModel(brain=brain_adding(attack))
        events: list[Event] = []
        async with Runtime(settings(tmp_path), gateway=model) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", objective=OBJECTIVE, constraints=CONSTRAINTS)
            before = session.protected
            await session.send("go")
            assert await session.compact()
            after = session.protected
        assert after.objective == before.objective and after.constraints == before.constraints
        assert [e.text for e in after.decisions] == ["parse with tomllib"]
        refused = [e for e in events if isinstance(e, ProtectedRefused)]
        assert [(e.entry, e.plan_refused) for e in refused] == [
            ("c1", False),
            ("o1", False),
            ("constraints", False),
        ]
        changed = [e for e in events if isinstance(e, ProtectedChanged)]
        assert [(e.source, e.ops) for e in changed] == [("summarizer", 1)]
        log = (await JsonlStore(tmp_path).read("s1")).records
        assert [r.kind for r in log if isinstance(r, ErrorRecord)] == ["protected_refused"] * 3


async def test_a_malformed_updates_block_changes_nothing_and_is_reported(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        block = '```json\n{"protected_updates": [{"op": "add_decision", "text": "x"}, {"op":\n```'
        model = ScriptedModel(brain=brain_adding(block))
        events: list[Event] = []
        async with Runtime(settings(tmp_path), gateway=model) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", constraints=CONSTRAINTS)
            before = session.protected
            await session.send("go")
            assert await session.compact()
            assert session.protected == before
            assert "protected_updates" not in session.state.history[0].item.text  # type: ignore[union-attr]
        refused = [e for e in events if isinstance(e, ProtectedRefused)]
        assert len(refused) == 1 and "not valid JSON" in refused[0].reason


async def test_pending_moves_to_completed_through_the_summarizer(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        model = ScriptedModel(brain=verbose(ScriptedBrain(tool_rounds=0)))
        async with Runtime(settings(tmp_path), gateway=model) as rt:
            session = await rt.create("s1")
            await session.send("pending: migrate the loader to schema v4")
            assert await session.compact()
            assert [(e.id, e.text) for e in session.protected.pending] == [
                ("p1", "migrate the loader to schema v4")
            ]
            await session.send("done: migrate the loader to schema v4")
            assert await session.compact()
        state = session.protected
        assert state.pending == ()
        assert [(e.id, e.text) for e in state.completed] == [
            ("p1", "migrate the loader to schema v4")
        ]


async def test_a_plan_that_would_lose_an_entry_is_refused_and_the_old_history_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with anyio.fail_after(10):
        events: list[Event] = []
        async with Runtime(
            settings(tmp_path), gateway=ScriptedModel(brain=verbose(ScriptedBrain(tool_rounds=0)))
        ) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", constraints=CONSTRAINTS)
            await session.send("go")
            history = list(session.state.history)

            def forgetful(state: ProtectedState) -> str:
                return render(state).replace(CONSTRAINTS[1], "must stay compatible with 3.x")

            monkeypatch.setattr(stowage.actors._plans, "render_protected", forgetful)
            assert not await session.compact()
            assert session.state.history == history
            assert session.state.compactions == 0
        refused = [e for e in events if isinstance(e, ProtectedRefused)]
        assert [(e.entry, e.plan_refused) for e in refused] == [("c2", True)]
        log = (await JsonlStore(tmp_path).read("s1")).records
        errors = [r for r in log if isinstance(r, ErrorRecord)]
        assert [r.kind for r in errors] == ["compaction_refused"] and "c2" in errors[0].message


async def test_user_changes_are_logged_and_a_bad_one_changes_nothing(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        async with Runtime(
            settings(tmp_path), gateway=ScriptedModel(brain=verbose(ScriptedBrain(tool_rounds=0)))
        ) as rt:
            session = await rt.create("s1", constraints=CONSTRAINTS)
            state = await session.protect(
                objective=OBJECTIVE, add_constraints=["timeout is 37 s"], drop_constraints=["c1"]
            )
            assert [e.id for e in state.entries] == ["o1", "c2", "c3"]
            with pytest.raises(ProtectedStateViolation, match="no constraint 'c1'"):
                await session.protect(add_constraints=["x"], drop_constraints=["c1"])
            assert session.protected == state
            assert (await session.send("still alive?")).text
            with pytest.raises(ProtectedStateViolation):
                await rt.create("s2", constraints=["  "])
            assert not await rt.store.exists("s2")
        log = (await JsonlStore(tmp_path).read("s1")).records
        sources = [r.source for r in log if isinstance(r, ProtectedRecord)]
        assert sources == ["user", "user"]


async def test_resume_after_a_crash_restores_exactly_the_same_protected_state(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(20):
        async with Runtime(
            settings(tmp_path), gateway=ScriptedModel(brain=verbose(ScriptedBrain(tool_rounds=0)))
        ) as rt:
            session = await rt.create("s1", objective=OBJECTIVE, constraints=CONSTRAINTS)
            for n in range(4):
                await session.send(f"failed: approach {n} because reason {n}\npending: task {n}")
                assert await session.compact()
            await session.send("done: task 1\ndecided: keep tomllib")
            assert await session.compact()
            # and a tail after the newest compaction: a user change and a turn
            await session.protect(add_constraints=["use /srv/app/conf.d/42.yaml"])
            await session.send("go on")
            live = session.protected
        assert [e.id for e in live.completed] == ["p2"]
        log = tmp_path / "s1.jsonl"
        with log.open("ab") as f:
            f.write(b'{"v":1,"seq":999,"type":"prot')  # the crash: a torn last line
        async with Runtime(
            settings(tmp_path), gateway=ScriptedModel(brain=verbose(ScriptedBrain(tool_rounds=0)))
        ) as rt:
            resumed = await rt.resume("s1")
            assert resumed.protected == live
        store = JsonlStore(tmp_path)
        full, tail = await store.read("s1"), await store.read_tail("s1")
        assert replay("s1", full.records).protected == live
        assert check_log("s1", full.records, tail.records).ok


def test_cli_sets_protects_and_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # main() points structlog at sys.stderr, here capsys's file, closed after this test
    monkeypatch.setattr("stowage.cli._main.configure_logging", lambda *args, **kwargs: None)
    store = ["--store", str(tmp_path / "logs")]
    run = ["run", "--session", "s1", "--tools", "none", "--objective", OBJECTIVE]
    for constraint in CONSTRAINTS:
        run += ["--constraint", constraint]
    assert main([*run, *store, "hello"]) == 0
    capsys.readouterr()
    protect = ["protect", "s1", "--drop-constraint", "c1", "--constraint", "timeout is 37 s"]
    assert main([*protect, *store]) == 0
    out = capsys.readouterr().out
    assert f"[c2] {CONSTRAINTS[1]}" in out and "[c3] timeout is 37 s" in out
    assert CONSTRAINTS[0] not in out
    assert main(["protect", "s1", "--drop-constraint", "c9", *store]) == 2
    assert "no constraint 'c9'" in capsys.readouterr().err
