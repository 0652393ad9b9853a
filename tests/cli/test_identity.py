"""A session keeps what it was created with: the real ``stowage`` command, in subprocesses,
against the fake OpenAI server in its own process (the issue: ``resume`` switched a real
session to the offline model and ``compact`` wrote a fake summary)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]


def _serve(tmp_path: Path, env: dict[str, str], *extra: str) -> Iterator[tuple[str, Path]]:
    record = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage.testing.fake_server", "--port", "0",
         "--record", str(record), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
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


@pytest.fixture
def server(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """The fake server, telling ``GET /v1/models/{id}`` a window of 64000."""
    yield from _serve(tmp_path, cli_env, "--context-window", "64000")


@pytest.fixture
def quiet_server(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """The fake server, naming no window."""
    yield from _serve(tmp_path, cli_env)


def bodies(record: Path) -> list[dict]:
    if not record.exists():
        return []
    return [json.loads(line)["body"] for line in record.read_text().splitlines() if line]


def records(cli: Cli, work: Path, session: str) -> list[dict]:
    shown = cli("show", session, "--json", "--store", "st", cwd=work)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def keyed(cli_env: dict[str, str]) -> dict[str, str]:
    cli_env["OPENAI_API_KEY"] = "sk-from-env"
    return cli_env


def test_resume_and_compact_keep_the_model_endpoint_and_window_the_session_was_created_with(
    server: tuple[str, Path], work: Path, cli: Cli, keyed: dict[str, str]
) -> None:
    url, record = server
    first = cli("run", "--session", "a1", "--model", "local-llm", "--base-url", url,
                "--tools", "none", "--store", "st", "hello", cwd=work)  # fmt: skip
    assert first.returncode == 0, first.stderr
    # no model, endpoint or window typed again: the session's own are used
    again = cli("resume", "a1", "again", "--store", "st", cwd=work)
    assert again.returncode == 0, again.stderr
    third = cli("resume", "a1", "third", "--store", "st", cwd=work)
    assert third.returncode == 0, third.stderr
    rounds = [b for b in bodies(record) if b.get("messages", [{}])[-1].get("role") == "user"]
    assert len(rounds) == 3
    assert {b["model"] for b in bodies(record)} == {"local-llm"}
    compacted = cli("compact", "a1", "--store", "st", cwd=work)
    assert compacted.returncode == 0, compacted.stderr
    # the summary was asked of the session's endpoint (not the offline scripted model) ...
    assert len(bodies(record)) == 4 and bodies(record)[-1]["model"] == "local-llm"
    # ... and a summary no smaller than the short history it replaces is not written
    assert "nothing compacted" in compacted.stdout and "no smaller" in compacted.stdout
    log = records(cli, work, "a1")
    assert not [r for r in log if r["type"] == "compaction"]
    session = log[0]
    assert session["model"] == "local-llm" and session["context_window"] == 64000
    assert session["settings"]["base_url"] == url
    assert session["settings"]["window_source"] == "endpoint"
    assert not [r for r in log if r["type"] == "settings_changed"]


def test_a_typed_override_is_recorded_and_shown_once(
    server: tuple[str, Path], work: Path, cli: Cli, keyed: dict[str, str]
) -> None:
    url, _ = server
    first = cli("run", "--session", "a2", "--model", "local-llm", "--base-url", url,
                "--tools", "none", "--store", "st", "hello", cwd=work)  # fmt: skip
    assert first.returncode == 0, first.stderr
    changed = cli("resume", "a2", "more", "--context-window", "30000", "--keep-rounds", "5",
                  "--store", "st", cwd=work)  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    assert changed.stderr.count("settings changed") == 1
    assert "context_window 64000 -> 30000" in changed.stderr
    log = records(cli, work, "a2")
    [record] = [r for r in log if r["type"] == "settings_changed"]
    assert record["changes"]["context_window"] == [64000, 30000]
    assert record["changes"]["keep_rounds"] == [3, 5]
    shown = cli("show", "a2", "--store", "st", cwd=work)
    assert "settings changed (user): context_window 64000 -> 30000" in shown.stdout
    # the change holds for later continuations, which record nothing new
    later = cli("resume", "a2", "still", "--store", "st", cwd=work)
    assert later.returncode == 0 and "settings changed" not in later.stderr
    assert len([r for r in records(cli, work, "a2") if r["type"] == "settings_changed"]) == 1
    check = cli("check", "a2", "--store", "st", cwd=work)
    assert check.returncode == 0, check.stdout


def test_no_secret_reaches_the_log_and_the_key_is_read_at_each_start(
    server: tuple[str, Path], work: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    url, _ = server
    secret_url = url.replace("http://", "http://user:pw-secret@")
    first = cli("run", "--session", "a3", "--model", "local-llm", "--base-url", secret_url,
                "--api-key", "sk-typed-secret", "--tools", "none", "--store", "st", "hi",
                cwd=work)  # fmt: skip
    assert first.returncode == 0, first.stderr
    text = (work / "st" / "a3.jsonl").read_text()
    for secret in ("sk-typed-secret", "pw-secret"):
        assert secret not in text
    # the redacted endpoint cannot be used as it is: the full URL must be given again
    nourl = cli("resume", "a3", "again", "--store", "st", cwd=work)
    assert nourl.returncode == 2 and "--base-url" in nourl.stderr
    # no key now: the stored session cannot run without one, and says so
    nokey = cli("resume", "a3", "again", "--base-url", secret_url, "--store", "st", cwd=work)
    assert nokey.returncode == 2 and "API key" in nokey.stderr
    cli_env["OPENAI_API_KEY"] = "sk-env"
    given = cli("resume", "a3", "again", "--base-url", secret_url, "--store", "st", cwd=work)
    assert given.returncode == 0, given.stderr
    assert "settings changed" not in given.stderr  # the same endpoint, redacted alike


def test_a_window_too_small_is_refused_before_any_model_call(
    server: tuple[str, Path], work: Path, cli: Cli, keyed: dict[str, str]
) -> None:
    url, record = server
    small = cli("run", "--session", "a4", "--model", "local-llm", "--base-url", url,
                "--context-window", "1800", "--store", "st", "hello", cwd=work)  # fmt: skip
    assert small.returncode == 2
    line = small.stderr.strip().splitlines()[-1]
    assert "context window 1800 tokens is too small" in line
    assert "tool schemas" in line and "output reserve 450" in line and "--tools none" in line
    assert "Traceback" not in small.stderr
    assert bodies(record) == [] and not (work / "st" / "a4.jsonl").exists()


def test_an_unknown_window_is_one_warning_naming_the_assumption_and_the_fix(
    quiet_server: tuple[str, Path], work: Path, cli: Cli, keyed: dict[str, str]
) -> None:
    url, _ = quiet_server
    run = cli("run", "--session", "a5", "--model", "local-llm", "--base-url", url,
              "--tools", "none", "--store", "st", "hello", cwd=work)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("context_window_unknown") == 1
    assert "8000" in run.stderr and "--context-window" in run.stderr
    assert records(cli, work, "a5")[0]["settings"]["window_source"] == "assumed"
