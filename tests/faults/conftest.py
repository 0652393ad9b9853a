"""An endpoint that fails on purpose, and a session on the real Runtime talking to it.

- ``fault_run``: ``async with fault_run(tmp_path, wire_api, stream, **settings) as run:`` starts
  the fake OpenAI server (its brain: ``read`` once per turn, then answer) and a ``Runtime``
  on it through the real openai client, with small timeouts. ``run.server`` takes faults,
  ``await run.turn(text)`` sends one turn and returns its result or the error it raised,
  ``run.written`` is every record made durable (as objects: fields the codec may not store
  yet are there too), ``run.events`` every event. On exit the log is read back and checked
  (``check_log``: sound, and resume rebuilds what whole-log replay gives) into ``run.log``.
- ``wire``: parametrizes a test over the four ways to talk to an endpoint, (wire_api,
  stream); ``secret`` is the password in the base URL no message may show.
- ``reader_brain``, ``read_tool``: what the session runs, for tests that vary them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import pydantic
import pytest
from stowage import (
    AssistantMessage,
    Event,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    ModelRequest,
    ModelResponse,
    Record,
    Runtime,
    Settings,
    ToolRegistry,
    TurnResult,
    UserMessage,
)
from stowage.model import is_summary_request, scripted_usage
from stowage.policy import check_log
from stowage.storage import JsonlStore
from stowage.testing import FakeOpenAIServer

WireApi = Literal["chat", "responses"]
WIRES: list[tuple[WireApi, bool]] = [
    ("chat", True),
    ("chat", False),
    ("responses", True),
    ("responses", False),
]
SESSION = "faulty"
#: credentials in the base URL: no error message may ever show them
SECRET = "s3cret-pw"


class ReadArgs(pydantic.BaseModel):
    path: str


def read_tool(size: int = 200) -> FunctionTool[ReadArgs]:
    """``read(path)``: ``size`` characters of made-up file contents."""

    async def read(args: ReadArgs) -> str:
        return (f"contents of {args.path}: " + "lorem ipsum " * (1 + size // 12))[:size]

    return FunctionTool(name="read", description="Read a file.", args_model=ReadArgs, fn=read)


def reader_brain(path: str = "a.txt") -> Any:
    """Each turn: ``read(path)`` until its output is in the projection after the newest user
    message, then answer ``done: <start of the output>``. Summaries are short."""

    def brain(request: ModelRequest) -> ModelResponse:
        if is_summary_request(request):
            items: tuple[AssistantMessage | FunctionCall, ...] = (
                AssistantMessage(text="Summary: the user asked for a file to be read."),
            )
        else:
            users = [i for i, item in enumerate(request.input) if isinstance(item, UserMessage)]
            turn = request.input[users[-1] + 1 :] if users else request.input
            outputs = [i for i in turn if isinstance(i, FunctionCallOutput)]
            if outputs:
                items = (AssistantMessage(text="done: " + outputs[-1].output[:24]),)
            else:
                calls = sum(isinstance(i, FunctionCall) for i in request.input)
                items = (
                    FunctionCall(
                        call_id=f"call_{len(users)}_{calls}",
                        name="read",
                        arguments=json.dumps({"path": path}),
                    ),
                )
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


class RecordingStore(JsonlStore):
    """A JSONL store that also keeps every record it made durable, as written."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, durability="none")
        self.written: list[Record] = []

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> dict[str, Exception | None]:
        outcomes = await super().append_batches(batches)
        for session_id, records in batches:
            if outcomes.get(session_id) is None:
                self.written.extend(records)
        return outcomes


@dataclass(eq=False)
class FaultRun:
    """A live session on the fake server; see the module docstring."""

    server: FakeOpenAIServer
    runtime: Runtime
    store: RecordingStore
    events: list[Event] = field(default_factory=list)
    log: list[Record] = field(default_factory=list)

    @property
    def written(self) -> list[Record]:
        return self.store.written

    @property
    def last_seq(self) -> int:
        """The seq of the newest durable record (1, the session record, before any append)."""
        return self.written[-1].seq if self.written else 1

    async def turn(self, text: str = "read a.txt") -> TurnResult | Exception:
        """One turn; its result, or the exception it raised."""
        try:
            return await self.runtime.send(SESSION, text)
        except Exception as exc:
            return exc

    def since(self, seq: int) -> list[Record]:
        """Records made durable after ``seq``."""
        return [r for r in self.written if r.seq > seq]


@asynccontextmanager
async def _fault_run(
    tmp_path: Path,
    wire_api: WireApi,
    stream: bool,
    *,
    brain: Any = None,
    tools: ToolRegistry | None = None,
    **changes: Any,
) -> AsyncIterator[FaultRun]:
    async with FakeOpenAIServer(brain=brain or reader_brain()) as server:
        base_url = server.base_url.replace("http://", f"http://user:{SECRET}@")
        options: dict[str, Any] = {
            "model": "fault-model",
            "base_url": base_url,
            "api_key": "k",
            "wire_api": wire_api,
            "stream": stream,
            "store": tmp_path,
            "tools": "none",
            "context_window": 32_000,
            "max_retries": 1,
            "stream_idle_timeout": 0.5,
            "request_deadline": 2.0,
            "max_retry_wait": 0.5,
            "durability": "none",
            **changes,
        }
        store = RecordingStore(tmp_path)
        runtime = Runtime(
            Settings(**options), store=store, tools=tools or ToolRegistry([read_tool()])
        )
        run = FaultRun(server=server, runtime=runtime, store=store)
        async with runtime:
            runtime.subscribe(run.events.append)
            await runtime.create(SESSION, system="You read files.")
            yield run
    reader = JsonlStore(tmp_path)
    try:
        full = (await reader.read(SESSION)).records
        tail = (await reader.read_tail(SESSION)).records
    finally:
        await reader.aclose()
    report = check_log(SESSION, full, tail)
    assert report.ok, report.problems
    run.log = list(full)


@pytest.fixture
def fault_run() -> Any:
    """``async with fault_run(tmp_path, wire_api, stream, **settings) as run``."""
    return _fault_run


@pytest.fixture(params=WIRES, ids=[f"{api}-{'stream' if s else 'whole'}" for api, s in WIRES])
def wire(request: pytest.FixtureRequest) -> tuple[WireApi, bool]:
    """(wire_api, stream): chat or responses, streamed or whole."""
    value: tuple[WireApi, bool] = request.param
    return value


@pytest.fixture
def secret() -> str:
    return SECRET


@pytest.fixture
def brains() -> Any:
    """The module's brain and tool builders: ``brains.reader_brain``, ``brains.read_tool``."""
    return SimpleNamespace(reader_brain=reader_brain, read_tool=read_tool)
