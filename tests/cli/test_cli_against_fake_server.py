"""Black box: the CLI, in separate processes, against the fake server in its own process.

What an independent recording server must see: compactions happening, no request carrying a
tool call without its output, summary requests without tools, and no pre-compaction item
coming back after a resume in a new process. Every wire API (Anthropic's Messages too).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stowage.testing import call_ids, orphan_calls

pytestmark = pytest.mark.slow

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py


@pytest.fixture
def fake_server(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    record = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stowage.testing.fake_server",
            "--port",
            "0",
            "--record",
            str(record),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=cli_env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("listening "), line
        yield line.removeprefix("listening "), record
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def recorded(path: Path) -> list[dict]:
    return [json.loads(line)["body"] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("wire", ["chat", "responses", "anthropic"])
def test_long_conversation_through_the_real_client_compacts_and_never_orphans_a_call(
    fake_server: tuple[str, Path], tmp_path: Path, wire: str, cli: Cli
) -> None:
    url, record = fake_server
    work = tmp_path / "work"
    work.mkdir()
    for name in ("alpha.txt", "beta.txt", "gamma.txt"):
        (work / name).write_text(f"{name} holds " + "data " * 300)
    common = ["--store", "st", "--model", "fake-model", "--base-url", url, "--api-key", "sk-test",
              "--wire-api", wire, "--compact-threshold", "1200"]  # fmt: skip
    first = cli("run", "--session", "bb", "read the alpha file", *common, cwd=work)
    assert first.returncode == 0, first.stderr
    assert "sk-test" not in first.stderr + first.stdout
    for n in range(4):
        done = cli("resume", "bb", f"now look at file number {n}", *common, cwd=work)
        assert done.returncode == 0, done.stderr

    bodies = recorded(record)
    assert all(orphan_calls(body) == [] for body in bodies)
    # a summary request is the session's request (tools and all) with the instructions last
    summaries = [b for b in bodies if b.get("tool_choice") in ("none", {"type": "none"})]
    assert summaries, "no summary request reached the server"
    assert all(b.get("tools") for b in summaries)
    log = [json.loads(line) for line in (work / "st" / "bb.jsonl").read_text().splitlines()]
    compactions = [r for r in log if r["type"] == "compaction"]
    assert len(compactions) == len(summaries) >= 2

    # a resume in a new process sends nothing the newest compaction (before it) absorbed
    before = len(bodies)
    newest = compactions[-1]
    absorbed = {
        r["item"]["call_id"]
        for r in log
        if r["type"] == "item"
        and r["item"]["type"] == "function_call"
        and r["seq"] <= newest["covers_through"]
    }
    last = cli("resume", "bb", "one more thing", *common, cwd=work)
    assert last.returncode == 0, last.stderr
    after = recorded(record)[before:]
    assert after
    assert all(not (call_ids(body) & absorbed) for body in after)
    assert cli("check", "bb", "--store", "st", cwd=work).returncode == 0
