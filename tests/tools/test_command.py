"""``run_command`` in a real bubblewrap sandbox: it writes inside the workspace and nowhere
else, never into ``.git``, never sees the session store or the runtime's secrets, reaches no
network unless told, is killed with everything it started at its timeout, makes what it
prints durable as it comes, and is refused (never run unconfined) where bwrap is missing."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage.core import FunctionCall, FunctionCallOutput, Settings, ToolContext
from stowage.tools import ToolRegistry, execute_call, workspace_tools

pytestmark = pytest.mark.bwrap


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "src").mkdir()
    return root


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the workspace and outside /tmp (which the sandbox replaces)."""
    where = Path("/var/tmp") / f"stowage-outside-{uuid.uuid4().hex}"
    where.mkdir()
    yield where
    shutil.rmtree(where, ignore_errors=True)


def registry(root: Path, **settings: Any) -> ToolRegistry:
    settings.setdefault("store", root.parent / "store")
    settings.setdefault("sandbox", "workspace-write")
    return workspace_tools(root, settings=Settings(**settings))


async def run(
    tools: ToolRegistry, *, context: ToolContext | None = None, **arguments: Any
) -> FunctionCallOutput:
    call = FunctionCall(call_id="c1", name="run_command", arguments=json.dumps(arguments))
    with anyio.fail_after(60):
        return await execute_call(tools, call, default_timeout=50, context=context)


async def test_a_command_writes_in_the_workspace_and_nowhere_else(
    root: Path, outside: Path
) -> None:
    tools = registry(root)
    out = await run(tools, command=f"echo made > src/made.txt; echo escaped > {outside}/x.txt")
    assert (root / "src" / "made.txt").read_text() == "made\n"
    assert not (outside / "x.txt").exists()
    assert "Read-only file system" in out.output and not out.output.startswith("exit status 0")
    git = await run(tools, command="echo hooked >> .git/config")
    assert "Read-only file system" in git.output
    assert (root / ".git" / "config").read_text() == "[core]\n"


async def test_argv_cwd_and_exit_status(root: Path) -> None:
    tools = registry(root)
    out = await run(
        tools, command=[sys.executable, "-c", "import os; print(os.getcwd())"], cwd="src"
    )
    assert out.output == f"exit status 0\n{root / 'src'}\n"
    failed = await run(tools, command="exit 3")
    assert failed.output == "exit status 3" and not failed.is_error
    away = await run(tools, command="pwd", cwd="..")
    assert away.is_error and "outside the workspace" in away.output


