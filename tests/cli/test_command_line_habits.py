"""What people type, as they type it: the shared options before the command, a mistyped command,
an argument error, a bad path, the key a refused request names, AGENTS.md."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from stowage.cli._agents import split_agents, system_with_agents
from stowage.cli._chat_prompt import choice_of, picker_lines
from stowage.cli._parsing import hoist_globals, unknown_command
from stowage.cli._sessions import SessionSummary
from stowage.testing import FakeOpenAIServer

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py


def one_error_line(done: subprocess.CompletedProcess[str], status: int = 2) -> str:
    assert done.returncode == status, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


# -- pure ----------------------------------------------------------------------------------


def test_the_shared_options_move_after_the_command_word() -> None:
    assert hoist_globals(["--store", "S", "list"]) == ["list", "--store", "S"]
    assert hoist_globals(["--store=S", "--log-level", "info", "show", "x"]) == [
        "show", "--store=S", "--log-level", "info", "x"
    ]  # fmt: skip
    assert hoist_globals(["--version"]) == ["--version"]
    assert hoist_globals(["run", "--store", "S", "hi"]) == ["run", "--store", "S", "hi"]


@given(st.lists(st.sampled_from(["list", "show", "x", "--json", "-", "--store", "S"])))
def test_hoisting_keeps_every_word(words: list[str]) -> None:
    assert sorted(hoist_globals(words)) == sorted(words)


def test_a_mistyped_command_names_the_nearest() -> None:
    commands = ("run", "resume", "list", "chat", "show")
    assert unknown_command(["lst"], commands) == "no command 'lst'; did you mean 'list'?"
    assert unknown_command(["resme", "x"], commands) == (
        "no command 'resme'; did you mean 'resume'?"
    )
    assert unknown_command(["list"], commands) is None
    assert unknown_command(["--version"], commands) is None
    assert "stowage --help" in (unknown_command(["zzzzzz"], commands) or "")


def test_agents_instructions_follow_the_system_message_under_their_heading(
    tmp_path: Path,
) -> None:
    agents = tmp_path / "rules.md"
    agents.write_text("Run the tests before you answer.\n")
    system = system_with_agents("You are careful.", str(agents))
    assert system is not None and system.startswith("You are careful.\n\n# AGENTS.md")
    base, block = split_agents(system)
    assert base == "You are careful." and block.strip().endswith("Run the tests before you answer.")
    assert system_with_agents("plain", "") == "plain"  # --no-agents
    assert split_agents("no instructions here") == ("no instructions here", "")


def test_the_picker_takes_a_number_or_an_id() -> None:
    rows = [
        SessionSummary(
            id=f"s{n}", model="m", created="2026-01-01T00:00:00", last_activity="2026-01-02T10:00",
            turns=n, tokens=None, usable=None, percent_of_usable=None, compactions=0,
            state="idle",
        )
        for n in (1, 2)
    ]  # fmt: skip
    assert choice_of("2", rows) == "s2" and choice_of("s1", rows) == "s1"
    assert choice_of("3", rows) is None and choice_of("other", rows) is None
    assert picker_lines(rows)[0].split()[:2] == ["1.", "s1"]


# -- the command ---------------------------------------------------------------------------


def test_the_store_option_before_the_command(tmp_path: Path, cli: Cli) -> None:
    done = cli("--store", "st", "run", "--session", "g1", "hi", "--tools", "none", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = cli("--store", "st", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["g1"]
    assert cli("--store=st", "show", "g1", cwd=tmp_path).returncode == 0


def test_a_typo_is_one_line_with_the_nearest_command(tmp_path: Path, cli: Cli) -> None:
    line = one_error_line(cli("lst", cwd=tmp_path))
    assert line == "stowage: error: no command 'lst'; did you mean 'list'?\n"


def test_an_argument_error_is_one_line_naming_the_help(tmp_path: Path, cli: Cli) -> None:
    line = one_error_line(cli("run", "--base-url", cwd=tmp_path))
    assert "expected one argument" in line and "'stowage run --help'" in line
    line = one_error_line(cli("run", "a", "b", "--store", "st", cwd=tmp_path))
    assert "unrecognized arguments: b" in line and "'stowage run --help'" in line


def test_a_bad_path_is_one_line_never_a_traceback(tmp_path: Path, cli: Cli) -> None:
    assert cli("run", "--session", "p1", "hi", "--tools", "none", "--store", "st",
               cwd=tmp_path).returncode == 0  # fmt: skip
    for args in (
        ("export", "p1", "-o", "missing-dir/x.md"),
        ("export", "p1", "-o", "."),
        ("run", "--file", "missing.txt"),
        ("run", "hi", "--agents", "missing.md"),
        ("resume", "p1", "--file", "."),
        ("show", "../etc"),
    ):
        line = one_error_line(cli(*args, "--store", "st", cwd=tmp_path))
        assert line.startswith("stowage: error: "), (args, line)
    assert "missing-dir/x.md" in one_error_line(
        cli("export", "p1", "-o", "missing-dir/x.md", "--store", "st", cwd=tmp_path)
    )


def test_resume_without_an_id_off_a_terminal_names_list(tmp_path: Path, cli: Cli) -> None:
    line = one_error_line(cli("resume", "--store", "st", cwd=tmp_path))
    assert "stowage list" in line


@pytest.mark.parametrize(
    ("wire", "named", "not_named"),
    [("anthropic", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"), ("chat", "OPENAI_API_KEY", "ANTHROPIC")],
)
def test_a_refused_key_names_the_variable_of_its_wire(
    wire: str, named: str, not_named: str, tmp_path: Path, cli: Cli
) -> None:
    async def refused() -> subprocess.CompletedProcess[str]:
        async with FakeOpenAIServer(api_key="sk-good") as server:
            args = ["run", "hi", "--store", "st", "--model", "fake-model", "--wire-api", wire,
                    "--base-url", server.base_url, "--api-key", "sk-wrong"]  # fmt: skip
            return await anyio.to_thread.run_sync(lambda: cli(*args, cwd=tmp_path))

    line = one_error_line(anyio.run(refused), status=3)
    assert named in line and not_named not in line and "401" in line


def test_agents_md_is_read_into_a_new_session_and_shown_by_context(
    tmp_path: Path, cli: Cli
) -> None:
    (tmp_path / "AGENTS.md").write_text("Always answer in French.\n" * 40)
    assert cli("run", "--session", "a1", "hi", "--tools", "none", "--store", "st",
               cwd=tmp_path).returncode == 0  # fmt: skip
    log = (tmp_path / "st" / "a1.jsonl").read_text()
    assert "# AGENTS.md: instructions from" in log and "Always answer in French." in log
    report = json.loads(cli("context", "a1", "--json", "--store", "st", cwd=tmp_path).stdout)
    assert list(report["parts"])[:2] == ["system", "AGENTS.md"]
    assert report["parts"]["AGENTS.md"]["tokens"] > 100
    text = cli("context", "a1", "--store", "st", cwd=tmp_path).stdout
    assert "AGENTS.md" in text
    # --no-agents: none read
    assert cli("run", "--session", "a2", "hi", "--tools", "none", "--no-agents", "--store",
               "st", cwd=tmp_path).returncode == 0  # fmt: skip
    assert "AGENTS.md" not in (tmp_path / "st" / "a2.jsonl").read_text()
