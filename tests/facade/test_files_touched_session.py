"""The trail of files touched in live sessions: written from the tool calls, carried verbatim
through lossy compactions that forget the paths, steady between compactions (the prompt
cache), replayed exactly, shown by ``context``; with real files and a JSONL log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from stowage import AssistantMessage, ModelRequest, ModelResponse, Runtime, Settings, replay
from stowage.cli._sessions import context_report
from stowage.core import CompactionRecord, FunctionCall, FunctionCallOutput, SystemMessage
from stowage.model._brain import ScriptedBrain, is_summary_request
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore

TRAIL = "Files touched (from the tool calls, newest first):"


def reader(summaries: ScriptedBrain) -> ScriptedModel:
    """A model that, for a user message naming a file, reads it once and then answers; its
    summaries are ``summaries``' (lossy: they forget what the turns did)."""

    def brain(request: ModelRequest) -> ModelResponse:
        if is_summary_request(request):
            return summaries(request)
        last = request.input[-1]
        if isinstance(last, FunctionCallOutput):
            return ModelResponse(items=(AssistantMessage(text="read it; " + "notes " * 200),))
        text = getattr(last, "text", "")
        path = text.split()[-1]
        call = FunctionCall(
            call_id=f"call_{abs(hash(text)) % 10**8}",
            name="read_file",
            arguments=json.dumps({"path": path}),
        )
        return ModelResponse(items=(call,))

    return ScriptedModel(brain=brain)


def workspace_settings(tmp_path: Path, files: int) -> Settings:
    """Workspace tools over ``files`` notes (``notes0.txt``, ...), compaction by hand."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for n in range(files):
        (workspace / f"notes{n}.txt").write_text(f"note {n}: the retry budget is {n * 7} ms\n")
    return Settings(
        store=tmp_path / "store",
        workspace=workspace,
        tools="workspace",
        auto_compact=False,
        durability="none",
    )


async def test_a_path_read_in_the_first_turn_survives_20_lossy_compactions(
    tmp_path: Path,
) -> None:
    settings = workspace_settings(tmp_path, 21).with_(user_budget_chars=0)
    model = reader(ScriptedBrain(tool_rounds=0, loss=1.0, seed=3))
    with anyio.fail_after(60):
        async with Runtime(settings, gateway=model) as rt:
            session = await rt.create("trail", system="be brief")
            for n in range(21):
                await session.send(f"please read notes{n}.txt")
                if n < 20:
                    assert await session.compact()
            assert session.state.compactions == 20
            live = session.protected
    requests = [r for r in model.requests if not is_summary_request(r)]
    last = requests[-1]
    protected = last.input[1]
    assert isinstance(protected, SystemMessage)
    assert TRAIL in protected.text
    # the first turn's read is carried though every summary forgot it
    assert "- read notes0.txt" in protected.text
    assert "- read notes19.txt" in protected.text
    # the turn since the last compaction: in the history, not yet in the trail
    assert "notes20.txt" not in protected.text
    # between compactions the protected message is the same: both rounds of the last turn
    assert requests[-2].input[1] == protected
    records = (await JsonlStore(tmp_path / "store").read("trail")).records
    # the summaries forgot it: only the trail has it
    last_summary = [r for r in records if isinstance(r, CompactionRecord)][-1].summary
    assert "notes0.txt" not in last_summary
    assert replay("trail", records).protected == live
    report = context_report("trail", records)
    assert report["parts"]["files touched"]["tokens"] > 0
    assert report["files_touched"]["since_last_compaction"] == ["read notes20.txt"]
    assert report["files_touched"]["carried"][-1] == "read notes0.txt"
    context = [sys.executable, "-m", "stowage.cli", "context", "trail"]
    done = await anyio.run_process([*context, "--store", str(tmp_path / "store")], check=True)
    shown = done.stdout.decode()
    assert (
        "files touched since the last compaction (carried at the next):\n  read notes20.txt"
        in shown
    )
    assert "files touched, carried through compactions:\n  read notes19.txt" in shown
    assert "  and 12 more" in shown


async def test_the_trail_can_be_turned_off(tmp_path: Path) -> None:
    settings = workspace_settings(tmp_path, 1).with_(files_touched=False)
    model = reader(ScriptedBrain(tool_rounds=0))
    with anyio.fail_after(30):
        async with Runtime(settings, gateway=model) as rt:
            session = await rt.create("off", system="be brief")
            await session.send("please read notes0.txt")
            assert await session.compact()
            await session.send("please read notes0.txt")
            assert not session.protected.touched
    assert all(TRAIL not in getattr(i, "text", "") for r in model.requests for i in r.input)
