"""``stowage chat`` as a person uses it: on a real pseudo-terminal (stdin, stdout and stderr),
with the offline scripted model, driven key by key; and the pure parts it is built from (the
slash command table, the tool lines, where the history lives)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pty
import re
import select
import stat
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from stowage.cli._chat_commands import (
    COMMANDS,
    Command,
    Message,
    Unknown,
    help_lines,
    matching,
    parse_line,
)
from stowage.cli._chat_prompt import history_file
from stowage.cli._chat_view import StatusLine, TurnView, call_text, first_line, tool_line
from stowage.core import FunctionCall, FunctionCallOutput, RoundStarted, ToolStarted
from stowage.facade import TurnResult

STOWAGE = [sys.executable, "-m", "stowage.cli"]
APPROVAL_APP = Path(__file__).parents[1] / "facade" / "approval_app.py"

#: escape sequences a terminal shows nothing of (cursor moves, colours, modes)
_INVISIBLE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\x1b\][^\x07]*\x07|[\x08\r]")
#: prompt_toolkit turns bracketed paste on when its prompt starts reading keys
_READING = b"\x1b[?2004h"
#: the cursor position request prompt_toolkit sends; a terminal answers it
_WHERE_IS_THE_CURSOR = b"\x1b[6n"


# -- the pure parts ----------------------------------------------------------------------------


def test_a_slash_line_is_a_command_an_unknown_one_is_never_a_message() -> None:
    assert parse_line("hello /compact") == Message("hello /compact")
    assert parse_line("/compact the API layer") == Command("/compact", "the API layer")
    assert parse_line("/HELP") == Command("/help", "")
    assert parse_line("/compat") == Unknown("/compat")
    assert parse_line("//etc/hosts is odd") == Message("/etc/hosts is odd")
    assert parse_line("/protect\nkeep the tests green") == Command(
        "/protect", "keep the tests green"
    )


def test_completion_offers_the_commands_that_start_with_what_was_typed() -> None:
    assert [c.name for c in matching("/c")] == ["/context", "/compact"]
    assert [c.name for c in matching("/")] == [c.name for c in COMMANDS]
    assert matching("/compact now") == () and matching("hello") == ()
    assert all(any(line.strip().startswith(c.usage) for line in help_lines()) for c in COMMANDS)


def test_a_tool_line_names_the_tool_short_arguments_and_the_first_line_of_its_result() -> None:
    call = FunctionCall(call_id="c1", name="read_file", arguments='{"path": "README.md"}')
    output = FunctionCallOutput(call_id="c1", output="\n# stowage\nmore\nand more\n")
    assert tool_line("read_file", call, output, is_error=False, output_chars=30) == (
        '  -> read_file(path="README.md"): # stowage (+2 lines)'
    )
    failed = FunctionCallOutput(call_id="c1", output="error: no such file", is_error=True)
    assert tool_line("read_file", call, failed, is_error=True, output_chars=19).startswith(
        '  !! read_file(path="README.md"): error: no such file'
    )
    # an output no longer in history (compacted) is shown by its size
    assert tool_line("read_file", call, None, is_error=False, output_chars=4096).endswith(
        ": (4,096 chars)"
    )
    assert call_text("grep", '{"pattern": "' + "x" * 200 + '"}').endswith("…)")
    assert call_text("odd", "not json") == "odd(not json)"
    assert first_line("   \n\n") == "(empty)"


def _screen(raw: str) -> list[str]:
    """The lines a terminal shows after ``raw``: text, CR, LF, cursor up and erase line (what
    rich's live display uses); other escape sequences change nothing that shows here."""
    lines, row, col = [""], 0, 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|.", raw, flags=re.S):
        if token == "\n":
            row += 1
            col = 0
            lines += [""] * (row + 1 - len(lines))
        elif token == "\r":
            col = 0
        elif token.startswith("\x1b["):
            if token.endswith("A"):
                row = max(0, row - int(token[2:-1] or 1))
            elif token == "\x1b[2K":
                lines[row] = ""
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + 1 :]
            col += 1
    return [line.rstrip() for line in lines if line.strip()]


def test_the_status_line_is_taken_down_before_answer_text_and_the_stop_line() -> None:
    terminal = io.StringIO()
    console = Console(file=terminal, force_terminal=True, width=80)
    view = TurnView(out=terminal, err=terminal, status=StatusLine(console=console), history=tuple)
    view.begin()
    view.on_event(RoundStarted(session_id="s", round=1, items=1, tokens=100, estimated=True))
    assert "calling the model (round 1, ~100 tokens)" in terminal.getvalue()  # it was drawn
    view.write("partial answer")
    view.on_event(ToolStarted(session_id="s", round=1, call_id="c1", name="read_file"))
    assert "running read_file" in terminal.getvalue()
    view.finish(TurnResult(text="", rounds=1, stopped="max_rounds"))
    assert _screen(terminal.getvalue()) == [
        "partial answer",
        "[turn stopped: max_rounds after 1 rounds]",
    ]


