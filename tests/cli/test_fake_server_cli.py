"""``stowage fake-server``: the onboarding endpoint the README starts, a real process answering
the openai SDK and the ``stowage`` command, stopped by Ctrl-C or SIGTERM with status 0."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]


def _start(env: dict[str, str], *options: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage.cli", "fake-server", "--port", "0", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("listening http://127.0.0.1:") and line.endswith("/v1"), line
    return proc, line.removeprefix("listening ")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_the_command_serves_the_openai_sdk_and_stops_cleanly(
    stop: signal.Signals, cli_env: dict[str, str]
) -> None:
    proc, url = _start(cli_env, "--latency", "0.01", "--context-window", "32000")
    try:
        client = openai.OpenAI(base_url=url, api_key="sk-anything", max_retries=0, timeout=10)
        answer = client.chat.completions.create(
            model="any-model", messages=[{"role": "user", "content": "hello there"}]
        )
        # a request without tools reads to the scripted brain as a summary request
        assert answer.choices[0].message.content and answer.choices[0].finish_reason == "stop"
        client.close()
        # the window a session would discover there
        model = httpx.get(f"{url}/models/any-model", timeout=10).json()
        assert model["max_model_len"] == 32000
    finally:
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_a_session_runs_against_it_as_the_readme_says(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    proc, url = _start(cli_env)
    try:
        cli_env["OPENAI_API_KEY"] = "sk-anything"
        done = cli("run", "--model", "any-model", "--base-url", url, "--tools", "none",
                   "--store", "st", "hello", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "Answer to: hello" in done.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


def test_a_bad_port_is_one_line_and_exit_2(tmp_path: Path, cli: Cli) -> None:
    done = cli("fake-server", "--port", "70000", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--port 70000" in done.stderr
