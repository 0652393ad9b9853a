"""A command's options may come anywhere among its positionals, as people type them."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py


def test_options_before_between_and_after_the_positionals(tmp_path: Path, cli: Cli) -> None:
    first = cli("run", "--session", "o1", "hello", "--tools", "none", "--store", "st", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    for args in (
        ("resume", "o1", "--store", "st", "go on"),  # the README's own order
        ("resume", "--store", "st", "o1", "and again"),
        ("resume", "o1", "one more", "--store", "st"),
    ):
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        assert "unrecognized arguments" not in done.stderr
    shown = cli("show", "--store", "st", "o1", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert all(text in shown.stdout for text in ("go on", "and again", "one more"))
    # a positional too many is still refused, naming it
    extra = cli("resume", "o1", "--store", "st", "a", "b", cwd=tmp_path)
    assert extra.returncode == 2 and "unrecognized arguments: b" in extra.stderr


def test_every_session_command_takes_its_options_anywhere(tmp_path: Path, cli: Cli) -> None:
    """The store option before, between and after the positionals of each command."""
    assert cli("run", "--session", "o2", "hi", "--store", "st", cwd=tmp_path).returncode == 0
    commands = {
        "show": ("o2",),
        "check": ("o2",),
        "context": ("o2",),
        "export": ("o2",),
        "milestone": ("o2", "setup"),
        "compact": ("o2",),
        "protect": ("o2",),
    }
    for command, positionals in commands.items():
        first, *rest = positionals
        orders = [
            (command, "--store", "st", *positionals),
            (command, first, "--store", "st", *rest),
            (command, *positionals, "--store", "st"),
        ]
        for args in orders:
            done = cli(*args, cwd=tmp_path)
            assert done.returncode == 0, (args, done.stderr)
    listed = cli("list", "--json", "--store", "st", cwd=tmp_path)
    assert listed.returncode == 0 and '"o2"' in listed.stdout
