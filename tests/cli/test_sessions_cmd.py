"""``stowage list``, ``resume --last``, ``context`` and ``export`` from real subprocesses, over
a JSONL directory and a SQLite file (PostgreSQL in process, on a schema of its own); unknown
ids are one line suggesting ``stowage list``; ``run`` creates, ``resume`` continues."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from stowage.cli._export import export_text
from stowage.cli._sessions import _summaries, last_active_session
from stowage.core import Settings
from stowage.facade import Runtime
from stowage.storage import PostgresStore

pytestmark = pytest.mark.slow

Cli = Callable[..., subprocess.CompletedProcess[str]]
STOWAGE = [sys.executable, "-m", "stowage.cli"]
PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


@pytest.mark.parametrize("store", ["st", "sqlite:///st.db"])
def test_list_shows_every_session_with_its_figures(store: str, tmp_path: Path, cli: Cli) -> None:
    ok(cli("run", "--session", "first", "hello", "--store", store, cwd=tmp_path))
    ok(cli("run", "--session", "second", "hi", "--store", store, "--tools", "none", cwd=tmp_path))
    ok(cli("resume", "second", "more", "--store", store, "--tools", "none", cwd=tmp_path))
    rows = [
        json.loads(line)
        for line in ok(cli("list", "--json", "--store", store, cwd=tmp_path)).splitlines()
    ]
    by_id = {row["id"]: row for row in rows}
    assert sorted(by_id) == ["first", "second"]
    assert by_id["second"]["turns"] == 2 and by_id["first"]["turns"] == 1
    assert by_id["first"]["model"] == "scripted" and by_id["first"]["state"] == "idle"
    assert by_id["first"]["compactions"] == 0
    assert by_id["first"]["tokens"] > 0 and 0 < by_id["first"]["percent_of_usable"] < 100
    assert by_id["second"]["last_activity"] > by_id["first"]["last_activity"]
    table = ok(cli("list", "--store", store, cwd=tmp_path)).splitlines()
    assert table[0].split()[:2] == ["ID", "MODEL"] and len(table) == 3


def test_resume_last_continues_the_most_recently_active_session(tmp_path: Path, cli: Cli) -> None:
    ok(cli("run", "--session", "old", "one", "--store", "st", cwd=tmp_path))
    ok(cli("run", "--session", "new", "two", "--store", "st", cwd=tmp_path))
    ok(cli("resume", "old", "three", "--store", "st", cwd=tmp_path))
    done = cli("resume", "--last", "four", "--store", "st", cwd=tmp_path)
    assert "Answer to: four" in ok(done) and "session: old" in done.stderr
    assert "four" in (tmp_path / "st" / "old.jsonl").read_text()
    assert "four" not in (tmp_path / "st" / "new.jsonl").read_text()


def test_resume_last_in_an_empty_store_is_one_line(tmp_path: Path, cli: Cli) -> None:
    done = cli("resume", "--last", "hi", "--store", "st", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "stowage run" in done.stderr


def test_run_refuses_an_existing_id_and_suggests_resume(tmp_path: Path, cli: Cli) -> None:
    ok(cli("run", "--session", "x", "hello", "--store", "st", cwd=tmp_path))
    before = (tmp_path / "st" / "x.jsonl").read_bytes()
    done = cli("run", "--session", "x", "again", "--store", "st", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "stowage resume x" in done.stderr
    assert (tmp_path / "st" / "x.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    "args",
    [["resume", "typo", "hi"], ["context", "typo"], ["export", "typo"], ["compact", "typo"],
     ["show", "typo"]],
)  # fmt: skip
def test_an_unknown_id_is_one_line_that_suggests_list(
    args: list[str], tmp_path: Path, cli: Cli
) -> None:
    ok(cli("run", "--session", "real", "hello", "--store", "st", cwd=tmp_path))
    done = cli(*args, "--store", "st", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "stowage list" in done.stderr, done.stderr
    assert sorted(p.name for p in (tmp_path / "st").glob("*.jsonl")) == ["real.jsonl"]


def test_context_names_every_part_and_the_next_action(tmp_path: Path, cli: Cli) -> None:
    ok(cli("run", "--session", "c", "hello", "--store", "st", "--system", "Be brief.",
           "--objective", "ship it", "--context-window", "20000", cwd=tmp_path))  # fmt: skip
    report = json.loads(ok(cli("context", "c", "--json", "--store", "st", cwd=tmp_path)))
    parts = report["parts"]
    assert list(parts) == ["system", "protected", "files touched", "summary", "user", "assistant",
                           "tool outputs", "stubs", "tool schemas"]  # fmt: skip
    assert parts["system"]["tokens"] > 0 and parts["protected"]["tokens"] > 0
    assert parts["user"]["tokens"] > 0 and parts["tool schemas"]["tokens"] > 0
    assert parts["summary"]["tokens"] == 0
    assert report["context_window"] == 20000
    assert report["usable"] == 20000 - report["output_reserve"] - parts["tool schemas"]["tokens"]
    assert report["next_action"].startswith("microcompact at 70% of usable")
    text = ok(cli("context", "c", "--store", "st", cwd=tmp_path))
    assert "usable" in text and "next: microcompact at 70%" in text


def test_export_in_every_format(tmp_path: Path, cli: Cli) -> None:
    ok(
        cli(
            "run", "--session", "e", "hello", "--store", "st", "--system", "Be brief.", cwd=tmp_path
        )
    )
    md = ok(cli("export", "e", "--store", "st", cwd=tmp_path))
    assert md.startswith("# Session e") and "## User\n\nhello" in md and "## Assistant" in md
    records = ok(cli("export", "e", "--format", "jsonl", "--store", "st", cwd=tmp_path))
    assert records == (tmp_path / "st" / "e.jsonl").read_text()
    chat = json.loads(
        ok(cli("export", "e", "--format", "openai-chat", "--store", "st", cwd=tmp_path))
    )
    assert chat[0] == {"role": "system", "content": "Be brief."}
    assert chat[1] == {"role": "user", "content": "hello"}
    assert any(m.get("tool_calls") for m in chat) and any(m["role"] == "tool" for m in chat)
    responses = json.loads(
        ok(cli("export", "e", "--format", "openai-responses", "--store", "st", cwd=tmp_path))
    )
    assert any(i.get("type") == "function_call" for i in responses)
    assert any(i.get("type") == "function_call_output" for i in responses)
    ok(cli("export", "e", "-o", "e.md", "--store", "st", cwd=tmp_path))
    assert (tmp_path / "e.md").read_text() == md


@pytest.mark.parametrize("command", [["list"], ["export", "p"], ["show", "--json", "p"]])
def test_a_reader_leaving_early_is_silent(
    command: list[str], tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    ok(cli("run", "--session", "p", "hello", "--store", "st", cwd=tmp_path))
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [*STOWAGE, *command, "--store", "st"], cwd=tmp_path, env=cli_env, stdout=write_end,
            stderr=subprocess.PIPE, timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert done.returncode == 0 and done.stderr == b""


async def test_list_and_last_over_postgresql(tmp_path: Path, pg_schema: str) -> None:
    store = PostgresStore(PG_DSN, schema=pg_schema)
    async with Runtime(Settings(tools="none", store=tmp_path), store=store) as rt:
        first = await rt.create("pg-a")
        await first.send("hello")
        second = await rt.create("pg-b")
        await second.send("hi")
        await second.send("again")
    reader = PostgresStore(PG_DSN, schema=pg_schema)
    try:
        rows = {row.id: row for row in await _summaries(reader)}  # type: ignore[union-attr]
        assert await last_active_session(reader) == "pg-b"
        text = export_text("pg-a", (await reader.read("pg-a", repair=False)).records, "markdown")
    finally:
        await reader.aclose()
    assert sorted(rows) == ["pg-a", "pg-b"] and rows["pg-b"].turns == 2
    assert rows["pg-a"].state == "idle" and "## User\n\nhello" in text


def test_markdown_export_keeps_what_compaction_removed_and_marks_each_compaction(
    tmp_path: Path, cli: Cli
) -> None:
    (tmp_path / "notes.txt").write_text("the launch code is 4242\n" * 40)
    ok(cli("run", "--session", "m", "read notes.txt", "--store", "st", cwd=tmp_path))
    ok(cli("resume", "m", "and now list the files", "--store", "st", cwd=tmp_path))
    ok(cli("compact", "m", "--store", "st", cwd=tmp_path))
    whole = ok(cli("export", "m", "--store", "st", cwd=tmp_path))
    current = ok(cli("export", "m", "--current", "--store", "st", cwd=tmp_path))
    records = [json.loads(line) for line in (tmp_path / "st" / "m.jsonl").read_text().splitlines()]
    (compaction,) = [r for r in records if r["type"] == "compaction"]
    # the whole log: the first message and the file's contents the compaction took out of
    # view are still there, before a marked section that holds the summary, quoted
    assert "## User\n\nread notes.txt" in whole
    assert "the launch code is 4242" in whole
    section = whole.index(f"### Compaction 1 (full), record #{compaction['seq']}")
    assert whole.index("read notes.txt") < section
    first_summary_line = compaction["summary"].splitlines()[0]
    assert f"> {first_summary_line}" in whole[section:]
    assert f"Covers the log through #{compaction['covers_through']}" in whole[section:]
    # what the model sees now: the summary instead of what it covers
    assert "## Summary of earlier history" in current and "### Compaction" not in current
    assert "what the model sees now" in current.splitlines()[2]
    bad = cli("export", "m", "--current", "--format", "jsonl", "--store", "st", cwd=tmp_path)
    assert bad.returncode == 2 and "--current applies to --format markdown" in bad.stderr
