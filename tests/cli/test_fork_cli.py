"""``stowage fork`` and ``stowage rewind`` as a user runs them, on every kind of store: the
parent stays byte for byte, the fork and the rewound session check sound (requests included),
``show`` marks a discarded branch, and every refusal is one line with exit status 2."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.storage import JsonlStore

Cli = Callable[..., subprocess.CompletedProcess[str]]

STOWAGE = [sys.executable, "-m", "stowage.cli"]
PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
async def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "jsonl":
        return str(tmp_path / "st")
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'st.db'}"
    try:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {PG_DSN} under CI: {exc}")
        pytest.skip(f"no PostgreSQL at {PG_DSN}: {exc}")
    await conn.close()
    return PG_DSN  # the public schema: the ids below are unique to this test


def _refused(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert words in line, line


def test_fork_and_rewind_from_the_command_line(tmp_path: Path, cli: Cli, store_spec: str) -> None:
    parent = f"p-{secrets.token_hex(4)}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return cli(*args, "--store", store_spec, cwd=tmp_path)

    first = run("run", "--session", parent, "--model", "scripted", "list and read files")
    assert first.returncode == 0, first.stderr
    for text in ("second: list and read files", "third"):
        done = run("resume", parent, text)
        assert done.returncode == 0, done.stderr
    before = run("show", parent, "--json").stdout

    forked = run("fork", parent, "--at", "2")
    assert forked.returncode == 0, forked.stderr
    child = forked.stdout.strip()
    assert child == f"{parent}-fork-1"
    assert f"forked {parent} at the end of round 2 as {child}" in forked.stderr
    continued = run("resume", child, "what now in the fork?")
    assert continued.returncode == 0, continued.stderr
    assert run("show", parent, "--json").stdout == before
    checked = run("check", child, "--requests")
    assert checked.returncode == 0 and checked.stdout.rstrip().endswith("ok"), checked.stdout
    own = run("show", child, "--json").stdout.splitlines()
    assert '"type":"forked_from"' in own[0] and f'"parent_id":"{parent}"' in own[0]
    assert f">> forked from session {parent} at round 2" in run("show", child).stdout

    rewound = run("rewind", parent, "--to", "2")
    assert rewound.returncode == 0, rewound.stderr
    assert "discarded branch" in rewound.stdout
    again = run("resume", parent, "a different third turn")
    assert again.returncode == 0, again.stderr
    checked = run("check", parent, "--requests")
    assert checked.returncode == 0 and checked.stdout.rstrip().endswith("ok"), checked.stdout
    shown = run("show", parent).stdout
    assert "<< rewound to round 2" in shown
    discarded = [line for line in shown.splitlines() if line.startswith("discarded | ")]
    assert any("[user] third" in line for line in discarded)
    assert not any("a different third turn" in line for line in discarded)
    # the log still holds the branch, as it was written
    assert run("show", parent, "--json").stdout.startswith(before)

    _refused(run("fork", f"nobody-{parent}"), "no")
    _refused(run("fork", parent, "--at", "99"), f"session {parent} has no committed round 99")
    _refused(run("fork", parent, "--as", child), child)
    _refused(run("fork", parent, "--as", "no/slash"), "invalid session id")
    _refused(run("rewind", parent, "--to", "99"), "no committed round 99")
    _refused(run("rewind", f"nobody-{parent}", "--to", "1"), f"nobody-{parent}")
    assert run("rewind", parent).returncode == 2  # --to is required
    assert run("fork", parent, "--at", "0").returncode == 2


async def test_rewind_of_a_session_another_process_writes_exits_4(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The rewind is written under the writer lease: a busy session is refused, unchanged."""
    with anyio.fail_after(60):
        made = await anyio.run_process(
            [*STOWAGE, "run", "--session", "busy", "--model", "scripted", "--store", "st", "hi"],
            cwd=tmp_path, env=cli_env, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        log = tmp_path / "st" / "busy.jsonl"
        before = log.read_bytes()
        store = JsonlStore(tmp_path / "st")
        try:
            async with await store.acquire("busy"):
                done = await anyio.run_process(
                    [*STOWAGE, "rewind", "busy", "--to", "1", "--store", "st"],
                    cwd=tmp_path, env=cli_env, check=False,
                )  # fmt: skip
        finally:
            await store.aclose()
    assert done.returncode == 4, done.stderr
    line = done.stderr.decode().strip()
    assert "\n" not in line and "session busy is busy" in line
    assert log.read_bytes() == before