async def test_a_program_in_tmp_runs_though_the_sandbox_has_its_own_tmp(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtualenv or a checkout under /tmp (as ``git clone . /tmp/ci`` makes) stays
    visible, read-only: its program runs, and the rest of /tmp is still the sandbox's own."""
    assert tmp_path.is_relative_to("/tmp"), "pytest's base temp is under /tmp here"
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    hello = venv / "hello"
    hello.write_text("#!/bin/sh\necho hello from $0\n")
    hello.chmod(0o755)
    (tmp_path / "venv" / "notes.txt").write_text("kept\n")
    elsewhere = Path("/tmp") / f"stowage-elsewhere-{uuid.uuid4().hex}"
    elsewhere.mkdir()
    try:
        monkeypatch.setenv("PATH", f"{venv}{os.pathsep}{os.environ['PATH']}")
        tools = registry(root)
        out = await run(tools, command=["hello"])
        assert out.output == f"exit status 0\nhello from {hello}\n"
        written = await run(tools, command=f"echo x > {tmp_path / 'venv' / 'notes.txt'}")
        assert written.output.startswith("exit status ") and "Read-only" in written.output
        assert (tmp_path / "venv" / "notes.txt").read_text() == "kept\n"
        other = await run(tools, command=f"ls {elsewhere}")
        assert "No such file" in other.output
    finally:
        elsewhere.rmdir()


async def test_the_store_and_the_secrets_are_out_of_sight(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = root / ".stowage"
    store.mkdir()
    (store / "s1.jsonl").write_text('{"secret": "the log"}\n')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-commands")
    tools = registry(root, store=store)
    listed = await run(tools, command="ls -A .stowage")
    assert listed.output == "exit status 0"  # an empty folder where the store is
    read = await run(tools, command="cat .stowage/s1.jsonl")
    assert "the log" not in read.output and "No such file" in read.output
    env = await run(tools, command="env")
    assert "sk-not-for-commands" not in env.output and "OPENAI_API_KEY" not in env.output
    assert "PATH=" in env.output
    assert (store / "s1.jsonl").read_text() == '{"secret": "the log"}\n'


async def test_no_network_unless_told(root: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    probe = (
        "import socket,sys\n"
        f"try: socket.create_connection(('127.0.0.1', {port}), timeout=10)\n"
        "except OSError as e: sys.exit(f'no network: {e}')\n"
        "print('connected')\n"
    )
    try:
        boxed = await run(registry(root), command=[sys.executable, "-c", probe])
        assert "no network" in boxed.output and boxed.output.startswith("exit status 1")
        let = await run(registry(root, sandbox_network=True), command=[sys.executable, "-c", probe])
        assert let.output == "exit status 0\nconnected\n"
    finally:
        listener.close()


async def test_a_timeout_kills_the_command_and_what_it_started(root: Path) -> None:
    tools = registry(root, sandbox="full")  # unboxed: its children's process ids are ours
    out = await run(tools, command="sleep 300 & echo $! > child.pid; echo started; wait", timeout=1)
    assert out.output.startswith("timed out after 1s (killed)") and "started" in out.output
    child = int((root / "child.pid").read_text())
    try:
        handle = os.pidfd_open(child)
    except ProcessLookupError:
        return  # gone, reaped already
    try:  # a SIGKILL lands asynchronously: the descriptor turns readable once the child died
        ready, _, _ = await anyio.to_thread.run_sync(select.select, [handle], [], [], 10)
    finally:
        os.close(handle)
    assert ready, f"the command's child {child} outlived it"


async def test_what_it_prints_is_made_durable_as_it_comes(root: Path) -> None:
    pieces: list[str] = []

    async def progress(text: str) -> None:
        pieces.append(text)
        (root / "logged").touch()  # the command goes on only once its first piece is logged

    context = ToolContext(
        session_id="s", round=1, call_id="c1", name="run_command", progress=progress
    )
    script = (
        "import os, time\n"
        "print('x' * 50_000, flush=True)\n"
        "for _ in range(6000):\n"
        "    if os.path.exists('logged'): break\n"
        "    time.sleep(0.01)\n"
        "else: print('never logged')\n"
        "print('the end')\n"
    )
    out = await run(registry(root), context=context, command=[sys.executable, "-c", script])
    assert "never logged" not in out.output
    # logged while the command ran (it waited for that); the end is in the output itself
    assert pieces and pieces[0].startswith("x" * 1000)
    assert "the end" not in "".join(pieces)
    assert out.output.startswith("exit status 0\n" + "x" * 1000)
    assert "characters of output cut" in out.output and out.output.endswith("the end\n")
    assert len(out.output) < 20_000


async def test_a_flood_is_logged_by_its_tail_not_whole(root: Path) -> None:
    logged: list[str] = []

    async def progress(text: str) -> None:
        logged.append(text)

    context = ToolContext(
        session_id="s", round=1, call_id="c1", name="run_command", progress=progress
    )
    flood = "import sys\nfor i in range(200_000): sys.stdout.write(f'line {i:07d}\\n')\n"
    out = await run(registry(root), context=context, command=[sys.executable, "-c", flood])
    assert out.output.endswith("line 0199999\n")
    total = sum(map(len, logged))
    assert 0 < total < 400_000, f"{total:,} characters logged for a 2,600,000-character flood"
    assert logged[-1].rstrip().splitlines()[-1].startswith("line 01")  # its tail, not its head


async def test_without_bwrap_a_sandboxed_command_is_refused_not_run_unconfined(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    out = await run(registry(root), command=f"{shutil.which('touch') or '/usr/bin/touch'} ran")
    assert out.is_error and "bubblewrap is not installed" in out.output
    assert "apt install bubblewrap" in out.output
    assert not (root / "ran").exists()


async def test_the_full_sandbox_needs_no_bwrap(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touch = shutil.which("touch") or "/usr/bin/touch"
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    out = await run(registry(root, sandbox="full"), command=[touch, "ran"])
    assert out.output == "exit status 0" and (root / "ran").exists()
