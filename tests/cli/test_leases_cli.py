"""One writer per session on the command line: two real ``stowage`` processes on one session,
read-only commands that change nothing, ``check --repair``, and every store named by URL."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.storage import open_store

pytestmark = pytest.mark.slow

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py

PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

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


def log_records(spec: str, session_id: str, cwd: Path) -> list[str]:
    """The session's records as JSON lines, read without a lease (nothing changed)."""

    async def read() -> list[str]:
        store = open_store(spec if "://" in spec else str(cwd / spec))
        try:
            records = (await store.read(session_id, repair=False)).records
        finally:
            await store.aclose()
        return [type(r).__name__ + repr(r) for r in records]

    return anyio.run(read)


def has_function_call(spec: str, session_id: str, cwd: Path) -> bool:
    try:
        return any("FunctionCall(" in r for r in log_records(spec, session_id, cwd))
    except Exception:  # not created yet
        return False


@pytest.fixture
def slow_writer(
    tmp_path: Path, cli_env: dict[str, str]
) -> Iterator[Callable[[str, str], subprocess.Popen[str]]]:
    """Start ``stowage run`` on a session whose tool never returns; killed afterwards."""
    (tmp_path / "slowtools.py").write_text(SLOW_TOOLS)
    procs: list[subprocess.Popen[str]] = []

    def start(spec: str, session_id: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stowage.cli", "run", "--session", session_id,
             "--store", spec, "--tools-from", "slowtools:registry", "start the slow job"],
            cwd=tmp_path, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        procs.append(proc)
        deadline = time.monotonic() + 30
        while not has_function_call(spec, session_id, tmp_path):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the function_call never reached the log"
            time.sleep(0.1)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_second_process_is_refused_while_the_first_runs_a_slow_tool(
    kind: str, tmp_path: Path, cli: Cli, slow_writer: Callable[[str, str], subprocess.Popen[str]]
) -> None:
    spec = "st" if kind == "jsonl" else f"sqlite:///{tmp_path / 'st.db'}"
    first = slow_writer(spec, "race")
    before = log_records(spec, "race", tmp_path)
    for command in (
        ["resume", "race", "barge in"],
        ["chat", "race"],  # ``run --session race`` is refused as existing (status 2) first
        ["compact", "race"],
        ["protect", "race", "--constraint", "never mind"],
        ["check", "race", "--repair"],
    ):
        refused = cli(*command, "--store", spec, cwd=tmp_path)
        assert refused.returncode == 4, (command, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr  # one line, no traceback
        assert "session race is busy" in lines[0]
        assert f"pid {first.pid} on host" in lines[0] and "since" in lines[0]
        assert "stop it" in lines[0]
    assert log_records(spec, "race", tmp_path) == before  # the log is intact
    checked = cli("check", "race", "--store", spec, cwd=tmp_path)  # a reader: never busy
    assert checked.returncode == 0, checked.stdout
    (row,) = [json.loads(line) for line in
              cli("list", "--json", "--store", spec, cwd=tmp_path).stdout.splitlines()]  # fmt: skip
    assert row["state"] == "leased" and row["holder"].startswith(f"pid {first.pid} on "), row
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    (row,) = [json.loads(line) for line in
              cli("list", "--json", "--store", spec, cwd=tmp_path).stdout.splitlines()]  # fmt: skip
    assert row["state"] == "open" and row["holder"] is None, row  # killed mid-turn: free, open
    # the session would go on with the tools it recorded (wait_here again): none this time
    resumed = cli("resume", "race", "go on", "--store", spec, "--tools", "none",
                  "--tools-from", "slowtools:no_tools", cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr  # a dead writer's lease is free
    assert cli("check", "race", "--store", spec, cwd=tmp_path).returncode == 0


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_show_and_check_change_no_byte_and_create_no_file(tmp_path: Path, cli: Cli) -> None:
    assert cli("run", "--session", "ro", "hello", "--store", "st", cwd=tmp_path).returncode == 0
    assert cli("run", "--session", "ro", "hello", "--store", "sqlite:///st.db", cwd=tmp_path).returncode == 0  # fmt: skip
    log = tmp_path / "st" / "ro.jsonl"
    (tmp_path / "st" / "ro.lock").unlink()  # as a fresh copy of the log would be
    torn = b'{"v":1,"seq":99,"type":"it'
    log.write_bytes(log.read_bytes() + torn)
    before = tree(tmp_path)
    for args in (
        ["show", "ro"], ["check", "ro"],
        ["show", "ro", "--store", "sqlite:///st.db"], ["check", "ro", "--store", "sqlite:///st.db"],
        ["check", "ro", "--store", "nowhere"], ["show", "ro", "--store", "sqlite:///none.db"],
    ):  # fmt: skip
        spec = [] if "--store" in args else ["--store", "st"]
        done = cli(*args, *spec, cwd=tmp_path)
        assert "Traceback" not in done.stderr
    assert tree(tmp_path) == before  # nothing created, locked, cut or changed


def test_check_reports_a_torn_tail_and_repair_cuts_it(tmp_path: Path, cli: Cli) -> None:
    assert cli("run", "--session", "t", "hello", "--store", "st", cwd=tmp_path).returncode == 0
    log = tmp_path / "st" / "t.jsonl"
    whole = log.read_bytes()
    log.write_bytes(whole + b'{"v":1,"seq":99,"type":"it')
    checked = cli("check", "t", "--store", "st", cwd=tmp_path)
    assert checked.returncode == 1
    assert "torn last line: 26 bytes" in checked.stdout and "--repair" in checked.stdout
    assert log.read_bytes() == whole + b'{"v":1,"seq":99,"type":"it'  # reported, not cut
    repaired = cli("check", "t", "--repair", "--store", "st", cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stdout
    assert "cut an incomplete last line (26 bytes)" in repaired.stdout
    assert repaired.stdout.strip().endswith("ok")
    assert log.read_bytes() == whole
    again = cli("check", "t", "--repair", "--store", "st", cwd=tmp_path)
    assert again.returncode == 0 and "nothing to cut" in again.stdout


@pytest.fixture
def pg_url() -> str:
    """The test database as a store URL (its ``public`` schema, where a URL's store lives)."""

    async def probe() -> None:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
        await conn.close()

    try:
        anyio.run(probe)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {PG_DSN} under CI: {exc}")
        pytest.skip(f"no PostgreSQL at {PG_DSN}: {exc}")
    return PG_DSN


def delete_pg_session(session_id: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
        try:
            for table in ("stowage_records", "stowage_sessions"):
                await conn.execute(f"DELETE FROM {table} WHERE session_id = $1", session_id)
        finally:
            await conn.close()

    anyio.run(run)


@pytest.mark.parametrize("store", ["dir", "sqlite", "postgres"])
def test_every_command_takes_the_store_from_the_option_or_the_environment(
    store: str, tmp_path: Path, cli_env: dict[str, str], request: pytest.FixtureRequest
) -> None:
    """run, resume, protect, compact, show and check all open the named store; a URL never
    becomes a folder named after its scheme."""
    spec = {
        "dir": str(tmp_path / "logs"),
        "sqlite": f"sqlite:///{tmp_path / 'db' / 'st.db'}",
        "postgres": request.getfixturevalue("pg_url") if store == "postgres" else "",
    }[store]
    sid = f"url-{secrets.token_hex(4)}"
    work = tmp_path / "work"
    work.mkdir()
    env = {**cli_env, "STOWAGE_STORE": spec}

    def run(*args: str, use_env: bool = False) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "stowage.cli", *args]
        if not use_env:
            command += ["--store", spec]
        done = subprocess.run(
            command, cwd=work, env=env if use_env else cli_env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (args, done.stderr)
        return done

    try:
        run("run", "--session", sid, "hello", "--tools", "none")
        run("resume", sid, "again", "--tools", "none", use_env=True)
        run("protect", sid, "--constraint", "keep it short", use_env=True)
        compacted = run("compact", sid, use_env=True)
        shown = run("show", sid, "--json", use_env=True)
        types = [json.loads(line)["type"] for line in shown.stdout.splitlines()]
        assert types.count("turn") == 4 and "protected" in types
        # two short turns: a summary would not be smaller, so compact says so and writes nothing
        assert f"{sid}: nothing compacted" in compacted.stdout and "compaction" not in types
        run("check", sid, use_env=True)
        assert sorted(p.name for p in work.iterdir()) == []  # no .stowage, no 'sqlite:' folder
    finally:
        if store == "postgres":
            delete_pg_session(sid)
