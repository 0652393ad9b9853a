"""An empty log (no bytes, only a torn line, or no session record first) reads back as what it
is, and ``check`` reports it (``stowage check`` exits 1) instead of passing it as sound."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from stowage.core import ItemRecord, TornTail, UserMessage
from stowage.policy import check_log
from stowage.storage import JsonlStore, encode_record
from stowage.storage.contract import round_records, session_start

Cli = Callable[..., subprocess.CompletedProcess[str]]

_TORN = b'{"v":1,"seq":1,"ts":"2026-01-01T00:00:00+00:00","ty'
_NO_SESSION = encode_record(ItemRecord(seq=1, item=UserMessage(text="hello")))


def test_an_empty_log_is_a_problem() -> None:
    report = check_log("s", [], [])
    assert not report.ok
    assert report.problems == (
        "the log is empty: it holds no session record (seq 1) and cannot be resumed",
    )


def test_a_log_of_only_a_torn_line_is_a_problem_naming_it() -> None:
    torn = TornTail(path="/st/s.jsonl", line=1, bytes_removed=len(_TORN))
    report = check_log("s", [], [], torn_tail=torn)
    assert not report.ok
    assert f"{len(_TORN)} bytes at /st/s.jsonl:1" in report.problems[0]
    assert "was cut off" in report.notes[0]


def test_a_log_without_its_session_record_first_is_a_problem() -> None:
    records = [ItemRecord(seq=1, item=UserMessage(text="hello"))]
    report = check_log("s", records, records)
    assert not report.ok
    assert "starts with a ItemRecord at seq 1, not the session record" in report.problems[0]


def test_a_torn_tail_after_whole_records_is_a_note_not_a_problem() -> None:
    log = [*session_start(), *round_records(4, 1)]
    torn = TornTail(path="/st/s.jsonl", line=8, bytes_removed=12, removed=False)
    report = check_log("s", log, log, torn_tail=torn)
    assert report.ok and report.records == 7
    assert report.notes == (
        "a torn last line (12 bytes at /st/s.jsonl:8) is still in the file: a write a crash "
        "cut short, never acknowledged",
    )


@pytest.mark.parametrize("data", [b"", _TORN], ids=["no-bytes", "only-a-torn-line"])
async def test_the_store_reads_an_empty_log_as_no_records(data: bytes, tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_bytes(data)
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path)
        read = await store.read("s", repair=False)
        tail = await store.read_tail("s", repair=False)
        await store.aclose()
    assert read.records == tail.records == ()
    assert (read.torn_tail is not None) == bool(data)
    assert not check_log("s", read.records, tail.records, torn_tail=read.torn_tail).ok


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "the log is empty"),
        (_TORN, "the log is empty"),  # check cuts the torn line first, and says so
        (_NO_SESSION, "not the session record"),
    ],
    ids=["no-bytes", "only-a-torn-line", "no-session-record"],
)
def test_stowage_check_exits_1_on_an_empty_log(
    data: bytes, problem: str, cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "s.jsonl").write_bytes(data)
    checked = cli("check", "s", "--store", "st", cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert problem in checked.stdout and "NOT OK" in checked.stdout, checked.stdout
