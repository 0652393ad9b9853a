"""A fake OpenAI-compatible HTTP server, for tests, load runs and demos without a provider.

It serves ``/v1/chat/completions``, ``/v1/responses`` and Anthropic's ``/v1/messages`` (streamed
and not; see ``_fake_messages``) from a brain (the scripted one by default), and
``/v1/responses/compact`` (the brain's summary sealed in a compaction item it reads back when
the item returns; ``compact_endpoint=False`` answers 404), records every request body, and
injects faults (``Fault``, see ``_fault_spec``) on demand: in process through ``inject``, or
from another process through ``POST /_fake/faults``; or at random, at given rates
(``fault_rates``), for load runs. Faults answer like real providers and the proxies in front of
them do when things go wrong: errors with their headers and bodies (OpenAI's and LiteLLM's),
and 200s that are not what they should be (see ``_fake_faults``): usage zeroed or invented,
the output limit cutting a call off, no finish marker, no choices, a stream cut off, a stream
of keep-alives only, a dripping stream. It checks every request it receives for tool calls
without their output itself (``GET /_fake/stats``), so a long load run need not keep the bodies.
"""

from __future__ import annotations

import dataclasses
import random
import socket
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeAlias

import anyio
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from stowage.core import ModelRequest, ModelResponse, UserMessage
from stowage.load import parse_fault_rates
from stowage.model import PURPOSE_HEADER, ScriptedBrain
from stowage.policy import CacheHit, PrefixCache

from ._fake_faults import (
    MUTATIONS,
    WIRE_FAULTS,
    chat_answer,
    chat_stream,
    mutate,
    responses_answer,
    responses_stream,
)
from ._fake_messages import (
    BreakpointCache,
    message_events,
    message_object,
    overflow_error,
    request_from_messages,
)
from ._fake_wire import (
    COMPACT_INSTRUCTION,
    body_purpose,
    chat_chunks,
    chat_completion,
    compaction_object,
    request_from_chat,
    request_from_responses,
    responses_events,
    responses_object,
)
from ._fault_spec import Fault, FaultWhen, error_body, random_fault
from ._wire_check import orphan_calls, orphan_outputs

__all__ = ["FakeOpenAIServer"]

#: what a handler reads from a request: its body, the fault to shape the answer, the request
_Read: TypeAlias = tuple[dict[str, Any], Fault | None, ModelRequest]


class _Parse(Protocol):
    """Reads the model request out of a body (``request_from_chat`` and its siblings)."""

    def __call__(self, body: dict[str, Any], *, purpose: str | None = None) -> ModelRequest: ...


@dataclass(eq=False, kw_only=True)
class _Pending:
    fault: Fault
    when: FaultWhen
    times: int


def _sse(
    events: Iterable[dict[str, Any]], *, named: bool, done: bool, interval: float = 0.0
) -> AsyncIterator[bytes]:
    async def body() -> AsyncIterator[bytes]:
        for event in events:
            if interval > 0:
                await anyio.sleep(interval)
            head = b"event: " + event["type"].encode() + b"\n" if named else b""
            yield head + b"data: " + orjson.dumps(event) + b"\n\n"
        if done:
            yield b"data: [DONE]\n\n"

    return body()


async def _keepalives(interval: float, piece: bytes) -> AsyncIterator[bytes]:
    """``piece`` every ``interval`` seconds, for as long as the client listens."""
    while True:
        yield piece
        await anyio.sleep(interval)


async def _dripped(data: bytes, interval: float, piece: int = 16) -> AsyncIterator[bytes]:
    for start in range(0, len(data), piece):
        yield data[start : start + piece]
        await anyio.sleep(interval)


#: headers ``request_headers`` never keeps
_SECRET_HEADERS = frozenset(
    {"authorization", "api-key", "x-api-key", "openai-organization", "cookie"}
)


