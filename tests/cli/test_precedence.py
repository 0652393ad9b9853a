"""One precedence for every setting: command line > environment > profile > file, each pair
checked with a setting all four layers can give (``context_window``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py

FILE, PROFILE, ENV, CLI = 5000, 6000, 7000, 8000


@pytest.fixture
def project(tmp_path: Path, cli_env: dict[str, str]) -> Path:
    """A project directory and a user config directory of the test's own, no STOWAGE_*."""
    (tmp_path / "xdg" / "stowage").mkdir(parents=True)
    cli_env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    for name in list(cli_env):
        if name.startswith("STOWAGE_"):
            del cli_env[name]
    project = tmp_path / "project"
    project.mkdir()
    return project


def window(cli: Cli, project: Path, session: str, *options: str) -> int:
    run = cli("run", "--session", session, "--tools", "none", "--store", "st", *options, "hi",
              cwd=project)  # fmt: skip
    assert run.returncode == 0, run.stderr
    shown = cli("show", session, "--json", "--store", "st", cwd=project)
    record = json.loads(shown.stdout.splitlines()[0])
    return int(record["context_window"] or record["settings"]["context_window"])


def configure(project: Path, *, file: bool, profile: bool) -> None:
    lines = []
    if file:
        lines.append(f"context_window = {FILE}")
    if profile:
        lines = ['profile = "p"', *lines, "[models.p]", 'model = "scripted"',
                 f"context_window = {PROFILE}"]  # fmt: skip
    (project / "stowage.toml").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        (("file", "profile"), PROFILE),
        (("file", "env"), ENV),
        (("profile", "env"), ENV),
        (("file", "cli"), CLI),
        (("profile", "cli"), CLI),
        (("env", "cli"), CLI),
        (("file", "profile", "env", "cli"), CLI),
        (("file", "profile", "env"), ENV),
    ],
    ids=lambda v: "+".join(v) if isinstance(v, tuple) else str(v),
)
def test_the_higher_layer_wins(
    project: Path, cli: Cli, cli_env: dict[str, str], layers: tuple[str, ...], expected: int
) -> None:
    configure(project, file="file" in layers, profile="profile" in layers)
    if "env" in layers:
        cli_env["STOWAGE_CONTEXT_WINDOW"] = str(ENV)
    options = ("--context-window", str(CLI)) if "cli" in layers else ()
    assert window(cli, project, "w", *options) == expected


def test_a_profile_typed_on_the_command_line_is_still_under_the_environment(
    project: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    """``--profile p`` selects the profile; its fields stay at the profile's layer."""
    (project / "stowage.toml").write_text(
        f'[models.p]\nmodel = "scripted"\ncontext_window = {PROFILE}\n'
    )
    assert window(cli, project, "t1", "--profile", "p") == PROFILE
    cli_env["STOWAGE_CONTEXT_WINDOW"] = str(ENV)
    assert window(cli, project, "t2", "--profile", "p") == ENV
    assert window(cli, project, "t3", "--profile", "p", "--context-window", str(CLI)) == CLI
