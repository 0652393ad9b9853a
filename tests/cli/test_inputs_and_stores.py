"""Inputs and stores as a user gives them: stdin, a file, an empty message, conflicting
options, a store that does not exist."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py


def test_a_message_from_stdin_or_a_file_and_an_empty_one_refused(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    piped = subprocess.run(
        [sys.executable, "-m", "stowage.cli", "run", "--store", "st", "--tools", "none", "-"],
        input="a message from stdin", cwd=tmp_path, env=cli_env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert "Answer to: a message from stdin" in piped.stdout
    store = (tmp_path / "st").resolve()
    assert f"store: {store}" in piped.stderr.splitlines()
    (tmp_path / "note.txt").write_text("a message from a file\n")
    filed = cli("run", "--store", "st", "--tools", "none", "--file", "note.txt", cwd=tmp_path)
    assert filed.returncode == 0 and "Answer to: a message from a file" in filed.stdout
    sessions = sorted(store.glob("*.jsonl"))
    for args in (("run", "--store", "st", "  "), ("run", "--store", "st", "--file", "nope.txt"),
                 ("run", "--store", "st", "hi", "--file", "note.txt")):  # fmt: skip
        refused = cli(*args, cwd=tmp_path)
        assert refused.returncode == 2, (args, refused.stderr)
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert sorted(store.glob("*.jsonl")) == sessions  # nothing was created


def test_the_offline_model_with_an_endpoint_is_refused(tmp_path: Path, cli: Cli) -> None:
    done = cli("run", "--store", "st", "--model", "scripted", "--base-url", "http://x/v1", "hi",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "takes no --base-url" in done.stderr
    assert not (tmp_path / "st").exists() or not list((tmp_path / "st").glob("*.jsonl"))


def test_reading_a_store_that_does_not_exist_names_it_and_creates_nothing(
    tmp_path: Path, cli: Cli
) -> None:
    for command in (("list",), ("show", "x"), ("check", "x"), ("context", "x")):
        done = cli(*command, "--store", "no/such/dir", cwd=tmp_path)
        assert done.returncode == 2, (command, done.stderr)
        assert str(tmp_path / "no" / "such" / "dir") in done.stderr
    missing = cli("list", "--store", "sqlite:///nope.db", cwd=tmp_path)
    assert missing.returncode == 2 and "nope.db: no such file" in missing.stderr
    assert not (tmp_path / "no").exists() and not (tmp_path / "nope.db").exists()
