"""A fake OpenAI-compatible HTTP server, for tests, load runs and demos without a provider.

It serves ``/v1/chat/completions`` and ``/v1/responses`` (streamed and not) from a brain (the
scripted one by default), records every request body, and injects faults on demand: in process
through ``inject``, or from another process through ``POST /_fake/faults``; or at random, at
given rates (``fault_rates``), for load runs. It checks every request it receives for tool calls
without their output itself (``GET /_fake/stats``), so a long load run need not keep the bodies.
"""

from __future__ import annotations

import random
import socket
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeAlias

import anyio
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from stowage.core import ModelRequest, ModelResponse
from stowage.load import parse_fault_rates
from stowage.model import PURPOSE_HEADER, ScriptedBrain

from ._fake_wire import (
    chat_chunks,
    chat_completion,
    request_from_chat,
    request_from_responses,
    responses_events,
    responses_object,
)
from ._wire_check import orphan_calls

__all__ = ["Fault", "FakeOpenAIServer", "FaultWhen"]

FaultWhen: TypeAlias = Literal["round", "summary", "any"]
FaultKind: TypeAlias = Literal[
    "rate_limit", "server_error", "context_length", "auth", "delay", "garbage"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """One injected failure; build it with the class methods."""

    kind: FaultKind
    status: int = 200
    retry_after: float | None = None
    delay: float = 0.0

    @classmethod
    def rate_limit(cls, retry_after: float = 1.0) -> Fault:
        """A 429 with a ``Retry-After`` header of ``retry_after`` seconds."""
        return cls(kind="rate_limit", status=429, retry_after=retry_after)

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """A 5xx answer (500 or 503, say)."""
        return cls(kind="server_error", status=status)

    @classmethod
    def context_length(cls) -> Fault:
        """A 400 with the provider's ``context_length_exceeded`` error body."""
        return cls(kind="context_length", status=400)

    @classmethod
    def auth(cls) -> Fault:
        """A 401 invalid API key."""
        return cls(kind="auth", status=401)

    @classmethod
    def slow(cls, delay: float) -> Fault:
        """A normal answer after ``delay`` seconds."""
        return cls(kind="delay", delay=delay)

    @classmethod
    def garbage(cls) -> Fault:
        """A 200 whose body is not JSON (nor valid SSE data)."""
        return cls(kind="garbage")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        """A fault from ``{"fault": kind, ...}``; raises ``ValueError`` on an unknown kind."""
        kind = data.get("fault")
        if kind == "rate_limit":
            return cls.rate_limit(float(data.get("retry_after", 1.0)))
        if kind == "server_error":
            return cls.server_error(int(data.get("status", 500)))
        if kind == "delay":
            return cls.slow(float(data.get("delay", 1.0)))
        builders: dict[Any, Callable[[], Fault]] = {
            "context_length": cls.context_length,
            "auth": cls.auth,
            "garbage": cls.garbage,
        }
        if kind not in builders:
            raise ValueError(f"unknown fault {kind!r}")
        return builders[kind]()


def _random_fault(name: str, *, slow_delay: float, retry_after: float) -> Fault:
    if name == "429":
        return Fault.rate_limit(retry_after)
    if name == "slow":
        return Fault.slow(slow_delay)
    return Fault.server_error(int(name))


@dataclass(eq=False, kw_only=True)
class _Pending:
    fault: Fault
    when: FaultWhen
    times: int


_ERRORS: dict[FaultKind, tuple[str, str, str | None]] = {
    "rate_limit": ("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
    "server_error": (
        "The server had an error while processing your request.",
        "server_error",
        None,
    ),
    "context_length": (
        "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "9000 tokens. Please reduce the length of the messages.",
        "invalid_request_error",
        "context_length_exceeded",
    ),
    "auth": ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
}


def _sse(events: Iterable[dict[str, Any]], *, named: bool, done: bool) -> AsyncIterator[bytes]:
    async def body() -> AsyncIterator[bytes]:
        for event in events:
            head = b"event: " + event["type"].encode() + b"\n" if named else b""
            yield head + b"data: " + orjson.dumps(event) + b"\n\n"
        if done:
            yield b"data: [DONE]\n\n"

    return body()


@dataclass(eq=False, kw_only=True)
class FakeOpenAIServer:
    """The fake server; ``async with`` runs it on a free port inside the current event loop."""

    brain: Callable[[ModelRequest], ModelResponse] = field(default_factory=ScriptedBrain)
    host: str = "127.0.0.1"
    port: int = 0
    latency: float = 0.0
    record: Path | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: keep every body in ``requests``; a long load run turns it off and reads ``stats``
    keep_requests: bool = True
    #: random faults per model request, by name of ``FAULT_NAMES`` (see ``parse_fault_rates``)
    fault_rates: dict[str, float] = field(default_factory=dict)
    slow_delay: float = 1.0
    retry_after: float = 0.2
    seed: int | None = None
    #: counts of requests, faults and requests carrying a tool call without its output
    stats: dict[str, Any] = field(
        default_factory=lambda: {
            "requests": 0,
            "rounds": 0,
            "summaries": 0,
            "faults": {},
            "orphan_requests": 0,
            "orphan_examples": [],
        }
    )
    _faults: list[_Pending] = field(default_factory=list)
    _random: random.Random = field(default_factory=random.Random)
    _serial: int = 0
    _server: uvicorn.Server | None = None
    _stack: AsyncExitStack | None = None

    def __post_init__(self) -> None:
        self._random.seed(self.seed)

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``; raises ``RuntimeError`` before the server started."""
        if self._server is None:
            raise RuntimeError("FakeOpenAIServer is not running; use 'async with'")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def stopping(self) -> bool:
        """Whether the server was asked to stop (``stop`` or a signal) or is not running."""
        return self._server is None or self._server.should_exit

    def stop(self) -> None:
        """Ask the server to shut down; ``async with`` exit waits for it."""
        if self._server is not None:
            self._server.should_exit = True

    def inject(self, fault: Fault, *, when: FaultWhen = "any", times: int = 1) -> None:
        """Answer the next ``times`` matching model requests with ``fault``."""
        if when not in ("round", "summary", "any"):
            raise ValueError(f"when must be 'round', 'summary' or 'any', got {when!r}")
        self._faults.append(_Pending(fault=fault, when=when, times=times))

    def clear_faults(self) -> None:
        """Drop every pending fault."""
        self._faults.clear()

    @property
    def app(self) -> Starlette:
        """The ASGI app, usable without a socket (httpx ``ASGITransport``)."""
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/_fake/faults", self._post_fault, methods=["POST"]),
                Route("/_fake/requests", self._get_requests, methods=["GET"]),
                Route("/_fake/stats", self._get_stats, methods=["GET"]),
            ]
        )

    def _bind(self) -> tuple[uvicorn.Server, socket.socket]:
        # IPPROTO_TCP explicitly: asyncio turns Nagle off only on sockets whose proto says TCP,
        # and accepted sockets copy it; with proto 0 every keep-alive answer waits ~40 ms for
        # the client's delayed ACK
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
            # longer than any pause of a busy client, so the server never closes a keep-alive
            # connection just as the client reuses it (a spurious connection error)
            timeout_keep_alive=75,
        )
        return uvicorn.Server(config), sock

    @staticmethod
    async def _until_started(server: uvicorn.Server) -> None:
        # uvicorn offers a flag, not an event, for "listening".
        while not server.started:  # noqa: ASYNC110
            await anyio.sleep(0.005)

    async def serve(self, on_ready: Callable[[str], object] = print) -> None:
        """Serve until SIGTERM/SIGINT (or ``stop``); ``on_ready`` gets ``listening <url>``."""
        server, sock = self._bind()
        with sock:
            async with anyio.create_task_group() as group:
                group.start_soon(server.serve, [sock])
                await self._until_started(server)
                self._server = server
                on_ready(f"listening {self.base_url}")
        self._server = None

    async def __aenter__(self) -> FakeOpenAIServer:
        server, sock = self._bind()
        async with AsyncExitStack() as stack:
            stack.callback(sock.close)
            group = await stack.enter_async_context(anyio.create_task_group())
            group.start_soon(server.serve, [sock])
            await self._until_started(server)
            self._server = server
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.should_exit = True
        stack, self._stack, self._server = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def _take(self, body: dict[str, Any], path: str, purpose: str | None) -> Fault | None:
        if self.keep_requests:
            self.requests.append(body)
        if self.record is not None:
            line = orjson.dumps({"path": path, "body": body}) + b"\n"
            await anyio.to_thread.run_sync(self._append, line)
        kind = (
            purpose
            if purpose in ("round", "summary")
            else ("round" if body.get("tools") else "summary")
        )
        self._count(body, kind)
        for pending in self._faults:
            if pending.when in (kind, "any"):
                pending.times -= 1
                if pending.times <= 0:
                    self._faults.remove(pending)
                return self._counted_fault(pending.fault)
        if self.fault_rates:
            draw = self._random.random()
            for name, rate in self.fault_rates.items():
                if draw < rate:
                    fault = _random_fault(
                        name, slow_delay=self.slow_delay, retry_after=self.retry_after
                    )
                    return self._counted_fault(fault)
                draw -= rate
        return None

    def _count(self, body: dict[str, Any], kind: str) -> None:
        stats = self.stats
        stats["requests"] += 1
        stats["rounds" if kind == "round" else "summaries"] += 1
        orphans = orphan_calls(body)
        if orphans:
            stats["orphan_requests"] += 1
            if len(stats["orphan_examples"]) < 10:
                stats["orphan_examples"].append({"calls": orphans[:5], "model": body.get("model")})

    def _counted_fault(self, fault: Fault) -> Fault:
        faults = self.stats["faults"]
        faults[fault.kind] = faults.get(fault.kind, 0) + 1
        return fault

    def _append(self, line: bytes) -> None:
        assert self.record is not None
        with self.record.open("ab") as f:
            f.write(line)

    async def _prepare(self, request: Request) -> tuple[dict[str, Any], Response | None]:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return {}, JSONResponse(
                {"error": {"message": "invalid JSON body", "type": "invalid_request_error"}}, 400
            )
        fault = await self._take(body, request.url.path, request.headers.get(PURPOSE_HEADER))
        if self.latency > 0:
            await anyio.sleep(self.latency)
        if fault is None:
            return body, None
        if fault.kind == "delay":
            await anyio.sleep(fault.delay)
            return body, None
        if fault.kind == "garbage":
            if body.get("stream"):
                return body, Response(b"data: {not json\n\n", media_type="text/event-stream")
            return body, Response(b"<html>not json", media_type="application/json")
        message, kind, code = _ERRORS[fault.kind]
        headers = {}
        if fault.retry_after is not None:
            headers["retry-after"] = f"{fault.retry_after:g}"
        error = {"message": message, "type": kind, "param": None, "code": code}
        return body, JSONResponse({"error": error}, fault.status, headers=headers)

    def _answer(self, request: ModelRequest) -> tuple[ModelResponse, int]:
        self._serial += 1
        return self.brain(request), self._serial

    async def _chat(self, request: Request) -> Response:
        body, failure = await self._prepare(request)
        if failure is not None:
            return failure
        try:
            model_request = request_from_chat(body, purpose=request.headers.get(PURPOSE_HEADER))
        except (KeyError, TypeError, AttributeError) as exc:
            return _bad_request(exc)
        response, serial = self._answer(model_request)
        model = model_request.model
        if not body.get("stream"):
            return JSONResponse(chat_completion(response, model=model, serial=serial))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = chat_chunks(response, model=model, serial=serial, include_usage=include_usage)
        return StreamingResponse(
            _sse(chunks, named=False, done=True), media_type="text/event-stream"
        )

    async def _responses(self, request: Request) -> Response:
        body, failure = await self._prepare(request)
        if failure is not None:
            return failure
        try:
            model_request = request_from_responses(
                body, purpose=request.headers.get(PURPOSE_HEADER)
            )
        except (KeyError, TypeError, AttributeError) as exc:
            return _bad_request(exc)
        response, serial = self._answer(model_request)
        model = model_request.model
        if not body.get("stream"):
            return JSONResponse(responses_object(response, model=model, serial=serial))
        events = responses_events(response, model=model, serial=serial)
        return StreamingResponse(
            _sse(events, named=True, done=False), media_type="text/event-stream"
        )

    async def _models(self, request: Request) -> Response:
        model = {"id": "scripted", "object": "model", "created": 0, "owned_by": "stowage"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _post_fault(self, request: Request) -> Response:
        data = orjson.loads(await request.body())
        if "latency" in data:
            self.latency = float(data["latency"])
        if data.get("clear"):
            self.clear_faults()
        if "rates" in data:
            try:
                self.fault_rates = parse_fault_rates(str(data["rates"]))
            except ValueError as exc:
                return JSONResponse({"error": {"message": str(exc)}}, 400)
        if "fault" in data:
            try:
                fault = Fault.from_json(data)
                self.inject(fault, when=data.get("when", "any"), times=int(data.get("times", 1)))
            except ValueError as exc:
                return JSONResponse({"error": {"message": str(exc)}}, 400)
        return JSONResponse({"pending": len(self._faults), "latency": self.latency})

    async def _get_requests(self, request: Request) -> Response:
        return JSONResponse(self.requests)

    async def _get_stats(self, request: Request) -> Response:
        return JSONResponse(self.stats)


def _bad_request(exc: Exception) -> Response:
    error = {"message": f"malformed request: {exc!r}", "type": "invalid_request_error"}
    return JSONResponse({"error": error}, 400)
