"""Console fixtures: a store with a compacted session, and ``stowage console`` running on it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from stowage.core import (
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    RoundCommittedRecord,
    SessionRecord,
    TurnRecord,
    Usage,
    UserMessage,
)
from stowage.storage import JsonlStore

HOSTILE = "<script>window.__pwned = 1; document.title = 'pwned'</script><b>bold?</b>"


def run_cli(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``stowage ARGS`` in a subprocess, as a user runs it; the scripted model is the default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return subprocess.run(
        [sys.executable, "-m", "stowage.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_hostile_session(root: Path, session_id: str = "hostile") -> None:
    """A log whose tool output and arguments hold markup that must be shown, never run."""

    async def write() -> None:
        store = JsonlStore(root)
        try:
            await store.create(
                session_id,
                [
                    SessionRecord(seq=1, model="scripted", context_window=6000),
                    ItemRecord(seq=2, item=UserMessage(text=f"please echo {HOSTILE}")),
                    TurnRecord(seq=3, turn=1, phase="started"),
                    ItemRecord(
                        seq=4,
                        round=1,
                        item=FunctionCall(
                            call_id="c1",
                            name="echo",
                            arguments='{"x": "<img src=x onerror=alert(1)>"}',
                        ),
                    ),
                    ItemRecord(
                        seq=5, round=1, item=FunctionCallOutput(call_id="c1", output=HOSTILE)
                    ),
                    RoundCommittedRecord(
                        seq=6,
                        round=1,
                        usage=Usage(input_tokens=300, output_tokens=20, total_tokens=320),
                        first_seq=5,
                        last_seq=6,
                    ),
                ],
            )
        finally:
            await store.aclose()

    anyio.run(write)


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL store holding one offline demo session that compacted and microcompacted."""
    work = tmp_path_factory.mktemp("console")
    done = run_cli("demo", "--store", "store", cwd=work)
    # the demo's own verdict (how many compactions it expected) is not this suite's concern;
    # the tests check that the log they read compacted
    assert "inspect it: stowage show" in done.stdout, done.stderr
    return work / "store"


def only_session(store: Path) -> str:
    """The id of the demo session in ``store``."""
    (log,) = [p for p in store.glob("s-*.jsonl")]
    return log.stem


@pytest.fixture
def console_server() -> Iterator[Callable[[str, Path], str]]:
    """Start ``stowage console --port 0`` on a store; returns its base URL. Stopped after."""
    started: list[subprocess.Popen[str]] = []

    def start(store: str, cwd: Path) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stowage.cli", "console", "--store", store, "--port", "0"],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, (
            f"no URL in {line!r}; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
        )  # type: ignore[union-attr]
        return f"http://127.0.0.1:{found.group(1)}"

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
