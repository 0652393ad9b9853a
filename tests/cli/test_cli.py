"""The ``stowage`` command line, run as a user runs it: in subprocesses, on real files."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("the launch code is 4242\n")
    (tmp_path / "plan.md").write_text("# plan\nstep one: read notes\n")
    return tmp_path


def test_run_streams_an_answer_and_prints_the_new_session_id(workdir: Path, cli: Cli) -> None:
    done = cli("run", "what is in the notes?", "--store", "st", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    session_line = next(line for line in done.stderr.splitlines() if line.startswith("session: "))
    session_id = session_line.removeprefix("session: ")
    assert (workdir / "st" / f"{session_id}.jsonl").is_file()


def test_show_and_check_report_compactions_of_a_long_session(workdir: Path, cli: Cli) -> None:
    for n in range(4):
        command = "run" if n == 0 else "resume"
        args = ["--session", "long"] if n == 0 else ["long"]
        done = cli(
            command, *args, f"question {n} about the notes", "--store", "st",
            "--compact-threshold", "600", cwd=workdir,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    shown = cli("show", "long", "--store", "st", cwd=workdir)
    assert shown.returncode == 0
    assert "== compaction 1 (full)" in shown.stdout
    assert "reason: Reported token usage" in shown.stdout
    as_json = cli("show", "long", "--store", "st", "--json", cwd=workdir)
    types = [json.loads(line)["type"] for line in as_json.stdout.splitlines()]
    assert types[0] == "session" and "compaction" in types
    checked = cli("check", "long", "--store", "st", cwd=workdir)
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.strip().endswith("ok")


def test_check_fails_on_a_corrupt_line_in_the_middle_naming_file_and_line(
    workdir: Path, cli: Cli
) -> None:
    assert cli("run", "--session", "c", "hello", "--store", "st", cwd=workdir).returncode == 0
    log = workdir / "st" / "c.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    lines[2] = "{not json\n"
    log.write_text("".join(lines))
    checked = cli("check", "c", "--store", "st", cwd=workdir)
    assert checked.returncode != 0
    assert "c.jsonl:3" in checked.stdout + checked.stderr


def test_bad_session_id_is_refused_with_a_clear_error(workdir: Path, cli: Cli) -> None:
    done = cli("run", "--session", "../escape", "hi", "--store", "st", cwd=workdir)
    assert done.returncode == 2
    assert "invalid session id" in done.stderr
    assert not (workdir / "escape.jsonl").exists()


SLOW_TOOLS = """
import anyio, pydantic
from stowage import FunctionTool, ToolRegistry

class NoArgs(pydantic.BaseModel):
    pass

async def wait_here(args: NoArgs) -> str:
    await anyio.sleep(3600)
    return "never"

registry = ToolRegistry([FunctionTool(name="wait_here", description="waits", args_model=NoArgs, fn=wait_here)])
no_tools = ToolRegistry()
"""


def test_sigkill_mid_round_then_check_passes_and_resume_closes_the_orphan_call(
    workdir: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    """Crash test: the call is durable, the tool never finishes, the process is killed."""
    (workdir / "slowtools.py").write_text(SLOW_TOOLS)
    log = workdir / "st" / "crash.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage.cli", "run", "--session", "crash", "--store", "st",
         "--tools-from", "slowtools:registry", "start the slow job"],
        cwd=workdir, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (log.exists() and '"function_call"' in log.read_text()):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the function_call never reached the log"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stderr:
            proc.stderr.close()
    checked = cli("check", "crash", "--store", "st", cwd=workdir)
    assert checked.returncode == 0, checked.stdout
    assert "without output" in checked.stdout
    # the session would go on with the tools it recorded (wait_here again): none this time
    resumed = cli("resume", "crash", "go on", "--store", "st", "--tools", "none",
                  "--tools-from", "slowtools:no_tools", cwd=workdir)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    calls = {
        r["item"]["call_id"]
        for r in records
        if r["type"] == "item" and r["item"]["type"] == "function_call"
    }
    outputs = {
        r["item"]["call_id"]: r["item"]["output"]
        for r in records
        if r["type"] == "item" and r["item"]["type"] == "function_call_output"
    }
    assert calls and calls == set(outputs)
    assert all("may or may not have run" in outputs[c] for c in calls)
    assert cli("check", "crash", "--store", "st", cwd=workdir).returncode == 0
