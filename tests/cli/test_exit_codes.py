"""Every exit status of ``stowage``, each from a real subprocess: 0 ok, 1 check failed, 2 usage
or configuration, 3 endpoint, 4 busy, 130 interrupted; a user error is one line, never a
traceback; a reader that leaves the pipe early is not an error."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteReceiveStream
from stowage.cli._exits import error_line, exit_status
from stowage.core import (
    FencingError,
    LeaseHolder,
    ModelConnectionError,
    SessionBusy,
    SessionFailed,
    SessionLeaseLost,
    SessionNotFound,
    StowageError,
    TurnRecord,
)
from stowage.storage import JsonlStore, open_store
from stowage.storage.contract import session_start
from stowage.testing import FakeOpenAIServer, Fault

pytestmark = pytest.mark.slow

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py

STOWAGE = [sys.executable, "-m", "stowage.cli"]
PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_0_ok_and_1_when_check_finds_a_corrupt_line(tmp_path: Path, cli: Cli) -> None:
    done = cli("run", "--session", "c", "hello", "--store", "st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "st" / "c.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    lines[2] = "{not json\n"
    log.write_text("".join(lines))
    checked = cli("check", "c", "--store", "st", cwd=tmp_path)
    assert checked.returncode == 1  # a failed check, not a usage error
    assert "c.jsonl:3" in checked.stdout and checked.stdout.strip().endswith("NOT OK")
    assert "Traceback" not in checked.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["resume", "nope", "hi", "--store", "st"], "no log for session 'nope'"),
        (["show", "nope", "--store", "ftp://example.com/x"], "unsupported scheme 'ftp'"),
        (["run", "--session", "../up", "hi", "--store", "st"], "invalid session id"),
    ],
)
def test_2_for_usage_and_configuration_errors_in_one_line(
    args: list[str], says: str, tmp_path: Path, cli: Cli
) -> None:
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert says in one_line_error(done)
    assert not (tmp_path / "st").exists() and not (tmp_path / "ftp:").exists()


def test_2_for_a_bad_option(tmp_path: Path, cli: Cli) -> None:
    done = cli("show", "x", "--no-such-option", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr


async def test_3_when_the_endpoint_refuses_the_key(tmp_path: Path, cli_env: dict[str, str]) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer() as server:
            server.inject(Fault.auth(), times=10)
            done = await anyio.run_process(
                [*STOWAGE, "run", "--session", "e", "hello", "--store", "st", "--model",
                 "fake-model", "--base-url", server.base_url, "--api-key", "sk-wrong"],
                cwd=tmp_path, env=cli_env, check=False,
            )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert b"Traceback" not in done.stderr and b"sk-wrong" not in done.stderr


async def run_while_held(
    spec: str, session_id: str, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    """``stowage resume`` on a session whose writer lease this process holds."""
    store = open_store(spec)
    try:
        async with await store.acquire(session_id):
            return await anyio.run_process(
                [*STOWAGE, "resume", session_id, "hi", "--store", spec, "--tools", "none"],
                cwd=cwd, env=env, check=False,
            )  # fmt: skip
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
async def test_4_when_another_process_holds_the_session(
    kind: str, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with anyio.fail_after(90):
        spec = {
            "jsonl": str(tmp_path / "st"),
            "sqlite": f"sqlite:///{tmp_path / 'st.db'}",
            "postgres": PG_DSN,
        }[kind]
        session_id = f"busy-{os.getpid()}-{kind}-{tmp_path.name[-6:]}"
        store = open_store(spec)
        try:
            await store.create(session_id, session_start())
        except Exception as exc:
            if kind != "postgres" or os.environ.get("CI"):
                raise
            pytest.skip(f"no PostgreSQL at {PG_DSN}: {exc}")
        finally:
            await store.aclose()
        done = await run_while_held(spec, session_id, tmp_path, cli_env)
    assert done.returncode == 4, done.stderr
    line = done.stderr.decode().strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"session {session_id} is busy" in line and f"pid {os.getpid()} on host" in line


async def read_all(stream: ByteReceiveStream) -> bytes:
    chunks = []
    with contextlib.suppress(anyio.EndOfStream):
        while True:
            chunks.append(await stream.receive())
    return b"".join(chunks)


async def test_130_on_ctrl_c_during_a_model_call_within_seconds_and_the_turn_is_closed(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SIGINT during ``run`` records the turn as interrupted, as the chat's Ctrl-C does: the
    next ``resume`` starts a turn of its own after a closed one."""
    with anyio.fail_after(90):
        async with FakeOpenAIServer(latency=60) as server, await anyio.open_process(
            [*STOWAGE, "run", "--session", "int", "hello", "--store", "st", "--model",
             "fake-model", "--base-url", server.base_url, "--api-key", "sk-test"],
            cwd=tmp_path, env=cli_env,
        ) as proc:  # fmt: skip
            # the server offers a list, not an event, for "a request came in"
            while not server.requests:  # noqa: ASYNC110
                await anyio.sleep(0.05)
            interrupted = anyio.current_time()
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(3):
                returncode = await proc.wait()
            took = anyio.current_time() - interrupted
            assert proc.stderr is not None
            stderr = (await read_all(proc.stderr)).decode()
    assert returncode == 130 and took < 3
    assert "interrupted" in stderr and "Traceback" not in stderr
    store = JsonlStore(tmp_path / "st")
    try:
        records = (await store.read("int", repair=False)).records
    finally:
        await store.aclose()
    # session, the user's message, turn started, turn interrupted: no half round
    assert [type(r).__name__ for r in records] == [
        "SessionRecord", "ItemRecord", "TurnRecord", "TurnRecord"
    ]  # fmt: skip
    assert isinstance(records[3], TurnRecord) and records[3].phase == "interrupted"
    checked = await anyio.run_process(
        [*STOWAGE, "check", "int", "--store", "st"], cwd=tmp_path, env=cli_env, check=False
    )
    assert checked.returncode == 0, checked.stdout
    listed = await anyio.run_process(
        [*STOWAGE, "list", "--json", "--store", "st"], cwd=tmp_path, env=cli_env, check=True
    )
    assert '"state": "idle"' in listed.stdout.decode()  # not "open": the turn is closed


