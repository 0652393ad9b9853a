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
    AssistantMessage,
    CompactionRecord,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    ItemRecord,
    MilestoneRecord,
    ProtectedRecord,
    ProtectedState,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    TurnRecord,
    Usage,
    UserMessage,
)
from stowage.storage import JsonlStore

HOSTILE = "<script>window.__pwned = 1; document.title = 'pwned'</script><b>bold?</b>"

#: markup that runs script, leaves for another origin or restyles the page, were it markup;
#: each sets ``window.__xss`` or calls ``alert`` when it runs
PAYLOADS = (
    "<script>window.__xss = 'script'</script>",
    "<img src=x onerror=\"window.__xss = 'img'\">",
    "<svg onload=\"window.__xss = 'svg'\"></svg>",
    "\"><script>window.__xss = 'attribute'</script>",
    "'><img src=x onerror=alert(1)>",
    "</title></textarea></pre><script>alert('closing')</script>",
    "<a href=\"javascript:window.__xss='link'\">click</a>",
    '<img src="http://evil.example/leak.png">',
    "<style>body { background: url(http://evil.example/css) }</style>",
    '<iframe src="http://evil.example/frame"></iframe>',
    '<meta http-equiv="refresh" content="0; url=http://evil.example/">',
)
PAYLOAD = " ".join(PAYLOADS)


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


def payload_records(rounds: int = 14) -> list[Record]:
    """A failed session whose every text a person, a model or a tool wrote is ``PAYLOAD``:
    model name, user and assistant messages, call arguments, tool outputs, a compaction's
    summary and reason, a protected entry, a milestone and the error that failed it; a round
    above the hard mark, so the chart's note quotes the compaction after it; ``rounds``
    rounds, so the timeline has an older page."""
    constraint = {"op": "add_constraint", "id": "c1", "text": PAYLOAD}
    records: list[Record] = [
        SessionRecord(seq=1, model=f"scripted {PAYLOADS[0]}", context_window=6000),
        ProtectedRecord(seq=2, ops=(constraint,)),
        ItemRecord(seq=3, item=UserMessage(text=f"please echo {PAYLOAD}")),
        TurnRecord(seq=4, turn=1, phase="started"),
    ]
    seq = 4
    for round_ in range(1, rounds + 1):
        call = FunctionCall(call_id=f"c{round_}", name="echo", arguments=PAYLOAD)
        tokens = 7000 if round_ == 3 else 400 + 10 * round_
        records += [
            ItemRecord(seq=seq + 1, round=round_, item=call),
            ItemRecord(seq=seq + 2, round=round_, item=FunctionCallOutput(call_id=call.call_id, output=PAYLOAD)),
            RoundCommittedRecord(
                seq=seq + 3, round=round_, first_seq=seq + 1, last_seq=seq + 3,
                usage=Usage(input_tokens=tokens, output_tokens=20, total_tokens=tokens + 20),
            ),
        ]  # fmt: skip
        seq += 3
        if round_ == 3:
            seq += 1
            records.append(
                CompactionRecord(
                    seq=seq, summary=PAYLOAD, covers_through=seq - 1, reason=PAYLOAD,
                    retained=(HistoryEntry(seq=3, item=UserMessage(text=f"please echo {PAYLOAD}")),),
                    tokens_before=7020, tokens_after=300, removed=9, round=3, turn=1,
                    turn_open=True, protected=ProtectedState().apply(constraint).snapshot(),
                )
            )  # fmt: skip
    records += [
        MilestoneRecord(seq=seq + 1, name=PAYLOADS[0], note=PAYLOAD),
        ItemRecord(seq=seq + 2, item=AssistantMessage(text=PAYLOAD)),
        ErrorRecord(seq=seq + 3, kind="model", message=PAYLOAD),
    ]
    return records


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
