"""stdout is the committed answer: what the log holds as the turn's answer, once.

A model request the runtime abandons (a stream cut half way and retried, an answer refused as
larger than ``max_answer_chars``) never reaches a pipe or a file; on a terminal it is marked
on stderr with one line and the committed answer follows whole. The view is checked alone
with hypothesis; the commands in real processes against the fake server over loopback HTTP,
with its fault API, and on real pseudo-terminals.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from stowage.cli._chat_view import StatusLine, TurnView
from stowage.core import (
    AssistantDelta,
    AssistantMessage,
    AttemptAbandoned,
    ModelRequest,
    ModelResponse,
    RoundStarted,
    Usage,
)
from stowage.facade import TurnResult
from stowage.testing import FakeOpenAIServer, ScriptedBrain

STOWAGE = [sys.executable, "-m", "stowage.cli"]
ASK = "Please say hello in a long sentence"
ANSWER = f"Answer to: {ASK}. No tools were needed."
MARK = "[attempt abandoned: stream cut; retrying]"
#: escape sequences a terminal shows nothing of (cursor moves, colours, modes)
_INVISIBLE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\x1b\][^\x07]*\x07|[\x08]")


# -- the view alone ----------------------------------------------------------------------------


class _TerminalText(io.StringIO):
    """Text a terminal would show: the view streams only to a terminal."""

    def isatty(self) -> bool:
        return True


def _quiet_status() -> StatusLine:
    return StatusLine(console=Console(file=io.StringIO(), force_terminal=False))


def _chunks(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


def _play(view: TurnView, abandoned: list[str], answer: str, cuts: list[int]) -> None:
    """A turn of one round: attempts abandoned after streaming their text, then the one that
    commits ``answer``."""
    view.begin()
    view.on_event(RoundStarted(session_id="s", round=1, items=1, tokens=1, estimated=True))
    for number, text in enumerate(abandoned, start=1):
        for piece in _chunks(text, cuts):
            view.on_event(AssistantDelta(session_id="s", round=1, text=piece))
        view.on_event(
            AttemptAbandoned(
                session_id="s", round=1, attempt=number, error="IncompleteResponse",
                reason="stream cut", streamed_chars=len(text), next="retry",
            )
        )  # fmt: skip
    for piece in _chunks(answer, cuts):
        view.on_event(AssistantDelta(session_id="s", round=1, text=piece))


TEXTS = st.text(alphabet="abc xyz.", max_size=40)
CUTS = st.lists(st.integers(min_value=0, max_value=40), max_size=6)


@settings(max_examples=300, deadline=None)
@given(abandoned=st.lists(TEXTS, max_size=3), answer=TEXTS, cuts=CUTS)
def test_a_pipe_gets_only_the_committed_answer_once(
    abandoned: list[str], answer: str, cuts: list[int]
) -> None:
    out, err = io.StringIO(), io.StringIO()
    view = TurnView(out=out, err=err, status=_quiet_status(), history=tuple, answer_cap=50)
    _play(view, abandoned, answer, cuts)
    assert out.getvalue() == ""  # nothing before the answer is committed
    view.finish(TurnResult(text=answer, rounds=1, stopped="answered"))
    assert out.getvalue() == (answer + "\n" if answer else "")
    assert err.getvalue() == ""  # nothing of the abandoned attempts reached stdout to mark


@settings(max_examples=300, deadline=None)
@given(
    abandoned=st.lists(TEXTS, max_size=3),
    answer=TEXTS,
    cuts=CUTS,
    cap=st.integers(min_value=1, max_value=60),
)
def test_a_terminal_marks_each_abandoned_attempt_and_the_answer_stands_whole_after_it(
    abandoned: list[str], answer: str, cuts: list[int], cap: int
) -> None:
    answer = answer[:cap]  # an answer past the cap is refused: it never commits
    out, err = _TerminalText(), io.StringIO()
    view = TurnView(out=out, err=err, status=_quiet_status(), history=tuple, answer_cap=cap)
    _play(view, abandoned, answer, cuts)
    streamed = out.getvalue()
    assert len(streamed.replace("\n", "")) <= cap  # never more than the cap streamed
    view.finish(TurnResult(text=answer, rounds=1, stopped="answered"))
    shown = out.getvalue()
    # one line on stderr for each attempt that had put text on the terminal
    budget, marked = cap, 0
    for text in abandoned:
        marked += bool(text[:budget])
        budget -= len(text[:budget])
    assert err.getvalue() == f"{MARK}\n" * marked
    if answer:
        assert shown.endswith(answer + "\n")
        before = shown[: -len(answer) - 1]
        assert before == "" or before.endswith("\n"), shown  # on a row of its own
    else:
        assert shown == "" or shown.endswith("\n")


def test_a_status_while_the_answer_streams_leaves_its_row_whole() -> None:
    """A status (a retry's wait, a slow stream) arriving mid-answer on a shared screen is not
    drawn: drawing it would end the answer's row and split the answer in two."""
    screen = _TerminalText()
    status = StatusLine(console=Console(file=io.StringIO(), force_terminal=True))
    view = TurnView(out=screen, err=screen, status=status, history=tuple)
    view.begin()
    view.on_event(RoundStarted(session_id="s", round=1, items=1, tokens=1, estimated=True))
    view.on_event(AssistantDelta(session_id="s", round=1, text=ANSWER[:16]))
    view.show_status("waiting on the model")
    assert not status.shown
    view.on_event(AssistantDelta(session_id="s", round=1, text=ANSWER[16:]))
    view.finish(TurnResult(text=ANSWER, rounds=1, stopped="answered"))
    assert screen.getvalue() == ANSWER + "\n"


# -- the commands, against the fake server -----------------------------------------------------


@pytest.fixture
def fake_server(cli_env: dict[str, str]) -> Iterator[str]:
    """``stowage fake-server`` in its own process; its base URL."""
    proc = subprocess.Popen(
        [*STOWAGE, "fake-server"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env=cli_env,
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


def _cut_next_round(base_url: str) -> None:
    """One ``cut_stream`` fault through the server's fault API: the next round's stream
    ends half way."""
    root = base_url.removesuffix("/v1")
    request = urllib.request.Request(
        f"{root}/_fake/faults",
        data=json.dumps({"fault": "cut_stream", "when": "round", "times": 1}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answered:
        assert json.loads(answered.read())["pending"] == 1


def _faults(base_url: str) -> dict[str, int]:
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/_fake/stats", timeout=10) as answered:
        return dict(json.loads(answered.read())["faults"])


def _run_args(base_url: str, *extra: str) -> list[str]:
    return [*STOWAGE, "run", "--session", "a1", "--tools", "none", "--store", "st",
            "--model", "fake-model", "--base-url", base_url, "--api-key", "sk-test",
            "--context-window", "64000", *extra, ASK]  # fmt: skip


def _logged_answers(cwd: Path, env: dict[str, str], session: str = "a1") -> list[str]:
    """The answers ``stowage show --json`` has in the log: its assistant items."""
    shown = subprocess.run(
        [*STOWAGE, "show", session, "--json", "--store", "st"], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    items = [json.loads(line).get("item") or {} for line in shown.stdout.splitlines()]
    return [item["text"] for item in items if item.get("type") == "assistant"]


@pytest.mark.slow
def test_a_piped_stdout_holds_the_answer_the_log_holds_once_after_a_cut_stream(
    tmp_path: Path, cli_env: dict[str, str], fake_server: str
) -> None:
    _cut_next_round(fake_server)
    done = subprocess.run(
        _run_args(fake_server), cwd=tmp_path, env=cli_env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _faults(fake_server) == {"cut_stream": 1}  # the first attempt was cut
    assert _logged_answers(tmp_path, cli_env) == [ANSWER]
    assert done.stdout == ANSWER + "\n"
    assert "attempt abandoned" not in done.stderr  # nothing of it reached stdout


@pytest.mark.slow
def test_resume_and_the_chat_pipe_the_committed_answer_once_too(
    tmp_path: Path, cli_env: dict[str, str], fake_server: str
) -> None:
    first = subprocess.run(
        _run_args(fake_server), cwd=tmp_path, env=cli_env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    endpoint = ["--store", "st", "--model", "fake-model", "--base-url", fake_server,
                "--api-key", "sk-test", "--context-window", "64000"]  # fmt: skip
    _cut_next_round(fake_server)
    resumed = subprocess.run(
        [*STOWAGE, "resume", "a1", "now say goodbye", *endpoint], cwd=tmp_path, env=cli_env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    _cut_next_round(fake_server)
    chatted = subprocess.run(
        [*STOWAGE, "chat", "--session", "a1", *endpoint], cwd=tmp_path, env=cli_env,
        input="and once more\n", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert chatted.returncode == 0, chatted.stderr
    assert _faults(fake_server) == {"cut_stream": 2}
    answers = _logged_answers(tmp_path, cli_env)
    assert len(answers) == 3
    assert resumed.stdout == answers[1] + "\n"
    assert chatted.stdout == answers[2] + "\n"


@pytest.mark.slow
def test_json_says_which_attempt_was_abandoned_and_why(
    tmp_path: Path, cli_env: dict[str, str], fake_server: str
) -> None:
    _cut_next_round(fake_server)
    done = subprocess.run(
        _run_args(fake_server, "--json"), cwd=tmp_path, env=cli_env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["type"] for line in lines] == [
        "turn_started", "attempt_abandoned", "round", "answer", "turn_ended",
    ]  # fmt: skip
    abandoned = lines[1]
    assert abandoned["v"] == 1 and abandoned["session"] == "a1"
    assert abandoned["round"] == 1 and abandoned["attempt"] == 1
    assert abandoned["error"] == "IncompleteResponse" and abandoned["reason"] == "stream cut"
    assert abandoned["next"] == "retry" and 0 < abandoned["streamed_chars"] < len(ANSWER)
    assert [line["text"] for line in lines if line["type"] == "answer"] == [ANSWER]
    assert _logged_answers(tmp_path, cli_env) == [ANSWER]


def _read_ptys(proc: subprocess.Popen[bytes], masters: dict[str, int]) -> dict[str, str]:
    """Everything written to each pseudo-terminal until the command closed them all."""
    seen = {name: b"" for name in masters}
    open_ = dict(masters)
    deadline = time.monotonic() + 120
    while open_:
        left = deadline - time.monotonic()
        assert left > 0, seen
        ready, _, _ = select.select(list(open_.values()), [], [], left)
        for name, fd in list(open_.items()):
            if fd not in ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the command closed the terminal
                chunk = b""
            if chunk:
                seen[name] += chunk
            else:
                del open_[name]
    assert proc.wait(timeout=60) == 0, seen
    for fd in masters.values():
        os.close(fd)
    return {
        name: _INVISIBLE.sub("", text.decode()).replace("\r\n", "\n").replace("\r", "")
        for name, text in seen.items()
    }


def on_two_terminals(args: list[str], cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """``args`` with stdout on one pseudo-terminal and stderr on another (both terminals, as
    in a shell, told apart); what each showed."""
    out_master, out_slave = pty.openpty()
    err_master, err_slave = pty.openpty()
    proc = subprocess.Popen(
        args, cwd=cwd, env={**env, "TERM": "xterm-256color"}, stdin=subprocess.DEVNULL,
        stdout=out_slave, stderr=err_slave,
    )  # fmt: skip
    os.close(out_slave)
    os.close(err_slave)
    return _read_ptys(proc, {"out": out_master, "err": err_master})


@pytest.mark.slow
def test_a_terminal_marks_the_cut_attempt_on_stderr_and_shows_the_answer_whole_after_it(
    tmp_path: Path, cli_env: dict[str, str], fake_server: str
) -> None:
    _cut_next_round(fake_server)
    shown = on_two_terminals(_run_args(fake_server), tmp_path, cli_env)
    assert _faults(fake_server) == {"cut_stream": 1}
    assert _logged_answers(tmp_path, cli_env) == [ANSWER]
    assert shown["err"].count(MARK) == 1, shown["err"]
    # the cut attempt's text, then the committed answer whole on a row of its own
    cut, rest = shown["out"].split("\n", 1)
    assert cut and ANSWER.startswith(cut.rstrip()) and cut.rstrip() != ANSWER, shown["out"]
    assert rest == ANSWER + "\n", shown["out"]


# -- an answer refused as too large ------------------------------------------------------------

CAP = 5_000
HUGE = 200_000


class _HugeFirst:
    """A brain whose first ``huge`` answers are ``HUGE`` characters, reported as 10 output
    tokens (a runaway model behind a broken endpoint); then the scripted model's."""

    def __init__(self, huge: int) -> None:
        self.huge = huge
        self.scripted = ScriptedBrain()

    def __call__(self, request: ModelRequest) -> ModelResponse:
        if self.huge <= 0:
            return self.scripted(request)
        self.huge -= 1
        return ModelResponse(
            items=(AssistantMessage(text="w" * HUGE),),
            usage=Usage(input_tokens=50, output_tokens=10, total_tokens=60),
            model=request.model,
        )


def _capped_args(base_url: str) -> list[str]:
    return _run_args(base_url, "--max-answer-chars", str(CAP))


@pytest.mark.slow
async def test_a_refused_huge_answer_never_reaches_a_piped_stdout(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with anyio.fail_after(120):
        async with FakeOpenAIServer(brain=_HugeFirst(1)) as server:
            done = await anyio.run_process(
                _capped_args(server.base_url), cwd=tmp_path, env=cli_env, check=False
            )
    assert done.returncode == 0, done.stderr
    answers = await anyio.to_thread.run_sync(_logged_answers, tmp_path, cli_env)
    assert answers == [ANSWER]
    assert done.stdout.decode() == ANSWER + "\n"  # under the cap: nothing of the refused one


@pytest.mark.slow
async def test_answers_that_stay_too_large_leave_a_piped_stdout_empty(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with anyio.fail_after(120):
        async with FakeOpenAIServer(brain=_HugeFirst(10)) as server:
            done = await anyio.run_process(
                _capped_args(server.base_url), cwd=tmp_path, env=cli_env, check=False
            )
    assert done.returncode != 0
    assert b"max_answer_chars" in done.stderr
    assert done.stdout == b""


@pytest.mark.slow
async def test_a_terminal_streams_no_more_than_the_cap_of_a_refused_huge_answer(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with anyio.fail_after(120):
        async with FakeOpenAIServer(brain=_HugeFirst(2)) as server:
            shown = await anyio.to_thread.run_sync(
                on_two_terminals, _capped_args(server.base_url), tmp_path, cli_env
            )
    out = shown["out"]
    # the committed answer on a row of its own; before it, what streamed of the refused ones
    # (nothing when a slow reader got the first chunks together, already past the cap)
    assert out == ANSWER + "\n" or out.endswith("\n" + ANSWER + "\n"), out[-300:]
    refused = out.removesuffix(ANSWER + "\n").replace("\n", "")
    assert set(refused) <= {"w"}  # the refused answers' text: at most the cap for both
    assert len(refused) <= CAP, len(refused)
    assert "[attempt abandoned: answer past max_answer_chars; retrying]" in shown["err"]
