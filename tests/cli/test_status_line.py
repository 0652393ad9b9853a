"""The live status line: drawn on stderr when it is a terminal, never when it is not; it
never shares a line with the answer on stdout."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest
from stowage.cli._chat_view import describe
from stowage.core import (
    CompactionDecided,
    HistoryCompacted,
    ModelRetrying,
    RoundStarted,
    ToolStarted,
)

pytestmark = pytest.mark.slow

STOWAGE = [sys.executable, "-m", "stowage.cli"]


def test_what_the_line_says_for_each_event() -> None:
    assert describe(
        RoundStarted(session_id="s", round=2, items=5, tokens=1200, estimated=True)
    ) == ("calling the model (round 2, ~1,200 tokens)")
    assert describe(ToolStarted(session_id="s", round=1, call_id="c", name="read_file")) == (
        "running read_file"
    )
    decided = CompactionDecided(
        session_id="s", round=3, action="compact", watermark="compact", tokens=12400,
        estimated=False, usable=14000, fraction=0.88, reason="",
    )  # fmt: skip
    assert describe(decided) == "compacting 12,400 -> ?"
    compacted = HistoryCompacted(
        session_id="s", kind="full", tokens_before=12400, tokens_after=3100, estimated=False,
        removed=9, retained=2, reason="", summary="", covers_through=20, round=3,
    )  # fmt: skip
    assert describe(compacted) == "compacted 12,400 -> 3,100"
    throttled = ModelRetrying(
        session_id="s", purpose="round", attempt=1, delay=3.2, rate_limited=True,
        error="RateLimitError",
    )  # fmt: skip
    assert describe(throttled) == "waiting on rate limit 3 s"
    failed = ModelRetrying(
        session_id="s", purpose="round", attempt=1, delay=0.8, rate_limited=False,
        error="ModelConnectionError",
    )  # fmt: skip
    assert describe(failed) == "ModelConnectionError: retrying in 0.8 s (attempt 2)"


def run_with_stderr_on_a_terminal(tmp_path: Path, env: dict[str, str]) -> tuple[int, str, bytes]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*STOWAGE, "run", "look around", "--store", "st"], cwd=tmp_path, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        assert ready, seen
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    os.close(master)
    return proc.wait(timeout=60), out, seen


def test_a_terminal_gets_the_status_line_and_stdout_only_the_answer(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    (tmp_path / "README.md").write_text("hello\n")
    rc, out, terminal = run_with_stderr_on_a_terminal(tmp_path, cli_env)
    assert rc == 0, terminal
    assert b"calling the model" in terminal and b"running read_file" in terminal
    assert out.startswith("Answer to: look around") and "calling the model" not in out


def test_nothing_of_it_when_stderr_is_not_a_terminal(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = subprocess.run(
        [*STOWAGE, "run", "look around", "--store", "st"], cwd=tmp_path, env=cli_env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "calling the model" not in done.stderr and "\x1b[" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["session", "store"], lines
