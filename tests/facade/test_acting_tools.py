"""The tools that act, in a running session: the session's policy decides each call before
it runs (read-only offers nothing that acts, untrusted waits for a person, a deny rule
refuses), the sandbox confines what runs, and a resumed session keeps the sandbox it was
given. After a kill, a logged write or edit without an output is found applied or not by the
file, and a command is recorded interrupted with what it printed; nothing runs twice."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from stowage import FunctionCall, FunctionCallOutput, Runtime, Settings
from stowage.core import ApprovalRecord, ItemRecord, ProgressRecord, Record
from stowage.model._brain import SCRIPTED_RUNS
from stowage.model._scripted import ScriptedModel
from stowage.policy import check_log
from stowage.storage import JsonlStore

ASK = "write a note, edit it, then run a command"

pytestmark = pytest.mark.bwrap


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("# a project\n")
    return root


def settings(tmp_path: Path, workspace: Path, **changes: object) -> Settings:
    return Settings(store=tmp_path / "store", workspace=workspace).with_(**changes)


async def checked(tmp_path: Path) -> tuple[Record, ...]:
    """The log of session s1, once ``stowage check`` finds nothing wrong in it."""
    store = JsonlStore(tmp_path / "store")
    full = (await store.read("s1")).records
    report = check_log("s1", full, (await store.read_tail("s1")).records)
    assert report.ok, report.problems
    return tuple(full)


def outputs(records: list[Record] | tuple[Record, ...]) -> dict[str, FunctionCallOutput]:
    return {
        r.item.call_id: r.item
        for r in records
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    }


def calls(records: list[Record] | tuple[Record, ...]) -> list[FunctionCall]:
    return [
        r.item for r in records if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall)
    ]


async def test_read_only_offers_nothing_that_acts(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel()
    with anyio.fail_after(30):
        async with Runtime(settings(tmp_path, workspace), gateway=model) as rt:
            session = await rt.create("s1")
            await session.send(ASK)
    offered = {t.name for t in model.requests[0].tools}
    assert offered.isdisjoint({"write_file", "edit_file", "run_command"})
    assert not (workspace / "notes").exists() and not (workspace / SCRIPTED_RUNS).exists()


async def test_workspace_write_acts_in_the_sandbox(tmp_path: Path, workspace: Path) -> None:
    model = ScriptedModel()
    chosen = settings(tmp_path, workspace, sandbox="workspace-write", approval="never")
    with anyio.fail_after(60):
        async with Runtime(chosen, gateway=model) as rt:
            session = await rt.create("s1")
            result = await session.send(ASK)
    assert result.stopped == "answered"
    log = await checked(tmp_path)
    made = {c.name: c for c in calls(log)}
    assert set(made) == {"write_file", "edit_file", "run_command"}
    said = outputs(log)
    note = json.loads(made["write_file"].arguments)["path"]
    assert said[made["write_file"].call_id].output.startswith(f"created {note}")
    assert "+edited by" in said[made["edit_file"].call_id].output
    assert said[made["run_command"].call_id].output.startswith("exit status 0\nran ")
    assert (workspace / note).read_text().startswith("edited by ")
    assert len((workspace / SCRIPTED_RUNS).read_text().splitlines()) == 1


async def test_untrusted_waits_for_a_person_and_a_deny_rule_refuses(
    tmp_path: Path, workspace: Path
) -> None:
    model = ScriptedModel()
    chosen = settings(
        tmp_path,
        workspace,
        sandbox="workspace-write",
        approval="untrusted",
        tool_deny=("run_command:echo *",),
    )
    with anyio.fail_after(60):
        async with Runtime(chosen, gateway=model) as rt:
            session = await rt.create("s1")
            first = await session.send(ASK)
            assert first.stopped == "pending_approval"
            [write] = session.pending_approvals
            assert write.name == "write_file" and not (workspace / "notes").exists()
            second = await session.approve(write.call_id)
            # the edit waits for a word; the command is refused by the rule without asking
            assert second.stopped == "pending_approval"
            assert [c.name for c in session.pending_approvals] == ["edit_file"]
            result = await session.deny(session.pending_approvals[0].call_id, reason="keep it")
    assert result.stopped == "answered"
    log = (await JsonlStore(tmp_path / "store").read("s1")).records
    said = outputs(log)
    made = {c.name: c for c in calls(log)}
    assert said[made["edit_file"].call_id].output == "denied: keep it"
    # each request says why it waits and what the call will do: the same in every view
    asked = {
        r.call_id: r for r in log if isinstance(r, ApprovalRecord) and r.decision == "requested"
    }
    note = json.loads(made["write_file"].arguments)["path"]
    write_asked = asked[made["write_file"].call_id]
    assert write_asked.reason is not None and "approval is untrusted" in write_asked.reason
    assert (
        write_asked.detail
        == f"create {note} (2 lines):\nnote {Path(note).stem}\nwritten by the model\n"
    )
    edit_detail = asked[made["edit_file"].call_id].detail or ""
    assert edit_detail.startswith(f"edit {note}:\n--- a/{note}\n+++ b/{note}")
    assert f"-note {Path(note).stem}\n+edited by" in edit_detail
    refused = said[made["run_command"].call_id]
    assert refused.is_error and refused.output.startswith("refused: refused by the rule")
    assert not (workspace / SCRIPTED_RUNS).exists()
    [note] = (workspace / "notes").iterdir()
    assert note.read_text().startswith("note ")  # written, not edited


async def test_a_resumed_session_keeps_its_sandbox(tmp_path: Path, workspace: Path) -> None:
    chosen = settings(tmp_path, workspace, sandbox="workspace-write", approval="never")
    with anyio.fail_after(60):
        async with Runtime(chosen, gateway=ScriptedModel()) as rt:
            await rt.create("s1")
        model = ScriptedModel()
        # a runtime with the defaults (read-only) resumes it: the session's word holds
        async with Runtime(settings(tmp_path, workspace), gateway=model) as rt:
            session = await rt.open("s1")
            assert rt.settings_of("s1").sandbox == "workspace-write"
            await session.send(ASK)
    assert {"write_file", "run_command"} <= {t.name for t in model.requests[0].tools}
    assert (workspace / SCRIPTED_RUNS).exists()


async def cut_after_the_call(tmp_path: Path, workspace: Path, ask: str) -> tuple[Record, ...]:
    """A one-call turn asked for with ``ask``, its log cut back to just after the call was
    logged, as a kill there leaves it: the records kept."""
    chosen = settings(tmp_path, workspace, sandbox="workspace-write", approval="never")
    async with Runtime(chosen, gateway=ScriptedModel(tool_rounds=1)) as rt:
        session = await rt.create("s1")
        await session.send(ask)
    log = await checked(tmp_path)
    [call] = calls(log)
    at = next(i for i, r in enumerate(log) if isinstance(r, ItemRecord) and r.item is call)
    path = tmp_path / "store" / "s1.jsonl"
    path.write_text("".join(path.read_text().splitlines(True)[: at + 1]))
    return log[: at + 1]


@pytest.mark.parametrize("landed", [True, False])
async def test_a_write_killed_before_its_output_is_found_applied_or_not(
    tmp_path: Path, workspace: Path, landed: bool
) -> None:
    with anyio.fail_after(60):
        [write] = calls(await cut_after_the_call(tmp_path, workspace, "write a note"))
        note = workspace / json.loads(write.arguments)["path"]
        if not landed:
            note.unlink()  # the kill came before the write landed
        before = note.stat().st_mtime_ns if landed else None
        chosen = settings(tmp_path, workspace, sandbox="workspace-write", approval="never")
        async with Runtime(chosen, gateway=ScriptedModel(tool_rounds=1)) as rt:
            session = await rt.open("s1")
            assert session.state.turn_open
            result = await session.continue_turn()
    assert result.stopped == "answered"
    log = await checked(tmp_path)
    [write] = calls(log)
    recorded = outputs(log)[write.call_id]
    if landed:
        assert recorded.output.startswith("applied:") and not recorded.is_error
        assert note.stat().st_mtime_ns == before  # not written again
    else:
        assert recorded.output.startswith("not applied:") and recorded.is_error
        assert not note.exists()  # not written after the restart either


async def test_a_command_killed_mid_run_is_interrupted_with_what_it_printed(
    tmp_path: Path, workspace: Path
) -> None:
    chosen = settings(tmp_path, workspace, sandbox="workspace-write", approval="never")
    with anyio.fail_after(60):
        log = await cut_after_the_call(tmp_path, workspace, "run a command")
    [command] = calls(log)
    # and what the command had printed so far
    printed = ProgressRecord(seq=log[-1].seq + 1, call_id=command.call_id, text="ran halfway\n")
    writer = JsonlStore(tmp_path / "store")
    try:
        await writer.append("s1", [printed])
    finally:
        await writer.aclose()
    runs = (workspace / SCRIPTED_RUNS).read_text()
    with anyio.fail_after(60):
        async with Runtime(chosen, gateway=ScriptedModel(tool_rounds=1)) as rt:
            session = await rt.open("s1")
            assert session.state.partial == {command.call_id: "ran halfway\n"}
            await session.continue_turn()
    recorded = outputs((await JsonlStore(tmp_path / "store").read("s1")).records)[command.call_id]
    assert recorded.is_error and "it was not run again" in recorded.output
    assert recorded.output.endswith("What it had printed:\nran halfway\n")
    assert (workspace / SCRIPTED_RUNS).read_text() == runs  # never re-run