class _KeyCheck:
    """Answers a ``/v1`` request without the server's ``api_key`` as OpenAI does: HTTP 401."""

    def __init__(self, app: ASGIApp, server: FakeOpenAIServer) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self.server.api_key
        if key is not None and scope["type"] == "http" and scope["path"].startswith("/v1/"):
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization", b"").decode()
            if given != f"Bearer {key}" and headers.get(b"x-api-key", b"").decode() != key:
                body = {"error": error_body(Fault.auth())}
                await JSONResponse(body, 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


@dataclass(eq=False, kw_only=True)
class FakeOpenAIServer:
    """The fake server; ``async with`` runs it on a free port inside the current event loop."""

    brain: Callable[[ModelRequest], ModelResponse] = field(default_factory=ScriptedBrain)
    host: str = "127.0.0.1"
    port: int = 0
    latency: float = 0.0
    record: Path | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: the headers of each request in ``requests`` (lower-case names), its credentials left out
    request_headers: list[dict[str, str]] = field(default_factory=list)
    #: keep every body in ``requests``; a long load run turns it off and reads ``stats``
    keep_requests: bool = True
    #: random faults per model request, by name of ``FAULT_NAMES`` (see ``parse_fault_rates``)
    fault_rates: dict[str, float] = field(default_factory=dict)
    slow_delay: float = 1.0
    retry_after: float = 0.2
    seed: int | None = None
    #: the window ``GET /v1/models/{id}`` reports (None: the answer names no window), and
    #: the one ``/v1/messages`` enforces with Anthropic's overflow errors (None: none)
    context_window: int | None = None
    #: the field it is reported in: ``max_model_len`` (vLLM), ``context_length`` (OpenRouter)...
    window_field: str = "max_model_len"
    #: the one API key the ``/v1`` routes accept (None: any); another key gets OpenAI's 401
    api_key: str | None = None
    #: serve ``/v1/responses/compact``; False: it answers 404, as an endpoint without it does
    compact_endpoint: bool = True
    #: the provider's prefix cache it simulates (None: every request is uncached); per key
    #: (``prompt_cache_key``, else the first two messages) its ``figures`` count requests,
    #: input, cached tokens and prefix breaks, and the server adds requests, input and cached
    #: tokens by purpose (``round_*``, ``summary_*``: see ``cached_share``)
    prefix_cache: PrefixCache | None = field(default_factory=PrefixCache)
    #: the Messages endpoint's cache, which serves only prefixes marked by breakpoints (None:
    #: nothing cached); its ``figures`` are per key as ``prefix_cache``'s, with cache writes
    breakpoint_cache: BreakpointCache | None = field(default_factory=BreakpointCache)
    #: counts of requests, faults and requests carrying a tool call without its output, and
    #: input and cached tokens of round and of summary requests over every cache key (and the
    #: tokens ``/v1/messages`` wrote to its cache)
    stats: dict[str, Any] = field(
        default_factory=lambda: {
            "requests": 0,
            "rounds": 0,
            "summaries": 0,
            "round_input_tokens": 0,
            "round_cached_tokens": 0,
            "summary_input_tokens": 0,
            "summary_cached_tokens": 0,
            "cache_write_tokens": 0,
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

    def cached_share(self, purpose: str = "summary", key: str | None = None) -> float | None:
        """The share of the input tokens of ``purpose`` ("round" or "summary") requests that
        the prefix cache served, for one cache ``key`` or over all of them; None when no such
        request came. Raises ``KeyError`` for a key the cache never saw."""
        counts = self.stats if key is None else self._cache_figures()[key]
        total = counts.get(f"{purpose}_input_tokens", 0)
        return counts.get(f"{purpose}_cached_tokens", 0) / total if total else None

    def _cache_figures(self) -> dict[str, dict[str, int]]:
        figures = {} if self.prefix_cache is None else dict(self.prefix_cache.figures)
        if self.breakpoint_cache is not None:
            figures.update(self.breakpoint_cache.figures)
        return figures

    def _count_cached(self, key: str, purpose: str, hit: CacheHit) -> None:
        """The cache's figures of ``key`` and ``stats``, by purpose."""
        assert self.prefix_cache is not None
        figures = self.prefix_cache.figures[key]
        for name in ("round", "summary"):
            for what in ("requests", "input_tokens", "cached_tokens"):
                figures.setdefault(f"{name}_{what}", 0)
        figures[f"{purpose}_requests"] += 1
        for counts in (figures, self.stats):
            counts[f"{purpose}_input_tokens"] += hit.input_tokens
            counts[f"{purpose}_cached_tokens"] += hit.cached_tokens

    @property
    def app(self) -> Starlette:
        """The ASGI app, usable without a socket (httpx ``ASGITransport``)."""
        return Starlette(
            middleware=[Middleware(_KeyCheck, server=self)],
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/responses/compact", self._compact, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/models/{model_id:path}", self._model, methods=["GET"]),
                Route("/_fake/faults", self._post_fault, methods=["POST"]),
                Route("/_fake/requests", self._get_requests, methods=["GET"]),
                Route("/_fake/stats", self._get_stats, methods=["GET"]),
            ],
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
        kind = body_purpose(body, purpose)
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
                    fault = random_fault(
                        name, slow_delay=self.slow_delay, retry_after=self.retry_after
                    )
                    return self._counted_fault(fault)
                draw -= rate
        return None

    def _count(self, body: dict[str, Any], kind: str) -> None:
        stats = self.stats
        stats["requests"] += 1
        stats["rounds" if kind == "round" else "summaries"] += 1
        orphans = orphan_calls(body) + orphan_outputs(body)
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

    async def _prepare(
        self, request: Request
    ) -> tuple[dict[str, Any], Fault | None, Response | None]:
        """The body and its fault, or the whole answer when the fault makes one."""
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return (
                {},
                None,
                JSONResponse(
                    {"error": {"message": "invalid JSON body", "type": "invalid_request_error"}},
                    400,
                ),
            )
        if self.keep_requests:
            self.request_headers.append(
                {k: v for k, v in request.headers.items() if k not in _SECRET_HEADERS}
            )
        fault = await self._take(body, request.url.path, request.headers.get(PURPOSE_HEADER))
        if self.latency > 0:
            await anyio.sleep(self.latency)
        if fault is None:
            return body, None, None
        if fault.kind == "delay":
            await anyio.sleep(fault.delay)
            return body, None, None
        if fault.kind in MUTATIONS or fault.kind in WIRE_FAULTS or fault.kind == "drip":
            return body, fault, None
        if fault.kind == "garbage":
            if body.get("stream"):
                return body, None, Response(b"data: {not json\n\n", media_type="text/event-stream")
            return body, None, Response(b"<html>not json", media_type="application/json")
        if fault.kind == "keepalive":
            streamed = bool(body.get("stream"))
            piece = b": keep-alive\n\n" if streamed else b" "
            media = "text/event-stream" if streamed else "application/json"
            return (
                body,
                None,
                StreamingResponse(_keepalives(fault.interval, piece), media_type=media),
            )
        headers = dict(fault.headers)
        if fault.retry_after is not None:
            headers["retry-after"] = f"{fault.retry_after:g}"
        return (
            body,
            None,
            JSONResponse({"error": error_body(fault)}, fault.status, headers=headers),
        )

    def _answer(
        self, request: ModelRequest, fault: Fault | None, cache_key: Any = None
    ) -> tuple[ModelResponse, int]:
        self._serial += 1
        response = self.brain(request)
        if self.prefix_cache is not None and response.usage is not None:
            key = cache_key if isinstance(cache_key, str) and cache_key else None
            hit = self.prefix_cache.serve(
                request, cache_key=key, input_tokens=response.usage.input_tokens
            )
            self._count_cached(PrefixCache.key_for(request, key), request.purpose, hit)
            usage = dataclasses.replace(response.usage, cached_tokens=hit.cached_tokens)
            response = dataclasses.replace(response, usage=usage)
        if fault is not None and fault.kind in MUTATIONS:
            response = mutate(response, fault.kind)
        return response, self._serial

    @staticmethod
    def _whole(data: dict[str, Any], fault: Fault | None) -> Response:
        """An unstreamed answer: cut half way, dripped, or whole."""
        raw = orjson.dumps(data)
        if fault is not None and fault.kind == "cut_stream":
            return Response(raw[: len(raw) // 2], media_type="application/json")
        if fault is not None and fault.kind == "drip":
            return StreamingResponse(_dripped(raw, fault.interval), media_type="application/json")
        return Response(raw, media_type="application/json")

    async def _read(self, request: Request, parse: _Parse) -> _Read | Response:
        """The body, its fault and the request ``parse`` reads; or the whole answer (fault, 400)."""
        body, fault, failure = await self._prepare(request)
        if failure is not None:
            return failure
        try:
            asked = parse(body, purpose=request.headers.get(PURPOSE_HEADER))
        except (KeyError, TypeError, AttributeError) as exc:
            return _bad_request(exc)
        return body, fault, asked

    async def _chat(self, request: Request) -> Response:
        return await self._openai(request, chat=True)

    async def _responses(self, request: Request) -> Response:
        return await self._openai(request, chat=False)

    async def _openai(self, request: Request, *, chat: bool) -> Response:
        """The brain's answer as Chat Completions or Responses, streamed or not, faults applied."""
        read = await self._read(request, request_from_chat if chat else request_from_responses)
        if isinstance(read, Response):
            return read
        body, fault, asked = read
        response, serial = self._answer(asked, fault, body.get("prompt_cache_key"))
        kind, model = (fault.kind if fault is not None else ""), asked.model
        if chat and body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = chat_chunks(response, model=model, serial=serial, include_usage=usage)
            stream = chat_stream(list(chunks), kind)
            return _event_stream(stream, fault, named=False, done=kind != "cut_stream")
        if body.get("stream"):
            events = responses_events(response, model=model, serial=serial)
            return _event_stream(responses_stream(list(events), kind), fault, named=True)
        if chat:
            whole = chat_answer(chat_completion(response, model=model, serial=serial), kind)
        else:
            whole = responses_answer(responses_object(response, model=model, serial=serial), kind)
        return self._whole(whole, fault)

    async def _messages(self, request: Request) -> Response:
        """``POST /v1/messages``: Anthropic's Messages API over the same brain."""
        read = await self._read(request, request_from_messages)
        if isinstance(read, Response):
            return read
        body, fault, asked = read
        overflow = (
            None if self.context_window is None else overflow_error(asked, self.context_window)
        )
        if overflow is not None:
            return JSONResponse(overflow, 400)
        self._serial += 1
        response = self.brain(asked)
        use = None
        if self.breakpoint_cache is not None and response.usage is not None:
            use = self.breakpoint_cache.serve(
                body, total=response.usage.input_tokens, purpose=asked.purpose
            )
            self.stats[f"{asked.purpose}_input_tokens"] += use.total
            self.stats[f"{asked.purpose}_cached_tokens"] += use.read
            self.stats["cache_write_tokens"] += use.written
        if fault is not None and fault.kind in MUTATIONS:
            response = mutate(response, fault.kind)
        model, serial = asked.model, self._serial
        if not body.get("stream"):
            return self._whole(message_object(response, model=model, serial=serial, use=use), fault)
        cut = fault is not None and fault.kind == "cut_stream"
        events = message_events(response, model=model, serial=serial, use=use, cut=cut)
        return _event_stream(list(events), fault, named=True)

    async def _compact(self, request: Request) -> Response:
        """``POST /v1/responses/compact``: the brain's summary in one compaction item."""
        read = await self._read(request, _summary_request)
        if not self.compact_endpoint:  # recorded and counted like any request, then refused
            error = {
                "message": "Invalid URL (POST /v1/responses/compact)",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
            return JSONResponse({"error": error}, 404)
        if isinstance(read, Response):
            return read
        body, fault, compacted = read
        asked = dataclasses.replace(
            compacted, input=(*compacted.input, UserMessage(text=COMPACT_INSTRUCTION))
        )
        response, serial = self._answer(asked, fault, body.get("prompt_cache_key"))
        users = [i.text for i in compacted.input if isinstance(i, UserMessage)]
        data = compaction_object(
            response.text,
            items=len(compacted.input),
            users=users,
            usage=response.usage,
            model=compacted.model,
            serial=serial,
        )
        return self._whole(data, fault)

    async def _models(self, request: Request) -> Response:
        model = {"id": "scripted", "object": "model", "created": 0, "owned_by": "stowage"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _model(self, request: Request) -> Response:
        model: dict[str, Any] = {
            "id": request.path_params["model_id"],
            "object": "model",
            "created": 0,
            "owned_by": "stowage",
        }
        if self.context_window is not None:
            model[self.window_field] = self.context_window
        return JSONResponse(model)

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


def _summary_request(body: dict[str, Any], *, purpose: str | None = None) -> ModelRequest:
    """The request ``/v1/responses/compact`` summarizes: always a summary, whatever it says."""
    return request_from_responses(body, purpose="summary")


def _event_stream(
    events: Iterable[dict[str, Any]], fault: Fault | None, *, named: bool, done: bool = False
) -> StreamingResponse:
    """A streamed answer of ``events``, dripped when ``fault`` says so."""
    interval = fault.interval if fault is not None and fault.kind == "drip" else 0.0
    return StreamingResponse(
        _sse(events, named=named, done=done, interval=interval), media_type="text/event-stream"
    )