def test_the_history_file_follows_xdg_state_home() -> None:
    assert history_file({"XDG_STATE_HOME": "/var/state"}) == Path("/var/state/stowage/chat_history")
    assert history_file({}) == Path.home() / ".local/state/stowage/chat_history"
    # a relative XDG path is to be ignored, as the XDG spec says
    assert history_file({"XDG_STATE_HOME": "rel"}) == history_file({})


def test_only_the_chat_imports_prompt_toolkit() -> None:
    probe = (
        "import sys, stowage.cli._main, stowage.cli._chat; print('prompt_toolkit' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False", done.stderr


# -- on a terminal -----------------------------------------------------------------------------


def _controlling_tty() -> None:  # runs in the child, before exec
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A chat on a pty of 100 x 30, all three streams on it. It answers the cursor position
    requests as a terminal does; ``expect`` reads what is shown (escape sequences removed)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.proc = subprocess.Popen(
            [*STOWAGE, "chat", *args], cwd=cwd, env=env, stdin=slave, stdout=slave,
            stderr=slave, preexec_fn=_controlling_tty,
        )  # fmt: skip
        os.close(slave)
        self.raw = b""
        self.seen_to = 0  # ``expect`` looks after the end of its last match
        self.read_to = 0  # ``reading`` looks after this point of ``raw``
        self.last = ""  # the marker ``expect_either`` found last

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the child closed the terminal
            chunk = b""
        assert chunk, f"terminal closed: {self.shown()!r}"
        for _ in range(chunk.count(_WHERE_IS_THE_CURSOR)):
            os.write(self.master, b"\x1b[1;1R")
        self.raw += chunk

    def shown(self) -> str:
        return _INVISIBLE.sub("", self.raw.decode(errors="replace"))

    def expect(self, marker: str, timeout: float = 10) -> str:
        """Wait until ``marker`` shows after the last match; returns what showed before it."""
        deadline = time.monotonic() + timeout
        while (at := self.shown().find(marker, self.seen_to)) < 0:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} in {self.shown()[self.seen_to :]!r}"
            self._read(left)
        before = self.shown()[self.seen_to : at]
        self.seen_to = at + len(marker)
        return before

    def expect_either(self, *markers: str, timeout: float = 10) -> str:
        """Wait until one of ``markers`` shows (``last`` says which); returns what came before."""
        deadline = time.monotonic() + timeout
        while True:
            found = [(at, m) for m in markers if (at := self.shown().find(m, self.seen_to)) >= 0]
            if found:
                at, self.last = min(found)
                before = self.shown()[self.seen_to : at]
                self.seen_to = at + len(self.last)
                return before
            left = deadline - time.monotonic()
            assert left > 0, f"none of {markers!r} in {self.shown()[self.seen_to :]!r}"
            self._read(left)

    def reading(self, timeout: float = 20) -> None:
        """Wait until the prompt reads keys again (after what ``reading`` saw last); the first
        time, that includes the chat's start, which a loaded machine slows."""
        deadline = time.monotonic() + timeout
        while (at := self.raw.find(_READING, self.read_to)) < 0:
            left = deadline - time.monotonic()
            assert left > 0, f"the prompt never came back: {self.shown()[self.seen_to :]!r}"
            self._read(left)
        self.read_to = at + len(_READING)

    def type(self, keys: str) -> None:
        """Wait for the prompt to read keys again, then type ``keys``."""
        self.reading()
        self.press(keys)

    def press(self, keys: str) -> None:
        """Type ``keys`` now, at the prompt already reading."""
        os.write(self.master, keys.encode())

    def wait(self, timeout: float = 10) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"still running: {self.shown()!r}"
            with contextlib.suppress(AssertionError):
                self._read(0.1)
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.close(self.master)


