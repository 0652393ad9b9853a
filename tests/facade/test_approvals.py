"""Approvals: a call of a tool marked ``needs_approval`` stops the turn with a durable request
before anything of its round runs; ``approve`` runs the round and the turn goes on, ``deny``
gives the call a "denied" output; the pending state survives a restart, and the answer may come
from another process (Python or ``stowage approve``/``deny``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from stowage import (
    AssistantMessage,
    ConfigError,
    FunctionCall,
    FunctionCallOutput,
    ModelResponse,
    Runtime,
    Settings,
    ToolRegistry,
    replay,
    tool,
)
from stowage.core import ApprovalError, ApprovalRecord, ItemRecord, Record
from stowage.model._scripted import ScriptedModel
from stowage.policy import check_log
from stowage.storage import JsonlStore

APP = Path(__file__).with_name("approval_app.py")


def calls_and_answer(*answers: str) -> list[ModelResponse]:
    first = ModelResponse(
        items=(
            FunctionCall(call_id="g1", name="guarded", arguments='{"path": "a.txt"}'),
            FunctionCall(call_id="e1", name="echo", arguments='{"text": "x"}'),
        )
    )
    return [first, *(ModelResponse(items=(AssistantMessage(text=a),)) for a in answers)]


def tools(ran: list[str]) -> ToolRegistry:
    @tool(needs_approval=True)
    async def guarded(path: str) -> str:
        """Delete a file."""
        ran.append(f"guarded {path}")
        return f"deleted {path}"

    @tool
    async def echo(text: str) -> str:
        """Repeat the text."""
        ran.append(f"echo {text}")
        return f"echo: {text}"

    return ToolRegistry([guarded, echo])


def outputs(records: tuple[Record, ...] | list[Record]) -> list[FunctionCallOutput]:
    return [
        r.item
        for r in records
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    ]


async def test_the_turn_stops_for_approval_and_approve_runs_the_round_in_call_order(
    tmp_path: Path,
) -> None:
    ran: list[str] = []
    model = ScriptedModel.from_responses(calls_and_answer("all done"))
    with anyio.fail_after(15):
        async with Runtime(Settings(store=tmp_path), gateway=model, tools=tools(ran)) as rt:
            session = await rt.create("s1")
            stopped = await session.send("clean up")
            assert stopped.stopped == "pending_approval"
            assert ran == []  # nothing of the round ran, not even the call that needs no approval
            assert [c.call_id for c in session.pending_approvals] == ["g1"]
            log = (await JsonlStore(tmp_path).read("s1")).records
            requested = [r for r in log if isinstance(r, ApprovalRecord)]
            assert [(r.call_id, r.decision) for r in requested] == [("g1", "requested")]
            calls_seq = max(
                r.seq for r in log if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall)
            )
            assert requested[0].seq > calls_seq  # the calls were durable first
            with pytest.raises(ApprovalError, match="awaiting approval \\(g1\\)"):
                await session.send("something else")
            with pytest.raises(ConfigError, match="'nope' awaits no approval; awaiting: g1"):
                await session.approve("nope")
            result = await session.approve("g1")
            assert not session.pending_approvals
    assert result.text == "all done" and result.stopped == "answered"
    assert sorted(ran) == ["echo x", "guarded a.txt"]
    log = (await JsonlStore(tmp_path).read("s1")).records
    assert [(o.call_id, o.output) for o in outputs(log)] == [
        ("g1", "deleted a.txt"),
        ("e1", "echo: x"),
    ]
    state = replay("s1", log)
    assert not state.turn_open and not state.open_calls and not state.awaiting_approval


async def test_deny_gives_a_denied_output_the_model_reads(tmp_path: Path) -> None:
    ran: list[str] = []
    model = ScriptedModel.from_responses(calls_and_answer("ok, I will not delete it"))
    with anyio.fail_after(15):
        async with Runtime(Settings(store=tmp_path), gateway=model, tools=tools(ran)) as rt:
            session = await rt.create("s1")
            await session.send("clean up")
            result = await session.deny("g1", reason="that file is needed")
    assert result.text == "ok, I will not delete it"
    assert ran == ["echo x"]
    last_request = model.requests[-1].input
    denied = {o.call_id: o for o in last_request if isinstance(o, FunctionCallOutput)}
    assert denied["g1"].is_error
    assert denied["g1"].output == "denied: that file is needed"
    assert denied["e1"].output == "echo: x"


async def test_a_pending_approval_survives_a_restart_and_is_not_closed_as_interrupted(
    tmp_path: Path,
) -> None:
    ran: list[str] = []
    with anyio.fail_after(20):
        async with Runtime(
            Settings(store=tmp_path),
            gateway=ScriptedModel.from_responses(calls_and_answer()),
            tools=tools(ran),
        ) as rt:
            await (await rt.create("s1")).send("clean up")
        second = ScriptedModel.from_responses(calls_and_answer("done later")[1:])
        async with Runtime(Settings(store=tmp_path), gateway=second, tools=tools(ran)) as rt:
            session = await rt.resume("s1")
            assert [c.call_id for c in session.pending_approvals] == ["g1"]
            assert (await session.continue_turn()).stopped == "pending_approval"
            result = await session.approve("g1")
    assert result.text == "done later"
    log = (await JsonlStore(tmp_path).read("s1")).records
    assert not any(o.output.startswith("interrupted") for o in outputs(log))


def run_app(phase: str, store: Path, marker: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(APP), phase, str(store)],
        env={**_env(), "GUARD_MARKER": str(marker)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}


def test_resume_in_a_new_process_while_an_approval_is_pending(tmp_path: Path) -> None:
    marker = tmp_path / "guard-ran"
    started = run_app("start", tmp_path / "store", marker)
    assert started == ["pending_approval", "g1"]
    assert not marker.exists()
    approved = run_app("approve", tmp_path / "store", marker)
    assert approved == ["g1", "answered|finished after approval", ""]
    assert marker.exists()  # ran in the second process


def test_stowage_approve_and_deny_answer_from_the_command_line(
    tmp_path: Path,
    cli: Callable[..., subprocess.CompletedProcess[str]],
    cli_env: dict[str, str],
) -> None:
    """The offline scripted model calls the one guarded tool in two rounds: the first call is
    approved (it runs in the ``approve`` process), the second denied; then it answers."""
    marker = tmp_path / "guard-ran"
    cli_env["PYTHONPATH"] = str(APP.parent)
    cli_env["GUARD_MARKER"] = str(marker)
    store = str(tmp_path / "store")
    common = ("--store", store, "--tools-from", "approval_app:guarded_only")
    run = cli(
        "run", "tidy the notes", "--session", "s1", "--model", "scripted", *common, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert "turn stopped: pending_approval" in run.stderr
    assert not marker.exists()

    def waiting() -> list[str]:
        log = anyio.run(JsonlStore(Path(store)).read, "s1").records
        return [c.call_id for c in replay("s1", log).awaiting_approval]

    (first,) = waiting()
    # the stop says which call waits, for what, and the exact commands that answer it
    assert f"[awaiting approval: call {first}: guarded(" in run.stderr
    assert f"stowage approve s1 {first} --store {store}" in run.stderr
    assert f"stowage deny s1 {first} --store {store}" in run.stderr
    bad = cli("approve", "s1", "no-such-call", *common, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "no-such-call" in bad.stderr
    approved = cli("approve", "s1", first, *common, cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    assert marker.exists()
    assert len(waiting()) == 1, (approved.stdout, approved.stderr)
    (second,) = waiting()
    assert second != first
    assert "still awaiting approval: " + second in approved.stderr
    marker.unlink()
    denied = cli("deny", "s1", second, "--reason", "enough", *common, cwd=tmp_path)
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout.startswith("Answer to: tidy the notes.")
    assert not marker.exists()
    assert waiting() == []
    log = anyio.run(JsonlStore(Path(store)).read, "s1").records
    texts = {o.call_id: o.output for o in outputs(log)}
    assert texts[first].startswith("guarded ran")
    assert texts[second] == "denied: enough"
    shown = cli("show", "s1", "--store", store, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"approval requested for call {first}" in shown.stdout
    assert f"approval approved for call {first}" in shown.stdout
    assert f"approval denied for call {second}: enough" in shown.stdout


async def test_a_compaction_while_a_call_awaits_approval_keeps_the_call_and_approve_works(
    tmp_path: Path,
) -> None:
    """The call waiting for approval (and its round) is never covered: the summary ends
    before it, ``approve`` still finds it, no request carries an output without its call,
    and the log checks and resumes to the same history."""
    ran: list[str] = []
    # a long first answer: the summary that replaces it is smaller (none that grows is written)
    notes = "first: " + "went through the files one by one; " * 20
    first, calls = ModelResponse(items=(AssistantMessage(text=notes),)), calls_and_answer()[0]
    model = ScriptedModel.from_responses(
        [
            first,
            calls,
            ModelResponse(items=(AssistantMessage(text="SUMMARY: the first task is done"),)),
            ModelResponse(items=(AssistantMessage(text="all done"),)),
        ]
    )
    with anyio.fail_after(15):
        async with Runtime(Settings(store=tmp_path), gateway=model, tools=tools(ran)) as rt:
            session = await rt.create("s1", system="sys")
            await session.send("first task")
            assert (await session.send("clean up")).stopped == "pending_approval"
            assert await session.compact()
            assert [c.call_id for c in session.pending_approvals] == ["g1"]
            result = await session.approve("g1")
            assert result.text == "all done" and ran == ["guarded a.txt", "echo x"]
            live = list(session.state.history)
    for request in model.requests:
        calls_seen = {i.call_id for i in request.input if isinstance(i, FunctionCall)}
        outputs_seen = {i.call_id for i in request.input if isinstance(i, FunctionCallOutput)}
        assert outputs_seen <= calls_seen, "an output without its call was sent"
    store = JsonlStore(tmp_path)
    try:
        full = (await store.read("s1")).records
        tail = (await store.read_tail("s1")).records
    finally:
        await store.aclose()
    [compaction] = [r for r in full if type(r).__name__ == "CompactionRecord"]
    call_seq = next(
        r.seq for r in full if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall)
    )
    assert compaction.covers_through < call_seq  # type: ignore[attr-defined]
    assert replay("s1", full).history == live == replay("s1", tail).history
    report = check_log("s1", full, tail)
    assert report.ok, report.problems
