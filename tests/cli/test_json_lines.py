"""``--json``: a turn as versioned JSON lines, the same from a live turn (``run``, ``resume``)
as from its log (``send --wait``, whose turn a worker ran)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from stowage.cli._json_stream import PREVIEW_CHARS, SCHEMA_VERSION, record_lines
from stowage.cli._sessions import turn_figures
from stowage.core import Settings
from stowage.facade import Runtime
from stowage.storage import JsonlStore

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py

#: the fields every line of a type has (besides v, type, session): the schema of version 1
FIELDS = {
    "turn_started": {"turn"},
    "round": {"round", "calls", "truncated", "input_tokens", "output_tokens", "cached_tokens"},
    "tool_call": {"round", "call_id", "name", "arguments"},
    "tool_output": {"round", "call_id", "name", "is_error", "chars", "preview", "cut"},
    "compaction": {
        "round", "kind", "tokens_before", "tokens_after", "estimated", "removed", "retained",
        "decided_tokens", "reason",
    },
    "microcompaction": {"stubbed", "tokens_before", "tokens_after", "estimated", "reason"},
    "answer": {"turn", "text"},
    "turn_ended": {
        "turn", "stopped", "rounds", "tokens_in_use", "usable", "percent_of_usable",
        "estimated", "compactions", "exit_status", "error",
    },
}  # fmt: skip


def parsed(stdout: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stdout.splitlines()]
    for line in lines:
        assert line["v"] == SCHEMA_VERSION
        assert set(line) - {"v", "type", "session"} == FIELDS[line["type"]], line
    return lines


def test_run_json_is_one_object_per_line_in_turn_order(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "README.md").write_text("x" * (PREVIEW_CHARS + 100))
    done = cli("run", "--json", "--session", "j1", "look around", "--store", "st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = parsed(done.stdout)
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "turn_started" and kinds[-2:] == ["answer", "turn_ended"]
    assert kinds.count("round") >= 2 and kinds.count("tool_call") == kinds.count("tool_output")
    # each call's output comes after it and before its round's line
    assert kinds.index("tool_call") < kinds.index("tool_output") < kinds.index("round")
    read = next(line for line in lines if line["type"] == "tool_output")
    if read["name"] == "read_file":
        assert len(read["preview"]) == PREVIEW_CHARS and read["cut"] is True
    ended = lines[-1]
    assert ended["stopped"] == "answered" and ended["exit_status"] == 0
    assert ended["rounds"] == kinds.count("round")
    assert ended["session"] == "j1" and ended["compactions"] == 0
    # the figures are those ``stowage context`` prints
    context = json.loads(cli("context", "j1", "--json", "--store", "st", cwd=tmp_path).stdout)
    assert ended["tokens_in_use"] == context["tokens"] and ended["usable"] == context["usable"]
    assert lines[-2]["text"].startswith("Answer to: look around")


def test_resume_json_numbers_the_next_turn(tmp_path: Path, cli: Cli) -> None:
    assert cli("run", "--session", "j2", "hi", "--tools", "none", "--store", "st",
               cwd=tmp_path).returncode == 0  # fmt: skip
    done = cli("resume", "j2", "again", "--json", "--store", "st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = parsed(done.stdout)
    assert lines[0]["turn"] == 2 and lines[-1]["turn"] == 2


def test_a_turn_stopped_at_the_round_limit_ends_with_exit_status_6(
    tmp_path: Path, cli: Cli
) -> None:
    (tmp_path / "README.md").write_text("hello\n")
    (tmp_path / "stowage.toml").write_text("max_rounds_per_turn = 1\n")
    done = cli("run", "--json", "look around", "--store", "st", cwd=tmp_path)
    assert done.returncode == 6, done.stderr
    ended = parsed(done.stdout)[-1]
    assert ended["stopped"] == "round_limit" and ended["exit_status"] == 6


def in_call_order(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``lines`` with each run of ``tool_output`` lines in the order of their calls: parallel
    calls of one round end in whatever order they finish live, the log keeps call order."""
    calls = [line.get("name") for line in lines if line["type"] == "tool_call"]
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for line in [*lines, {"type": ""}]:
        if line["type"] == "tool_output":
            run.append(line)
            continue
        out += sorted(run, key=lambda o: calls.index(o.get("name")))
        run = []
        if line["type"]:
            out.append(line)
    return out


def test_the_lines_read_from_a_log_match_the_live_ones(tmp_path: Path, cli: Cli) -> None:
    """``send --wait --json`` reads a worker's turn back from the log: the same types in the
    same order, the same figures, as the live turn of ``run --json``."""
    (tmp_path / "README.md").write_text("hello\n")
    live = cli("run", "--json", "--session", "live", "look around", "--store", "st", cwd=tmp_path)
    assert live.returncode == 0, live.stderr

    async def logged() -> list[dict[str, Any]]:
        store = JsonlStore(tmp_path / "st")
        async with Runtime(Settings(workspace=tmp_path), store=store) as rt:
            session = await rt.create("logged")
            await session.send("look around", message_id="m-1")
        store = JsonlStore(tmp_path / "st")
        try:
            records = (await store.read("logged", repair=False)).records
        finally:
            await store.aclose()
        return record_lines("logged", records, "m-1", turn_figures("logged", records))

    from_log = in_call_order(anyio.run(logged))
    from_run = in_call_order(parsed(live.stdout))
    assert [line["type"] for line in from_log] == [line["type"] for line in from_run]
    for a, b in zip(from_log, from_run, strict=True):
        a, b = dict(a), dict(b)
        for varying in ("session", "call_id"):
            a.pop(varying, None)
            b.pop(varying, None)
        assert a == b
    assert record_lines("logged", (), "m-1", None) == []  # no such message: no lines
