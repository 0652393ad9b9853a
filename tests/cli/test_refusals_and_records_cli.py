"""Issue 29's smaller promises, through the real command: a message that cannot fit the window
is refused before anything is logged, with the figures; a torn last line cut on open is said
once; ``compact --focus`` is recorded on the compaction and shown."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from stowage.core import CompactionRecord
from stowage.storage import decode_record, encode_record

Cli = Callable[..., subprocess.CompletedProcess[str]]

BIG = "y" * 40_000  # ~10,000 tokens: more than an 8,000-token window leaves for history


def test_a_message_that_cannot_fit_is_refused_before_anything_is_logged(
    tmp_path: Path, cli: Cli
) -> None:
    new = cli("run", "--session", "big", "--context-window", "8000", "--store", "st", BIG,
              cwd=tmp_path)  # fmt: skip
    assert new.returncode == 2
    assert new.stderr.count("\n") == 1, new.stderr
    for figure in ("~10,000 tokens", "40,000 characters", "8,000 tokens", "usable"):
        assert figure in new.stderr, new.stderr
    assert not (tmp_path / "st").exists()  # no session, not even its store

    made = cli("run", "--session", "ok", "--context-window", "8000", "--tools", "none",
               "--store", "st", "hello", cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    before = (tmp_path / "st" / "ok.jsonl").read_bytes()
    refused = cli("resume", "ok", BIG, "--store", "st", cwd=tmp_path)
    assert refused.returncode == 2 and "cannot fit" in refused.stderr
    assert (tmp_path / "st" / "ok.jsonl").read_bytes() == before


def test_a_torn_last_line_cut_on_open_is_said_once(tmp_path: Path, cli: Cli) -> None:
    made = cli("run", "--session", "t", "--tools", "none", "--store", "st", "hi", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    log = tmp_path / "st" / "t.jsonl"
    for command in (("resume", "t", "again"), ("protect", "t", "--objective", "stay safe")):
        with log.open("ab") as f:
            f.write(b'{"v":1,"seq":99,"ty')  # a write cut short by a crash
        done = cli(*command, "--store", "st", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("log repaired") == 1, (command, done.stderr)
        assert "log_torn_tail_repaired" not in done.stderr
    assert cli("check", "t", "--store", "st", cwd=tmp_path).returncode == 0


def test_compact_focus_is_recorded_on_the_compaction_and_shown(tmp_path: Path, cli: Cli) -> None:
    first = cli("run", "--session", "f", "--store", "st", "survey the runtime", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "notes.txt").write_text("a line of notes\n" * 400)
    for message in ("read notes.txt", "look at notes.txt again"):
        done = cli("resume", "f", message, "--store", "st", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    compacted = cli("compact", "f", "--focus", "the notes file", "--store", "st", cwd=tmp_path)
    assert compacted.returncode == 0, compacted.stderr
    assert "compacted (full)" in compacted.stdout, compacted.stdout
    shown = cli("show", "f", "--json", "--store", "st", cwd=tmp_path)
    [record] = [
        r for line in shown.stdout.splitlines() if (r := json.loads(line))["type"] == "compaction"
    ]
    assert record["focus"] == "the notes file"
    text = cli("show", "f", "--store", "st", cwd=tmp_path).stdout
    assert "focus: the notes file" in text


def test_the_focus_field_round_trips_and_is_left_out_when_there_is_none() -> None:
    record = CompactionRecord(seq=5, summary="s", covers_through=4, retained=(), reason="r",
                              tokens_before=10, tokens_after=2, removed=3, round=1,
                              focus="the deploy")  # fmt: skip
    assert decode_record(encode_record(record)) == record
    plain = CompactionRecord(seq=5, summary="s", covers_through=4, retained=(), reason="r",
                             tokens_before=10, tokens_after=2, removed=3, round=1)  # fmt: skip
    assert "focus" not in json.loads(encode_record(plain))
    assert decode_record(encode_record(plain)).focus is None


def test_a_base_url_that_serves_nothing_leaves_no_session_behind(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    from .test_identity import _serve

    served = _serve(tmp_path, cli_env)
    base_url, _ = next(served)
    try:
        wrong = base_url.removesuffix("/v1") + "/not-the-api"
        done = cli("run", "--session", "junk", "--model", "some-model", "--base-url", wrong,
                   "--api-key", "k", "--store", "st", "hello", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 3, done.stderr
        assert "nothing serves the chat API at" in done.stderr
        assert f"POST {wrong}/chat/completions both answered HTTP 404" in done.stderr
        assert "check --base-url" in done.stderr
        assert not (tmp_path / "st" / "junk.jsonl").exists()  # no junk "open" session
        # the right URL of the same server passes the probe and answers
        right = cli("run", "--session", "fine", "--model", "some-model", "--base-url",
                    base_url, "--api-key", "k", "--store", "st", "hello", cwd=tmp_path)  # fmt: skip
        assert right.returncode == 0, right.stderr
    finally:
        served.close()