@pytest.fixture
def env(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, str]:
    (tmp_path / "README.md").write_text("hello from the readme\n")
    return {**cli_env, "XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "xterm"}


@contextlib.contextmanager
def chat(tmp_path: Path, env: dict[str, str], *args: str) -> Iterator[Terminal]:
    term = Terminal(["--store", "st", "--model", "scripted", *args], tmp_path, env)
    try:
        yield term
    finally:
        term.close()


def session_log(tmp_path: Path, term: Terminal) -> str:
    found = re.search(r"session (s-[0-9a-f]+);", term.shown())
    assert found, term.shown()
    return (tmp_path / "st" / f"{found.group(1)}.jsonl").read_text()


def user_texts(log: str) -> list[str]:
    records = [json.loads(line) for line in log.splitlines()]
    return [
        r["item"]["text"]
        for r in records
        if r.get("type") == "item" and r["item"].get("type") == "user"
    ]


@pytest.mark.slow
def test_a_line_is_answered_and_its_tool_calls_stay_on_screen_one_line_each(
    tmp_path: Path, env: dict[str, str]
) -> None:
    with chat(tmp_path, env) as term:
        term.type("look around\r")
        shown = term.expect("Answer to: look around")
        assert '-> read_file(path="README.md"): hello from the readme' in shown
        assert '-> list_dir(path="."): ' in shown
        term.type("\x04")
        assert term.wait() == 0
    assert user_texts(session_log(tmp_path, term)) == ["look around"]


@pytest.mark.slow
def test_up_arrow_recalls_the_last_line_and_the_history_outlives_the_chat(
    tmp_path: Path, env: dict[str, str]
) -> None:
    with chat(tmp_path, env, "--tools", "none") as first:
        first.type("remember the milk\r")
        first.expect("Answer to: remember the milk")
        first.type("\x04")  # Ctrl-D on an empty prompt leaves, with status 0
        assert first.wait() == 0
    history = tmp_path / "state" / "stowage" / "chat_history"
    assert "remember the milk" in history.read_text()
    assert stat.S_IMODE(history.stat().st_mode) == 0o600  # the user's words, for the user
    with chat(tmp_path, env, "--tools", "none") as second:
        second.type("\x1b[A")  # Up: the line typed in the chat before
        second.press("\r")
        second.expect("Answer to: remember the milk")
        second.type("\x1b[A\x1b[A\r")  # Up twice: the same line (it is once in the history)
        second.expect("Answer to: remember the milk")
        second.type("\x04")
        assert second.wait() == 0
    log = session_log(tmp_path, second)
    assert user_texts(log) == ["remember the milk", "remember the milk"]
    assert "\\u001b" not in log and "[A" not in log  # the arrow key never reached the model


@pytest.mark.slow
def test_help_lists_the_commands_and_an_unknown_one_never_reaches_the_model(
    tmp_path: Path, env: dict[str, str]
) -> None:
    with chat(tmp_path, env, "--tools", "none") as term:
        term.type("/help\r")
        shown = term.expect("A line starting with //")
        for command in COMMANDS:
            assert command.usage in shown, command
        term.type("/foo bar\r")
        term.expect("unknown command /foo: /help lists the commands")
        term.type("/mod")
        term.expect("the model and endpoint this session uses")  # the completion menu
        term.press("\t\r")  # Tab takes the completion, Enter runs it
        term.expect("model scripted  endpoint offline")
        term.type("/quit\r")
        assert term.wait() == 0
    log = session_log(tmp_path, term)
    assert "/foo" not in log and user_texts(log) == []


@pytest.mark.slow
def test_context_prints_the_figures_and_compact_compacts_the_session(
    tmp_path: Path, env: dict[str, str], cli_env: dict[str, str]
) -> None:
    with chat(tmp_path, env) as term:
        term.type("look around\r")
        term.expect("Answer to: look around")
        term.type("/context\r")
        shown = term.expect("next: ")
        assert re.search(r"in use \d+ of [\d,]+ tokens", shown), shown
        assert "tool outputs" in shown and "tool schemas" in shown
        term.type("/compact the readme\r")
        shown = term.expect("manual compaction requested]")
        assert re.search(r"\[compacted \(full\) at round \d+: tokens \d+ -> \d+", shown), shown
        term.type("/protect never touch the readme\r")
        term.expect("[c1] never touch the readme")
        term.type("/export notes.md\r")
        term.expect("wrote notes.md")
        term.type("\x04")
        assert term.wait() == 0
    log = session_log(tmp_path, term)
    records = [json.loads(line) for line in log.splitlines()]
    assert [r["type"] for r in records].count("compaction") == 1
    assert "the readme" in json.dumps([r for r in records if r["type"] == "compaction"])
    assert (tmp_path / "notes.md").read_text().startswith("# Session s-")


@pytest.mark.slow
def test_an_approval_stop_answered_y_runs_the_call_and_the_turn_goes_on(
    tmp_path: Path, env: dict[str, str]
) -> None:
    marker = tmp_path / "guard-ran"
    path = os.pathsep.join(filter(None, [str(APPROVAL_APP.parent), env.get("PYTHONPATH")]))
    env = {**env, "PYTHONPATH": path, "GUARD_MARKER": str(marker)}
    with chat(tmp_path, env, "--tools-from", "approval_app:guarded_only") as term:
        term.type("tidy the notes\r")
        shown = term.expect("approve? [y/n]")
        assert "[turn stopped: pending_approval after 1 rounds]" in shown
        call_id = re.search(r"call (\S+) awaits approval: guarded\(", shown)
        assert call_id, shown
        assert not marker.exists()
        term.type("y\r")
        # the scripted model may call the guarded tool again in its next round: yes to each
        again = "awaits approval: guarded("
        shown = term.expect_either("Answer to: tidy the notes", again)
        assert "-> guarded(): guarded ran" in shown
        while term.last == again:
            term.type("y\r")
            term.expect_either("Answer to: tidy the notes", again)
        term.type("\x04")
        assert term.wait() == 0
    assert marker.exists()  # the approved call ran
    log = session_log(tmp_path, term)
    assert f'"call_id":"{call_id.group(1)}","decision":"approved"' in log.replace(" ", "")


@pytest.mark.slow
def test_a_continued_session_that_waits_for_approval_asks_at_once_and_n_denies(
    tmp_path: Path, env: dict[str, str]
) -> None:
    marker = tmp_path / "guard-ran"
    path = os.pathsep.join(filter(None, [str(APPROVAL_APP.parent), env.get("PYTHONPATH")]))
    env = {**env, "PYTHONPATH": path, "GUARD_MARKER": str(marker)}
    tools = ("--tools-from", "approval_app:guarded_only")
    started = subprocess.run(
        [*STOWAGE, "run", "tidy the notes", "--session", "s1", "--store", "st", *tools],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "turn stopped: pending_approval" in started.stderr, started.stderr
    with chat(tmp_path, env, "s1", *tools) as term:
        shown = term.expect("approve? [y/n]")  # before any prompt for a message
        assert "awaits approval: guarded(" in shown
        term.type("n\r")
        again = "awaits approval: guarded("
        shown = term.expect_either("Answer to: tidy the notes", again)
        assert "!! guarded(): denied" in shown
        while term.last == again:
            term.type("n\r")
            term.expect_either("Answer to: tidy the notes", again)
        term.type("\x04")
        assert term.wait() == 0
    assert not marker.exists()  # a denied call never runs
    assert '"decision":"denied"' in (tmp_path / "st" / "s1.jsonl").read_text().replace(" ", "")


@pytest.mark.slow
def test_ctrl_c_clears_the_line_and_esc_enter_or_a_paste_makes_more_lines(
    tmp_path: Path, env: dict[str, str]
) -> None:
    with chat(tmp_path, env, "--tools", "none") as term:
        term.type("thrown away")
        term.expect("thrown away")
        term.press("\x03two\x1b\rlines\r")
        term.expect("Answer to: two")
        # a paste (bracketed, as terminals send it) keeps its lines and is not sent by them
        term.type("\x1b[200~pasted\nblock\x1b[201~")
        term.press(" ends\r")
        term.expect("Answer to: pasted")
        term.type("\x03")  # on an empty prompt: how to leave
        term.expect("(Ctrl-C again or Ctrl-D to leave)")
        term.type("\x03")
        assert term.wait() == 0
    assert user_texts(session_log(tmp_path, term)) == ["two\nlines", "pasted\nblock ends"]


@pytest.mark.slow
def test_piped_input_gets_the_slash_commands_without_the_terminal_ui(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = subprocess.run(
        [*STOWAGE, "chat", "--store", "st", "--tools", "none"],
        input="/nope\nhi\n/model\n/context\n", cwd=tmp_path, env=cli_env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "unknown command /nope" in done.stderr
    assert "Answer to: hi" in done.stdout and "model scripted" in done.stdout
    assert "in use " in done.stdout
    assert "\x1b[" not in done.stdout + done.stderr  # no prompt UI, no status line


@pytest.mark.slow
def test_piped_input_answers_an_approval_with_the_approve_command(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    marker = tmp_path / "guard-ran"
    path = os.pathsep.join(filter(None, [str(APPROVAL_APP.parent), cli_env.get("PYTHONPATH")]))
    env = {**cli_env, "PYTHONPATH": path, "GUARD_MARKER": str(marker)}
    done = subprocess.run(
        [*STOWAGE, "chat", "--store", "st", "--tools-from", "approval_app:guarded_only"],
        input="tidy the notes\n/approve\n/approve\n", cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # no question is asked of a script: it is told how to answer
    assert "answer with: /approve " in done.stderr and "approve? [y/n]" not in done.stderr
    assert "Answer to: tidy the notes" in done.stdout, done.stderr
    assert marker.exists()
