"""Configuration of the real ``stowage`` command: each step of the precedence, profiles,
and a stored session's identity over the configuration (subprocesses, real files)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def home(tmp_path: Path, cli_env: dict[str, str]) -> Path:
    """A user config dir of the test's own (``XDG_CONFIG_HOME``), and a project dir."""
    config = tmp_path / "xdg"
    (config / "stowage").mkdir(parents=True)
    cli_env["XDG_CONFIG_HOME"] = str(config)
    for name in list(cli_env):
        if name.startswith("STOWAGE_"):
            del cli_env[name]
    project = tmp_path / "project"
    project.mkdir()
    return tmp_path


def session_settings(cli: Cli, project: Path, session: str) -> dict:
    shown = cli("show", session, "--json", "--store", "st", cwd=project)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout.splitlines()[0])


def keep_rounds(cli: Cli, project: Path, session: str, *options: str) -> int:
    run = cli("run", "--session", session, "--tools", "none", "--store", "st", *options, "hi",
              cwd=project)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return int(session_settings(cli, project, session)["settings"]["keep_rounds"])


def test_each_step_of_the_precedence(home: Path, cli: Cli, cli_env: dict[str, str]) -> None:
    project = home / "project"
    assert keep_rounds(cli, project, "d0") == 3  # built-in default
    (home / "xdg" / "stowage" / "stowage.toml").write_text("keep_rounds = 4\n")
    assert keep_rounds(cli, project, "d1") == 4  # user file over the default
    (project / "stowage.toml").write_text("keep_rounds = 5\n")
    assert keep_rounds(cli, project, "d2") == 5  # project file over the user file
    cli_env["STOWAGE_KEEP_ROUNDS"] = "6"
    assert keep_rounds(cli, project, "d3") == 6  # STOWAGE_* over the files
    assert keep_rounds(cli, project, "d4", "--keep-rounds", "7") == 7  # option over all


def test_the_user_file_is_found_under_home_without_xdg(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    cli_env.pop("XDG_CONFIG_HOME", None)
    cli_env["HOME"] = str(tmp_path)
    (tmp_path / ".config" / "stowage").mkdir(parents=True)
    (tmp_path / ".config" / "stowage" / "stowage.toml").write_text("keep_rounds = 8\n")
    project = tmp_path / "p"
    project.mkdir()
    assert keep_rounds(cli, project, "h1") == 8


def test_an_unknown_key_is_one_line_naming_the_file_and_key(home: Path, cli: Cli) -> None:
    project = home / "project"
    (project / "stowage.toml").write_text('modle = "gpt-4.1"\n')
    run = cli("run", "--store", "st", "hi", cwd=project)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr
    assert str(project / "stowage.toml") in run.stderr and "'modle'" in run.stderr
    (project / "stowage.toml").write_text("[models.local]\ncontext_windw = 5\n")
    nested = cli("run", "--store", "st", "hi", cwd=project)
    assert nested.returncode == 2 and "models.local.context_windw" in nested.stderr


def test_a_stored_session_keeps_its_identity_when_the_configuration_changes(
    home: Path, cli: Cli
) -> None:
    project = home / "project"
    (project / "stowage.toml").write_text("keep_rounds = 5\n")
    assert keep_rounds(cli, project, "k1") == 5
    (project / "stowage.toml").write_text("keep_rounds = 9\n")
    again = cli("resume", "k1", "more", "--store", "st", cwd=project)
    assert again.returncode == 0, again.stderr
    shown = cli("show", "k1", "--json", "--store", "st", cwd=project)
    assert '"settings_changed"' not in shown.stdout


@pytest.fixture
def server(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    record = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage.testing.fake_server", "--port", "0",
         "--record", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        yield line.removeprefix("listening "), record
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def test_a_profile_selected_by_model_name_gives_endpoint_window_and_key(
    home: Path, cli: Cli, server: tuple[str, Path], cli_env: dict[str, str]
) -> None:
    url, record = server
    project = home / "project"
    (home / "xdg" / "stowage" / "stowage.toml").write_text(
        f'[models.local]\nmodel = "org/local-llm"\nbase_url = "{url}"\n'
        'context_window = 50000\nwire_api = "responses"\napi_key = "sk-user-file"\n'
    )
    run = cli("run", "--session", "p1", "--model", "local", "--tools", "none", "--store", "st",
              "hi", cwd=project)  # fmt: skip
    assert run.returncode == 0, run.stderr
    bodies = [json.loads(line)["body"] for line in record.read_text().splitlines()]
    assert [b["model"] for b in bodies] == ["org/local-llm"] and "input" in bodies[0]
    first = session_settings(cli, project, "p1")
    assert first["model"] == "org/local-llm" and first["context_window"] == 50000
    assert first["settings"]["profile"] == "local" and first["settings"]["wire_api"] == "responses"
    assert "sk-user-file" not in (project / "st" / "p1.jsonl").read_text()
    # resumed with no option: the profile's endpoint and key are found again
    again = cli("resume", "p1", "more", "--store", "st", cwd=project)
    assert again.returncode == 0, again.stderr
    # --profile selects it too
    by_profile = cli("run", "--session", "p2", "--profile", "local", "--tools", "none",
                     "--store", "st", "hi", cwd=project)  # fmt: skip
    assert by_profile.returncode == 0, by_profile.stderr
    unknown = cli("run", "--profile", "nope", "--store", "st", "hi", cwd=project)
    assert unknown.returncode == 2 and "models.nope" in unknown.stderr


def test_the_store_comes_from_the_project_file_when_no_option_or_variable_names_one(
    home: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    project = home / "project"
    (project / "stowage.toml").write_text(f'store = "{home / "kept"}"\n')
    run = cli("run", "--session", "f1", "--tools", "none", "hi", cwd=project)
    assert run.returncode == 0, run.stderr
    assert (home / "kept" / "f1.jsonl").exists() and not (project / ".stowage").exists()
    listed = cli("list", cwd=project)
    assert listed.returncode == 0 and "f1" in listed.stdout
    cli_env["STOWAGE_STORE"] = str(home / "from-env")
    assert "f1" not in cli("list", cwd=project).stdout  # the variable is over the file
