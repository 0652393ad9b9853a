"""What stays on a terminal's screen after ``run``, ``resume`` and ``chat`` end: the whole answer.

Each command runs on a real pseudo-terminal (stdin, stdout and stderr on it, as in a shell)
whose output is fed to a screen model (pyte, a VT100 emulator): what a person sees after the
command exits, with every cursor move and erase the status line made applied. The answer is
long enough to wrap, so a status line drawn over its last row, or erased with it, shows.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyte
import pytest

pytestmark = pytest.mark.slow

STOWAGE = [sys.executable, "-m", "stowage.cli"]
COLUMNS, ROWS = 60, 40
#: a message whose scripted answer ("Answer to: ...") wraps over several rows of 60 columns
LONG = "summarise " + " ".join(f"point{n}" for n in range(30))


def _controlling_tty() -> None:  # runs in the child, before exec
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Screen:
    """A command on a pty of ``COLUMNS`` x ``ROWS``, its output drawn on a pyte screen; the
    screen answers the terminal queries a program sends (the cursor position)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        env = {**env, "XDG_STATE_HOME": str(cwd / "state"), "TERM": "xterm-256color"}
        self.proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
            preexec_fn=_controlling_tty,
        )  # fmt: skip
        os.close(slave)
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.screen.write_process_input = self._answer  # type: ignore[method-assign]
        self.stream = pyte.ByteStream(self.screen)
        self.closed = False
        self.prompts = 0  # how many times a prompt started reading keys (bracketed paste on)

    def _answer(self, data: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.master, data.encode())

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every process on the terminal has closed it
            chunk = b""
        if not chunk:
            self.closed = True
            return
        self.prompts += chunk.count(b"\x1b[?2004h")
        self.stream.feed(chunk)

    def wait_for(self, shown: Callable[[str], bool], what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not shown(self.text()):
            left = deadline - time.monotonic()
            assert left > 0 and not self.closed, f"no {what} on:\n{self.text()}"
            self._read(left)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def finish(self, timeout: float = 120) -> int:
        """Read until the command has exited and closed the terminal; its exit status."""
        deadline = time.monotonic() + timeout
        while not self.closed:
            left = deadline - time.monotonic()
            assert left > 0, f"still running:\n{self.text()}"
            self._read(left)
        os.close(self.master)
        return self.proc.wait(timeout=30)

    def text(self) -> str:
        return "\n".join(row.rstrip() for row in self.screen.display)

    def flat(self) -> str:
        """Every row end to end: a wrapped line reads as it was written."""
        return "".join(self.screen.display)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        with contextlib.suppress(OSError):
            os.close(self.master)


@contextlib.contextmanager
def on_screen(args: list[str], cwd: Path, env: dict[str, str]) -> Iterator[Screen]:
    screen = Screen(args, cwd, env)
    try:
        yield screen
    finally:
        screen.kill()


def assert_answer_whole(screen: Screen, answer: str) -> None:
    assert answer in screen.flat(), f"{answer!r} is not whole on:\n{screen.text()}"
    # the status line was taken down, and with it nothing else
    assert "calling the model" not in screen.text() and "round written" not in screen.text()


def logged_answer(store: Path) -> str:
    """The text of the newest answer the store's logs hold (what stdout was given)."""
    newest = ("", "")
    for log in store.glob("*.jsonl"):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            item = record.get("item") or {}
            if item.get("type") == "assistant" and record["ts"] >= newest[0]:
                newest = (record["ts"], item["text"])
    assert newest[1], f"no answer in {store}"
    return newest[1]


def test_run_leaves_the_whole_wrapped_answer_on_the_screen(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with on_screen(
        [*STOWAGE, "run", LONG, "--tools", "none", "--store", "st"], tmp_path, cli_env
    ) as screen:
        assert screen.finish() == 0, screen.text()
        assert_answer_whole(screen, logged_answer(tmp_path / "st"))
        assert "session: " in screen.text()


def test_run_with_tools_leaves_the_answer_after_its_tool_lines(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Rounds of tool calls draw the status line many times; the answer and one line per
    call stay, in order."""
    (tmp_path / "README.md").write_text("# the project\nmore\n")
    with on_screen([*STOWAGE, "run", LONG, "--store", "st"], tmp_path, cli_env) as screen:
        assert screen.finish() == 0, screen.text()
        text = screen.text()
        assert "-> read_file(" in text and text.index("-> read_file(") < text.index("Answer to:")
        assert logged_answer(tmp_path / "st") in screen.flat(), screen.text()
        assert "round written" not in text and "calling the model" not in text


def test_run_through_a_pipe_to_cat_leaves_the_whole_answer(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """stdout goes to ``cat``, which prints it on the same screen when it gets to it."""
    command = " ".join([*STOWAGE, "run", f"'{LONG}'", "--tools", "none", "--store", "st"])
    with on_screen(["/bin/sh", "-c", f"{command} | cat"], tmp_path, cli_env) as screen:
        assert screen.finish() == 0, screen.text()
        assert_answer_whole(screen, logged_answer(tmp_path / "st"))


def test_resume_leaves_the_whole_answer_on_the_screen(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    first = subprocess.run(
        [*STOWAGE, "run", "--session", "r1", "hello", "--tools", "none", "--store", "st"],
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    with on_screen([*STOWAGE, "resume", "r1", LONG, "--store", "st"], tmp_path, cli_env) as screen:
        assert screen.finish() == 0, screen.text()
        assert_answer_whole(screen, logged_answer(tmp_path / "st"))


def test_chat_leaves_each_answer_and_its_footer_on_the_screen(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with on_screen([*STOWAGE, "chat", "--tools", "none", "--store", "st"], tmp_path, cli_env) as (
        screen
    ):
        screen.wait_for(lambda text: ">" in text.splitlines(), "prompt")
        screen.type(LONG + "\r")
        screen.wait_for(lambda text: "compactions" in text, "footer")
        # the next prompt reads keys (the terminal is raw again): a Ctrl-D typed while it was
        # still cooked would be taken by the terminal as an end of input nobody reads
        screen.wait_for(lambda _: screen.prompts >= 2, "the next prompt")
        screen.type("\x04")  # Ctrl-D on the empty prompt leaves
        assert screen.finish() == 0, screen.text()
        assert_answer_whole(screen, logged_answer(tmp_path / "st"))
        flat = " ".join(screen.flat().split())  # the footer may wrap too
        assert re.search(r"─ \d+ tokens · \d+% of [\d,]+ usable · .* 0 compactions", flat), flat


@pytest.fixture
def server(cli_env: dict[str, str]) -> Iterator[str]:
    proc = subprocess.Popen(
        [*STOWAGE, "fake-server", "--tool-rounds", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("listening "), line
        yield line.removeprefix("listening ")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def test_run_over_http_leaves_the_whole_answer(
    tmp_path: Path, cli_env: dict[str, str], server: str
) -> None:
    """A real endpoint streams the answer in pieces, after a round of tool calls."""
    args = [*STOWAGE, "run", LONG, "--store", "st", "--model", "fake-model", "--base-url",
            server, "--api-key", "sk-test", "--context-window", "64000"]  # fmt: skip
    with on_screen(args, tmp_path, cli_env) as screen:
        assert screen.finish() == 0, screen.text()
        assert_answer_whole(screen, logged_answer(tmp_path / "st"))