def test_a_reader_leaving_the_pipe_early_ends_show_silently(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    """``stowage show --json X | head -1``: the reader is gone before the output is written."""
    done = cli("run", "--session", "p", "hello", "--store", "st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left
    try:
        shown = subprocess.run(
            [*STOWAGE, "show", "--json", "p", "--store", "st"],
            cwd=tmp_path, env=cli_env, stdout=write_end, stderr=subprocess.PIPE, timeout=120,
            check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert shown.returncode == 0
    assert shown.stderr == b""


def test_statuses_follow_what_ended_the_session_through_its_causes() -> None:
    """Pure: a lost lease or a fenced write is 4 even wrapped in ``SessionFailed``, a model
    error 3, anything else of stowage's 2, and a busy session's line names the holder."""
    fenced = SessionFailed("session s stopped")
    fenced.__cause__ = FencingError("lease 3 is stale")
    model = SessionFailed("session s stopped")
    model.__cause__ = ModelConnectionError("connection refused")
    assert exit_status(SessionLeaseLost("s", "a renewal found it taken over")) == 4
    assert exit_status(fenced) == 4
    assert exit_status(model) == 3
    assert exit_status(SessionNotFound("no log")) == 2
    holder = LeaseHolder(owner="h:1:x", pid=77, host="box", since=datetime(2026, 1, 2, tzinfo=UTC))
    line = error_line(SessionBusy("s", holder))
    assert line.startswith("stowage: session s is busy: pid 77 on host box (since 2026-01-02")
    assert "\n" not in error_line(StowageError("two\nlines"))


def test_3_for_a_wrong_url_names_it_and_suggests_base_url(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    """A 404 is one line with the URL and the fix, without the log lines that echo it."""

    async def run() -> subprocess.CompletedProcess[bytes]:
        async with FakeOpenAIServer() as server:
            wrong = server.base_url.removesuffix("/v1") + "/wrong"
            return await anyio.run_process(
                [*STOWAGE, "run", "hi", "--store", "st", "--model", "m", "--base-url", wrong,
                 "--api-key", "sk-test", "--tools", "none", "--context-window", "50000"],
                cwd=tmp_path, env=cli_env, check=False,
            )  # fmt: skip

    done = anyio.run(run)
    assert done.returncode == 3
    err = done.stderr.decode().strip().splitlines()
    last = err[-1]
    assert "404" in last and "/wrong/chat/completions" in last and "--base-url" in last
    assert not any("model_call_failed" in line or "turn_failed" in line for line in err), err


def test_3_for_a_server_that_is_down_says_cannot_connect_to_the_url(
    tmp_path: Path, cli: Cli
) -> None:
    done = cli("run", "hi", "--store", "st", "--model", "m", "--base-url",
               "http://127.0.0.1:9/v1", "--api-key", "sk-test", "--tools", "none",
               "--context-window", "50000", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("stowage: error: cannot connect to http://127.0.0.1:9/v1")
    assert "Traceback" not in done.stderr
    # one failure, said once: no retry or failure log lines echoing it
    assert not any("model_call" in line or "turn_failed" in line for line in lines), lines
    # found out before a session was written: a failed attempt leaves no log behind
    assert not (tmp_path / "st").exists() or not list((tmp_path / "st").glob("*.jsonl"))
    assert "session:" not in done.stderr


def test_3_for_a_refused_key_names_the_fix_and_leaves_no_session(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    async def run(key: str) -> subprocess.CompletedProcess[bytes]:
        async with FakeOpenAIServer(api_key="sk-right") as server:
            return await anyio.run_process(
                [*STOWAGE, "run", "hi", "--store", "st", "--model", "m", "--base-url",
                 server.base_url, "--api-key", key, "--tools", "none",
                 "--context-window", "50000"],
                cwd=tmp_path, env=cli_env, check=False,
            )  # fmt: skip

    refused = anyio.run(run, "sk-wrong")
    assert refused.returncode == 3
    last = refused.stderr.decode().strip().splitlines()[-1]
    assert "refused the API key (HTTP 401)" in last and "--api-key" in last
    assert "sk-wrong" not in refused.stderr.decode()  # a key is never shown
    assert not (tmp_path / "st").exists() or not list((tmp_path / "st").glob("*.jsonl"))
    accepted = anyio.run(run, "sk-right")
    assert accepted.returncode == 0, accepted.stderr.decode()
    assert len(list((tmp_path / "st").glob("*.jsonl"))) == 1


def test_help_offers_no_option_that_does_nothing(tmp_path: Path, cli: Cli) -> None:
    compact = cli("compact", "--help", cwd=tmp_path).stdout
    resume = cli("resume", "--help", cwd=tmp_path).stdout
    assert "--pin" not in compact and "--system" not in compact
    assert "--system" not in resume and "--last" in resume
    for command in ("run", "resume", "compact", "demo", "load", "chat"):
        assert "seed's" not in cli(command, "--help", cwd=tmp_path).stdout


def test_0_for_a_short_demo_whose_log_is_sound(tmp_path: Path, cli: Cli) -> None:
    done = cli("demo", "--turns", "3", "--store", "st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "log check" in done.stdout and "Traceback" not in done.stderr


def test_the_full_demo_says_where_each_compaction_applied_and_which_a_round_waited_for(
    tmp_path: Path, cli: Cli
) -> None:
    done = cli("demo", "--store", "st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "a round waited for" in line)
    waited, full = (int(n) for n in row.split("│")[2].split(" of "))
    # its reads are large for its 6,000-token window: a summary asked for below the hard mark
    # must free room for four of them, so it may be made at the hard mark, a round waiting
    assert full >= 2 and 0 <= waited <= full, row
    # each one says where it landed and whether (and how long) a request waited for it, as
    # `show` says it from the compaction's record
    applied = [line for line in done.stdout.splitlines() if "applied at" in line]
    assert len(applied) == full and all("waited" in line for line in applied)
    assert sum("a request waited" in line for line in applied) == waited


def test_0_for_list_context_and_export_and_2_for_a_bad_format(tmp_path: Path, cli: Cli) -> None:
    assert cli("run", "--session", "z", "hi", "--store", "st", cwd=tmp_path).returncode == 0
    assert cli("list", "--store", "st", cwd=tmp_path).returncode == 0
    assert cli("context", "z", "--store", "st", cwd=tmp_path).returncode == 0
    assert cli("export", "z", "--store", "st", cwd=tmp_path).returncode == 0
    bad = cli("export", "z", "--format", "pdf", "--store", "st", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
