"""``stowage chat`` on a real pseudo-terminal against the fake server in its own process:
Ctrl-C stops the turn in flight (``[interrupted]`` on its own line, the session usable, the log
sound), Ctrl-C twice at the prompt leaves with status 0, Ctrl-D leaves with status 0."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

STOWAGE = [sys.executable, "-m", "stowage.cli"]


@pytest.fixture
def server(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage.testing.fake_server", "--port", "0", "--tool-rounds", "0"],
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


def post(base_url: str, path: str, body: dict[str, object]) -> None:
    root = base_url.removesuffix("/v1")
    request = urllib.request.Request(
        root + path, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def requests_seen(base_url: str) -> int:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/_fake/stats", timeout=10) as r:
        return int(json.loads(r.read())["requests"])


def _controlling_tty() -> None:  # runs in the child, before exec
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """The chat on a pty (stdin, stdout), its stderr on a pipe (no status line there)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        # the chat's input history goes to the test's folder, never the user's
        env = {**env, "XDG_STATE_HOME": str(cwd / "state")}
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [*STOWAGE, *args], cwd=cwd, env=env, stdin=slave, stdout=slave,
            stderr=subprocess.PIPE, preexec_fn=_controlling_tty,
        )  # fmt: skip
        os.close(slave)
        self.seen = b""

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def read_until(self, marker: bytes, timeout: float = 60) -> bytes:
        return self._read_until(lambda seen: marker in seen, repr(marker), timeout)

    def read_until_after(self, anchor: bytes, marker: bytes, timeout: float = 60) -> bytes:
        """Read until ``marker`` shows after the last ``anchor`` seen."""
        return self._read_until(
            lambda seen: marker in seen[seen.rindex(anchor) :],
            f"{marker!r} after {anchor!r}",
            timeout,
        )

    def _read_until(self, done: Callable[[bytes], bool], what: str, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while not done(self.seen):
            left = deadline - time.monotonic()
            assert left > 0, f"no {what} in {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:
                    chunk = b""
                assert chunk, f"terminal closed before {what}: {self.seen!r}"
                self.seen += chunk
        return self.seen

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            self.proc.stderr.close()
        with contextlib.suppress(OSError):
            os.close(self.master)

    def wait(self) -> tuple[int, str]:
        rc = self.proc.wait(timeout=60)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        return rc, err


#: what a terminal shows nothing of: control sequences (the prompt's cursor, paste mode, ...)
_INVISIBLE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")


def lines(raw: bytes) -> list[str]:
    # ECHOCTL is off: the terminal echoes Ctrl-C as the bare control byte, which shows nothing
    shown = _INVISIBLE.sub("", raw.decode())
    return shown.replace("\r", "").replace("\x03", "").split("\n")


def test_ctrl_c_interrupts_the_turn_in_flight_and_the_session_goes_on(
    server: str, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    term = Terminal(
        ["chat", "--store", "st", "--model", "fake-model", "--base-url", server, "--api-key",
         "sk-test", "--tools", "none", "--context-window", "100000"],
        tmp_path, cli_env,
    )  # fmt: skip
    try:
        post(server, "/_fake/faults", {"latency": 60})
        time.sleep(1)  # the prompt is on stderr (a pipe): give the chat a moment to start
        term.send(b"hello\r")
        deadline = time.monotonic() + 60
        while requests_seen(server) == 0:  # the turn is in flight at the server
            assert time.monotonic() < deadline
            time.sleep(0.1)
        term.send(b"\x03")
        term.read_until(b"[interrupted]")
        post(server, "/_fake/faults", {"latency": 0})
        term.send(b"and again\r")
        term.read_until(b"and again")  # the echo of the input
        term.read_until(b"Answer to: and again")
        # the answer's line ends when the turn is over (its round written): only then Ctrl-C
        term.read_until_after(b"Answer to: and again", b"\n", timeout=30)
        term.send(b"\x03")
        time.sleep(0.5)
        term.send(b"\x03")
        rc, err = term.wait()
    finally:
        term.close()
    assert rc == 0, err
    shown = lines(term.seen)
    assert "[interrupted]" in shown, shown  # on its own line, never glued to anything
    assert not any("^C" in line for line in shown)
    assert "Traceback" not in err
    session_id = next(w for w in err.split() if w.startswith("s-"))
    log = (tmp_path / "st" / f"{session_id.rstrip(';')}.jsonl").read_text()
    assert "Answer to: and again" in log
    assert '"phase":"interrupted"' in log  # the turn is logged as interrupted
    checked = subprocess.run(
        [*STOWAGE, "check", session_id.rstrip(";"), "--store", "st"],
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_ctrl_d_on_an_empty_prompt_leaves_with_status_0(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    term = Terminal(["chat", "--store", "st", "--tools", "none"], tmp_path, cli_env)
    try:
        term.send(b"hi\r")
        term.read_until(b"Answer to: hi")
        time.sleep(0.5)
        term.send(b"\x04")
        rc, err = term.wait()
    finally:
        term.close()
    assert rc == 0 and "Traceback" not in err, err


def test_chat_reads_piped_input_to_its_end(tmp_path: Path, cli_env: dict[str, str]) -> None:
    done = subprocess.run(
        [*STOWAGE, "chat", "--store", "st", "--tools", "none"], input="one\ntwo\n",
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Answer to: one" in done.stdout and "Answer to: two" in done.stdout
    assert "\x1b[" not in done.stderr  # no status line drawn when stderr is not a terminal


def test_chat_with_an_id_that_has_no_log_starts_that_session(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Off a terminal ``chat NAME`` starts NAME (on a terminal it asks first); ``--session
    NAME`` starts or continues it, never asking."""
    done = subprocess.run(
        [*STOWAGE, "chat", "fresh", "--store", "st", "--tools", "none"], input="hello\n",
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Answer to: hello" in done.stdout and (tmp_path / "st" / "fresh.jsonl").is_file()
    again = subprocess.run(
        [*STOWAGE, "chat", "--session", "fresh", "--store", "st"], input="more\n",
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    log = (tmp_path / "st" / "fresh.jsonl").read_text()
    assert '"hello"' in log and '"more"' in log  # one session, continued
    missing = subprocess.run(
        [*STOWAGE, "resume", "nope", "--store", "st"], stdin=subprocess.DEVNULL,
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "stowage list" in missing.stderr
