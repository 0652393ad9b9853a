"""``show`` and ``check`` say what the other commands say.

After a rewind, ``show`` closes with the tokens in use now, the figure ``context`` and
``list`` give (one computation over the same records: the discarded branch is in none of
them), and numbers compactions as they count them. ``check`` says a call awaiting approval
keeps waiting on resume (it gets no "interrupted" output), and a round a crash left open gets
"interrupted" outputs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from .test_export_requests import _effective, open_after_a_crash, waiting_for_approval

BIG = "y" * 9000  # a quarter of the scripted model's usable window: compactions come fast


Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path, cli_env: dict[str, str]) -> Cli:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "stowage.cli", *args, "--store", "st"],
            cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (args, done.stderr)
        return done

    return run


def test_show_after_a_rewind_agrees_with_context_and_list(cli: Cli) -> None:
    cli("run", "--session", "r", "hello")
    for turn in range(4):
        cli("resume", "r", f"{BIG} turn {turn}")
    before = json.loads(cli("context", "r", "--json").stdout)
    cli("rewind", "r", "--to", "1")
    cli("resume", "r", "after the rewind")
    shown = cli("show", "r").stdout
    context = json.loads(cli("context", "r", "--json").stdout)
    [listed] = [json.loads(line) for line in cli("list", "--json").stdout.splitlines()]
    # the branch the rewind discarded held compactions and most of the tokens
    assert "discarded | " in shown and "compaction of the discarded branch" in shown
    assert context["tokens"] < before["tokens"]
    now = re.search(r"^in use now: ([\d,]+) of ([\d,]+) tokens", shown, re.MULTILINE)
    assert now, shown
    assert int(now[1].replace(",", "")) == context["tokens"] == listed["tokens"]
    assert int(now[2].replace(",", "")) == context["usable"]
    numbered = re.findall(r"^#\d+ +== compaction \d+ ", shown, re.MULTILINE)
    assert len(numbered) == listed["compactions"]


def test_check_says_a_waiting_call_keeps_waiting_and_an_open_round_is_interrupted(
    tmp_path: Path, cli: Cli
) -> None:
    anyio.run(_effective, tmp_path / "st", "w", waiting_for_approval())
    anyio.run(_effective, tmp_path / "st", "c", open_after_a_crash())
    waiting = cli("check", "w").stdout
    assert "waits for approval of 1 call(s) (wait1)" in waiting
    assert "a resume leaves them waiting" in waiting and "interrupted" not in waiting
    crashed = cli("check", "c").stdout
    assert "resume will give them 'interrupted' outputs" in crashed
