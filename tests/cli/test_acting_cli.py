"""The tools that act from the command line: ``run --sandbox workspace-write`` writes, edits
and runs commands end to end; under ``--approval untrusted`` every call that acts stops for a
person, who sees the diff or the whole command line (in the chat, inline; after ``run``, with
the commands that answer); ``context`` shows the session's policy."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .test_chat_pty import Terminal

STOWAGE = [sys.executable, "-m", "stowage.cli"]
ASK = "write a note, edit it, then run a command"
RUNS = "scripted-runs.log"

pytestmark = [pytest.mark.slow, pytest.mark.bwrap]


@pytest.fixture
def env(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "xterm"}


def stowage(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STOWAGE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_run_acts_in_the_sandbox_end_to_end_and_context_shows_the_policy(
    tmp_path: Path, env: dict[str, str]
) -> None:
    acting = ["--sandbox", "workspace-write", "--approval", "on-request"]
    done = stowage(tmp_path, env, "run", "--store", "st", "--session", "w1", *acting, ASK)
    assert done.returncode == 0, done.stderr
    assert "write_file -> created notes/" in done.stdout
    [note] = (tmp_path / "notes").iterdir()
    assert note.read_text().startswith("edited by ")
    assert len((tmp_path / RUNS).read_text().splitlines()) == 1
    context = stowage(tmp_path, env, "context", "--store", "st", "w1")
    assert "tools: sandbox workspace-write (no network), approval on-request" in context.stdout
    assert "deny *:.git/*" in context.stdout
    # the default acts on nothing: the same words, no tool that could
    done = stowage(tmp_path, env, "run", "--store", "st", "--session", "r1", ASK)
    assert done.returncode == 0 and "write_file" not in done.stdout
    assert len((tmp_path / RUNS).read_text().splitlines()) == 1


def test_run_under_untrusted_shows_what_each_call_will_do_and_how_to_answer(
    tmp_path: Path, env: dict[str, str]
) -> None:
    acting = ["--sandbox", "workspace-write", "--approval", "untrusted"]
    done = stowage(tmp_path, env, "run", "--store", "st", "--session", "u1", *acting, ASK)
    assert done.returncode == 0, done.stderr
    write = re.search(r"awaiting approval: call (\S+): write_file\(", done.stderr)
    assert write, done.stderr
    assert re.search(r"\n    create notes/\w+\.md \(2 lines\):\n    note \w+\n", done.stderr)
    assert f"stowage approve u1 {write.group(1)} --store" in done.stderr
    assert not (tmp_path / "notes").exists()
    approved = stowage(tmp_path, env, "approve", "--store", "st", "u1", write.group(1))
    assert approved.returncode == 0, approved.stderr
    # the next round waits too: the edit shows its diff, the command its whole line
    assert re.search(r"\n    --- a/notes/\w+\.md\n    \+\+\+ b/notes/\w+\.md\n", approved.stderr)
    assert "\n    $ echo " in approved.stderr and f">> {RUNS} && echo ran " in approved.stderr
    assert "in the workspace-write sandbox, no network" in approved.stderr
    show = stowage(tmp_path, env, "show", "--store", "st", "u1")
    assert "** approval requested for call" in show.stdout and "| create notes/" in show.stdout


def test_the_chat_asks_inline_showing_the_diff_and_the_command(
    tmp_path: Path, env: dict[str, str]
) -> None:
    args = ["--store", "st", "--model", "scripted", "--session", "c1"]
    args += ["--sandbox", "workspace-write", "--approval", "untrusted"]
    term = Terminal(args, tmp_path, env)
    try:
        term.type(ASK + "\r")
        term.expect("awaits approval: write_file(")
        assert re.search(r"\n\s+create notes/\w+\.md", term.expect("approve? [y/n]"))
        term.type("y\r")
        term.expect("awaits approval: edit_file(")
        shown = term.expect("approve? [y/n]", timeout=30)
        assert re.search(r"\n\s+edit notes/\w+\.md:", shown)
        assert re.search(r"\n\s+-note \w+", shown) and re.search(r"\n\s+\+edited by \w+", shown)
        term.type("y\r")
        term.expect("awaits approval: run_command(")
        shown = term.expect("approve? [y/n]", timeout=30)
        assert re.search(r"\n\s+\$ echo \w+ >> " + RUNS, shown)
        term.type("n\r")
        term.expect(f"Answer to: {ASK}", timeout=30)
        term.type("\x04")
        assert term.wait() == 0
    finally:
        term.close()
    [note] = (tmp_path / "notes").iterdir()
    assert note.read_text().startswith("edited by ")
    assert not (tmp_path / RUNS).exists()  # denied: never ran
    log = [json.loads(line) for line in (tmp_path / "st" / "c1.jsonl").read_text().splitlines()]
    denied = [r for r in log if r.get("type") == "approval" and r["decision"] == "denied"]
    assert len(denied) == 1
