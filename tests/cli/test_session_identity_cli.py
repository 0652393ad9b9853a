"""Every command acts as the session (issue 29): ``protect``, ``compact``, ``approve`` and
``deny`` continue a session with the model, endpoint and tools source its log recorded, with no
option typed again; an option typed is an override, recorded and shown. The real ``stowage``
command in its own process, against the fake OpenAI server in another."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stowage.cli._run_options import mcp_servers_of
from stowage.core import (
    REDACTED,
    ConfigError,
    SessionRecord,
    Settings,
    continue_settings,
    identity_from_records,
)

from .test_identity import _serve

Cli = Callable[..., subprocess.CompletedProcess[str]]

TOOLS = '''
from pathlib import Path

from stowage import ToolRegistry, tool


@tool(needs_approval=True)
def deploy(target: str = "prod") -> str:
    """Deploy the build (a person approves each call)."""
    Path("deployed.txt").write_text(target)
    return f"deployed to {target}"


registry = ToolRegistry([deploy])
'''


@pytest.fixture
def server(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """The fake server in its own process, recording every request body."""
    yield from _serve(tmp_path, cli_env, "--context-window", "64000")


@pytest.fixture
def work(tmp_path: Path, cli_env: dict[str, str]) -> Path:
    """A project directory with a tools module; the key the endpoint takes is in the
    environment (never in the log)."""
    path = tmp_path / "work"
    path.mkdir()
    (path / "deploytools.py").write_text(TOOLS)
    cli_env["OPENAI_API_KEY"] = "sk-test-key"
    return path


def _bodies(record: Path) -> list[dict]:
    if not record.exists():
        return []
    return [json.loads(line)["body"] for line in record.read_text().splitlines() if line]


def _log(cli: Cli, work: Path, session: str) -> list[dict]:
    shown = cli("show", session, "--json", "--store", "st", cwd=work)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def _waiting_call(cli: Cli, work: Path, session: str) -> str:
    log = _log(cli, work, session)
    requested = [r["call_id"] for r in log if r["type"] == "approval"]
    answered = {
        r["call_id"] for r in log if r["type"] == "approval" and r["decision"] != "requested"
    }
    waiting = [c for c in requested if c not in answered]
    assert waiting, log
    return waiting[-1]


def test_approve_protect_and_compact_continue_a_real_session_with_nothing_typed_again(
    server: tuple[str, Path], work: Path, cli: Cli
) -> None:
    url, record = server
    started = cli("run", "--session", "d1", "--model", "local-llm", "--base-url", url,
                  "--tools-from", "deploytools:registry", "--store", "st", "deploy it",
                  cwd=work)  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert "awaiting approval" in started.stderr
    first = _log(cli, work, "d1")[0]
    assert first["settings"]["tools_from"] == "deploytools:registry"
    assert first["settings"]["base_url"] == url and first["model"] == "local-llm"
    before = len(_bodies(record))

    call = _waiting_call(cli, work, "d1")
    approved = cli("approve", "d1", call, "--store", "st", cwd=work)
    assert approved.returncode == 0, approved.stderr
    # the recorded tool ran here, and the turn went on at the session's own endpoint
    assert (work / "deployed.txt").read_text() == "prod"
    outputs = [r["item"] for r in _log(cli, work, "d1") if r["type"] == "item"
               and r["item"]["type"] == "function_call_output"]  # fmt: skip
    assert outputs[0]["output"] == "deployed to prod" and not outputs[0].get("is_error")
    after_approve = _bodies(record)[before:]
    assert after_approve and {b["model"] for b in after_approve} == {"local-llm"}

    protected = cli("protect", "d1", "--objective", "ship safely", "--store", "st", cwd=work)
    assert protected.returncode == 0, protected.stderr
    assert "[o1] ship safely" in protected.stdout

    asked = len(_bodies(record))
    compacted = cli("compact", "d1", "--store", "st", cwd=work)
    assert compacted.returncode == 0, compacted.stderr
    # the summary was asked of the session's endpoint and model, not the offline one
    summaries = _bodies(record)[asked:]
    assert summaries and {b["model"] for b in summaries} == {"local-llm"}
    assert not [r for r in _log(cli, work, "d1") if r["type"] == "settings_changed"]


def test_a_typed_override_on_protect_is_recorded_shown_and_kept(
    server: tuple[str, Path], work: Path, cli: Cli
) -> None:
    url, record = server
    started = cli("run", "--session", "d2", "--model", "local-llm", "--base-url", url,
                  "--tools", "none", "--store", "st", "hello", cwd=work)  # fmt: skip
    assert started.returncode == 0, started.stderr
    changed = cli("protect", "d2", "--constraint", "no force pushes", "--model", "other-llm",
                  "--store", "st", cwd=work)  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    assert "model 'local-llm' -> 'other-llm'" in changed.stderr
    [override] = [r for r in _log(cli, work, "d2") if r["type"] == "settings_changed"]
    assert override["changes"]["model"] == ["local-llm", "other-llm"]
    assert override["source"] == "user"
    shown = cli("show", "d2", "--store", "st", cwd=work)
    assert "other-llm" in shown.stdout
    # kept from then on: the next command typed nothing and the request names the new model
    asked = len(_bodies(record))
    again = cli("resume", "d2", "go on", "--store", "st", cwd=work)
    assert again.returncode == 0, again.stderr
    assert {b["model"] for b in _bodies(record)[asked:]} == {"other-llm"}


def test_approve_refuses_a_call_whose_tool_is_not_offered_and_approves_nothing(
    work: Path, cli: Cli
) -> None:
    started = cli("run", "--session", "d3", "--tools-from", "deploytools:registry",
                  "--store", "st", "deploy it", cwd=work)  # fmt: skip
    assert started.returncode == 0, started.stderr
    call = _waiting_call(cli, work, "d3")
    (work / "othertools.py").write_text(
        "from stowage import ToolRegistry\nregistry = ToolRegistry()\n"
    )
    refused = cli("approve", "d3", call, "--tools-from", "othertools:registry",
                  "--store", "st", cwd=work)  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "'deploy'" in refused.stderr and "nothing was approved" in refused.stderr
    assert not (work / "deployed.txt").exists()
    decisions = [r["decision"] for r in _log(cli, work, "d3") if r["type"] == "approval"]
    assert decisions == ["requested"]
    # from another directory the recorded module does not import: one line naming it and the fix
    elsewhere = work.parent / "elsewhere"
    elsewhere.mkdir()
    lost = cli("deny", "d3", call, "--store", str(work / "st"), cwd=elsewhere)
    assert lost.returncode == 2
    assert "session d3 takes its tools from 'deploytools:registry'" in lost.stderr
    assert "--tools-from" in lost.stderr and lost.stderr.count("\n") == 1
    # where it imports, deny needs nothing typed either
    denied = cli("deny", "d3", call, "--reason", "not today", "--store", "st", cwd=work)
    assert denied.returncode == 0, denied.stderr
    decisions = [r["decision"] for r in _log(cli, work, "d3") if r["type"] == "approval"]
    assert decisions[:2] == ["requested", "denied"]


def test_mcp_servers_are_recorded_without_credentials_and_given_back_from_the_configuration() -> (
    None
):
    """A credential in an MCP server's command or URL never reaches the record; continuing
    takes the server from the configuration when it redacts to the recorded one, and says
    how to give it when it does not."""
    secret_command = "mcp-tracker --token sk-planted --verbose"
    secret_url = "https://bob:hunter2@mcp.example/mcp"
    settings = Settings(tools_from="deploytools:registry", mcp=(secret_command,),
                        mcp_url=(secret_url,))  # fmt: skip
    recorded = settings.public()
    assert "sk-planted" not in str(recorded) and "hunter2" not in str(recorded)
    assert recorded["mcp"] == [f"mcp-tracker --token {REDACTED} --verbose"]
    assert recorded["tools_from"] == "deploytools:registry"
    identity = identity_from_records([SessionRecord(seq=1, model="scripted", settings=recorded)])

    given, changes = continue_settings(settings, identity, {})
    assert given.mcp == (secret_command,) and given.mcp_url == (secret_url,)
    assert given.tools_from == "deploytools:registry" and changes == {}
    # not given again: left redacted, and refused by the command line that would start it
    # (a worker, which starts none of a session's servers, continues it all the same)
    lacking, _ = continue_settings(Settings(), identity, {})
    assert lacking.mcp == (f"mcp-tracker --token {REDACTED} --verbose",)
    with pytest.raises(ConfigError, match="give it again with --mcp"):
        mcp_servers_of(lacking)

    # typed again differently: an override, recorded redacted
    _, changes = continue_settings(settings, identity, {"mcp": ("other --api-key=sk-2",)})
    assert changes["mcp"] == [[f"mcp-tracker --token {REDACTED} --verbose"],
                              [f"other --api-key={REDACTED}"]]  # fmt: skip


def test_resume_starts_the_mcp_server_the_session_recorded_without_repeating_mcp(
    tmp_path: Path, cli: Cli
) -> None:
    """The offline model calls every tool offered: on resume, with no ``--mcp`` typed, the
    MCP server's ``pid`` tool answers again from a process of its own."""
    pytest.importorskip("mcp")
    server = Path(__file__).parents[1] / "tools" / "mcp_test_server.py"
    command = f"{sys.executable} {server} stdio"
    started = cli("run", "--session", "m1", "--tools", "none", "--mcp", command,
                  "--store", "st", "use the tools", cwd=tmp_path)  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert _log(cli, tmp_path, "m1")[0]["settings"]["mcp"] == [command]
    resumed = cli("resume", "m1", "again", "--store", "st", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    log = _log(cli, tmp_path, "m1")
    turn_two = next(i for i, r in enumerate(log) if r["type"] == "turn" and r["turn"] == 2)
    names = {r["item"]["call_id"]: r["item"]["name"] for r in log[turn_two:]
             if r["type"] == "item" and r["item"]["type"] == "function_call"}  # fmt: skip
    pids = [r["item"]["output"] for r in log[turn_two:] if r["type"] == "item"
            and r["item"]["type"] == "function_call_output"
            and names.get(r["item"]["call_id"]) == "pid"]  # fmt: skip
    assert pids and pids[0].isdigit()
    assert not [r for r in log if r["type"] == "settings_changed"]
