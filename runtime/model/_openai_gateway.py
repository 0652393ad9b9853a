"""The OpenAI(-compatible) model gateway: two wire APIs, on aiohttp or on the openai SDK.

Bodies are built by the pure functions of ``_openai_wire`` and encoded with orjson. By default
(``http_client="aiohttp"``) they are POSTed to ``base_url + "/chat/completions"`` or
``"/responses"`` through ``_aiohttp_transport``: one aiohttp session per gateway, made on the
first call, with the key as a bearer token, the purpose header, and OpenAI's organization and
project headers when ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` are set (credentials in the URL
go as basic auth, as the SDK's HTTP client sent them). The answer is parsed as plain JSON with
orjson, a stream decoded by ``JsonEventStream``. Why aiohttp: a well-kept client with a
C-accelerated parser, cheap per request at hundreds of sessions, proxies and verified TLS from
the environment, used only through its public API; earlier releases reached into private
parts of the openai SDK and kept an HTTP/1.1 client of their own to get the same CPU cost.

``http_client="sdk"`` (or ``STOWAGE_HTTP_CLIENT=sdk``) sends through the SDK's public API
instead (``_openai_sdk``): the same bodies, the typed results turned back into the same plain
JSON and parsed by the same functions. stowage retries itself, so the SDK never does. Every
failure of either path is mapped here to a ``ModelError`` (``_http_errors``).

Time is bounded twice: a streamed response that goes ``stream_idle_timeout`` seconds without
an event (SSE comments and keep-alives do not count) and any request still unfinished after
``request_deadline`` seconds are abandoned as ``ModelConnectionError``, so a silent or dripping
endpoint fails in bounded time and is retried (the clocks are ``asyncio.timeout``: aiohttp
runs on asyncio only, and it costs a fraction of a cancel scope on every read of a stream).
Every error names the endpoint (its URL redacted) and the HTTP status, and carries the
longest wait the server asked for.

Size is bounded too: an answer whose text and call arguments pass ``max_answer_chars`` is
``ResponseTooLarge``, raised as soon as a stream's deltas pass it, and a body (or one event of
a stream) is not read past ``_JSON_BYTES_PER_CHAR`` bytes a character of the cap plus
``_BODY_SLACK`` (the most such an answer can take as JSON, with room for the rest of the
body): an endpoint that streams 30 MB is cut off at the cap, never held. On the SDK path the
SDK reads each event and body itself, so there only the parsed answer is checked.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, NoReturn
from urllib.parse import unquote, urlsplit, urlunsplit

import orjson
import structlog
from stowage._version import __version__
from stowage.core import (
    ConfigError,
    ModelConnectionError,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ProviderCompaction,
    ResponseDone,
    ResponseTooLarge,
    StreamEvent,
    TextDelta,
    redact_url,
)
from stowage.policy import answer_chars, oversized_answer

from ._aiohttp_transport import AiohttpTransport
from ._http_errors import (
    BodyTooLarge,
    EventError,
    HttpStatusError,
    TransportError,
    model_error,
)
from ._openai_sdk import PlainEvents, SdkClient, map_openai_error, plain
from ._openai_wire import (
    PURPOSE_HEADER,
    ChatStreamAccumulator,
    ResponsesStreamAccumulator,
    chat_body,
    chat_messages,
    chat_tools,
    compact_body,
    parse_chat_completion,
    parse_compaction,
    parse_responses_response,
    responses_body,
    responses_input,
    responses_tools,
)
from ._retry_headers import parse_retry_after
from ._sse import JsonEventStream

__all__ = [
    "DEFAULT_BASE_URL",
    "HTTP_CLIENTS",
    "PURPOSE_HEADER",
    "HttpClient",
    "OpenAIGateway",
    "chat_body",
    "chat_messages",
    "chat_tools",
    "choose_http_client",
    "parse_retry_after",
    "responses_body",
    "responses_input",
    "responses_tools",
]

HttpClient = Literal["aiohttp", "sdk"]
#: the values of ``http_client``: aiohttp (the default) or the openai SDK's public API
HTTP_CLIENTS: tuple[HttpClient, ...] = ("aiohttp", "sdk")
#: the endpoint when neither ``base_url`` nor ``OPENAI_BASE_URL`` names one (as the SDK's)
DEFAULT_BASE_URL = "https://api.openai.com/v1"

_log = structlog.get_logger("stowage.gateway")
# OpenAI's provider-native compaction, beside ``/responses``
_COMPACT_PATH = "/responses/compact"
# A character of an answer takes at most 6 bytes in a JSON body (``\u0001``); the slack holds
# the rest of a body: ids, usage, and the tool schemas a Responses object echoes.
_JSON_BYTES_PER_CHAR = 6
_BODY_SLACK = 1024 * 1024
# What a call may raise that is the provider's fault, not ours (the SDK path adds its own).
_BOUNDARY: tuple[type[Exception], ...] = (
    ModelError,
    HttpStatusError,
    TransportError,
    EventError,
    ValueError,
    TypeError,
    KeyError,
)


def choose_http_client(http_client: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The HTTP client a gateway sends with: ``http_client`` when given, else the
    ``STOWAGE_HTTP_CLIENT`` variable of ``environ`` (``os.environ``; ``lean``, the name of the
    client before aiohttp, counts as ``aiohttp``), else ``aiohttp``.

    Raises ``ConfigError`` for any other value.
    """
    if http_client is not None:
        if http_client not in HTTP_CLIENTS:
            raise ConfigError(f"http_client must be 'aiohttp' or 'sdk', got {http_client!r}")
        return http_client
    env = os.environ if environ is None else environ
    choice = env.get("STOWAGE_HTTP_CLIENT", "").strip().lower()
    if choice in ("", "lean", "aiohttp"):
        return "aiohttp"
    if choice == "sdk":
        return "sdk"
    raise ConfigError(f"STOWAGE_HTTP_CLIENT must be 'aiohttp' or 'sdk', got {choice!r}")


def _endpoint(base_url: str, path: str) -> tuple[str, str | None]:
    """The URL to POST to (``base_url`` joined with ``path``, without credentials) and the
    basic-auth header value of the credentials ``base_url`` carried, if any.

    Raises ``ConfigError`` for a URL that is not http(s).
    """
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"cannot configure the OpenAI client: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"the model endpoint must be an http(s) URL, got {redact_url(base_url)!r}"
        )
    auth = None
    netloc = parts.netloc
    if "@" in netloc:
        user = unquote(parts.username or "")
        password = unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    joined = parts.path.rstrip("/") + path
    return urlunsplit((parts.scheme, netloc, joined, parts.query, "")), auth


def _too_large_body(size: int, max_bytes: int) -> ResponseTooLarge:
    return ResponseTooLarge(
        f"the response body passed {max_bytes:,} bytes ({size:,} read) before it ended, more "
        "than an answer within max_answer_chars can take"
    )


def _locate(error: ModelError, where: str) -> ModelError:
    """``error`` with ``where`` (endpoint and status) appended to its message, once."""
    text = str(error)
    if where not in text:
        error.args = (f"{text} ({where})", *error.args[1:])
    return error


class OpenAIGateway:
    """A ``ModelGateway`` for an OpenAI-compatible endpoint, on the chat or the responses wire
    API, sending through aiohttp or the openai SDK's public API."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        wire_api: Literal["chat", "responses"],
        timeout: float = 120,
        stream_idle_timeout: float = 60.0,
        request_deadline: float = 600.0,
        max_retry_wait: float = 60.0,
        max_answer_chars: int = 1_000_000,
        http_client: str | None = None,
    ) -> None:
        """``timeout``: seconds to connect, and the most a socket may go silent;
        ``stream_idle_timeout``: seconds a stream may go without an event;
        ``request_deadline``: seconds a request may take in all; ``max_retry_wait``: the most
        a wait the server asks for is taken at; ``max_answer_chars``: the most characters of
        text and call arguments one answer may carry (reading stops as soon as a response
        passes it: ``ResponseTooLarge``); ``http_client``: ``aiohttp`` or ``sdk`` (None: see
        ``choose_http_client``).

        Raises ``ConfigError`` if no API key is given or in ``OPENAI_API_KEY``, ``wire_api``
        or ``http_client`` is unknown, or the endpoint is not an http(s) URL.
        """
        if wire_api not in ("chat", "responses"):
            raise ConfigError(f"wire_api must be 'chat' or 'responses', got {wire_api!r}")
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            raise ConfigError(
                "no API key for the model endpoint: pass --api-key, set STOWAGE_API_KEY or "
                "OPENAI_API_KEY, or give the model profile an api_key in stowage.toml"
            )
        self.wire_api = wire_api
        self._path = "/chat/completions" if wire_api == "chat" else "/responses"
        self._build = chat_body if wire_api == "chat" else responses_body
        self._parse_body = parse_chat_completion if wire_api == "chat" else parse_responses_response
        #: which HTTP client sends: ``aiohttp`` or ``sdk``
        self.http_client = choose_http_client(http_client)
        self.stream_idle_timeout = stream_idle_timeout
        self.request_deadline = request_deadline
        self.max_retry_wait = max_retry_wait
        self.max_answer_chars = max_answer_chars
        #: the most bytes a body, or one event of a stream, is read to
        self.max_body_bytes = _JSON_BYTES_PER_CHAR * max_answer_chars + _BODY_SLACK
        base = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self._boundary = _BOUNDARY
        self._sdk: SdkClient | None = None
        self._transport: AiohttpTransport | None = None
        if self.http_client == "sdk":
            self._sdk = SdkClient(api_key=key, base_url=base, timeout=timeout, wire_api=wire_api)
            self._boundary = (*_BOUNDARY, *self._sdk.errors)
            base = self._sdk.base_url
        url, basic = _endpoint(base, self._path)
        #: the endpoint as errors and logs name it: never with its credentials
        self.url = redact_url(base.rstrip("/") + self._path) or ""
        #: the provider-native compaction endpoint (the responses wire only), as ``url``
        self.compact_url = redact_url(base.rstrip("/") + _COMPACT_PATH) or ""
        self._compactor: AiohttpTransport | None = None
        if self._sdk is None:
            self._transport = AiohttpTransport(
                url,
                self._headers(key, basic),
                purpose_header=PURPOSE_HEADER,
                connect_timeout=timeout,
                read_timeout=timeout,
            )
            if wire_api == "responses":
                # its own transport: aiohttp opens its session on the first compaction only
                self._compactor = AiohttpTransport(
                    _endpoint(base, _COMPACT_PATH)[0],
                    self._headers(key, basic),
                    purpose_header=PURPOSE_HEADER,
                    connect_timeout=timeout,
                    read_timeout=timeout,
                )

    @staticmethod
    def _headers(key: str, basic: str | None) -> dict[str, str]:
        """The headers of every request: auth, JSON, who sends, OpenAI's account headers."""
        headers = {
            "Authorization": basic or f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"stowage/{__version__}",
        }
        for name, variable in (
            ("OpenAI-Organization", "OPENAI_ORG_ID"),
            ("OpenAI-Project", "OPENAI_PROJECT_ID"),
        ):
            value = os.environ.get(variable)
            if value:
                headers[name] = value
        return headers

    def _body(self, request: ModelRequest, *, stream: bool) -> bytes:
        return orjson.dumps(self._build(request, stream=stream))

    def _map(self, exc: BaseException) -> ModelError:
        if self._sdk is not None and not isinstance(exc, ModelError):
            return map_openai_error(exc, max_retry_wait=self.max_retry_wait)
        return model_error(exc, max_retry_wait=self.max_retry_wait)

    def _raise(
        self,
        exc: BaseException,
        request: ModelRequest,
        *,
        status: int | None = None,
        url: str | None = None,
    ) -> NoReturn:
        """Raise the ``ModelError`` for ``exc``, naming the endpoint (``url``, else the
        wire's) and the HTTP status (``status``: the stream's, for a failure after its
        headers came)."""
        error = self._map(exc)
        if isinstance(exc, HttpStatusError):
            status = exc.status
        else:
            code = getattr(exc, "status_code", None)  # the SDK's status errors
            status = code if isinstance(code, int) else status
        url = url or self.url
        where = f"POST {url}" + (f", HTTP {status}" if status else ", no HTTP status")
        _locate(error, where)
        _log.warning(
            "model_call_failed",
            wire_api=self.wire_api,
            model=request.model,
            purpose=request.purpose,
            error=type(error).__name__,
            status=status,
            url=url,
            retry_after=error.retry_after,
        )
        if error is exc:
            raise error
        raise error from exc

    def _timed_out(self, request: ModelRequest, *, idle: bool, status: int | None) -> NoReturn:
        if idle:
            what = (
                f"no stream event for {self.stream_idle_timeout:g} s (stream_idle_timeout; "
                "keep-alives do not count)"
            )
        else:
            what = f"no complete response within {self.request_deadline:g} s (request_deadline)"
        self._raise(
            ModelConnectionError(f"the model endpoint stalled: {what}"), request, status=status
        )

    def _wait_limit(self, deadline: float) -> tuple[float, bool]:
        """Seconds the next read of a stream may take, and whether the idle timeout (rather
        than the request's deadline) is what limits it."""
        left = deadline - asyncio.get_running_loop().time()
        return (
            (self.stream_idle_timeout, True)
            if self.stream_idle_timeout < left
            else (max(0.0, left), False)
        )

    async def _post_and_read(self, transport: AiohttpTransport, body: bytes, purpose: str) -> Any:
        """The parsed JSON answer to ``body``. Raises what the transport raises,
        ``ResponseTooLarge`` for a body past ``max_body_bytes``."""
        max_bytes = self.max_body_bytes
        response = await transport.post(body, purpose, max_error_bytes=max_bytes)
        try:
            raw = await transport.read(response, max_bytes=max_bytes)
        except BodyTooLarge as exc:
            raise _too_large_body(exc.size, max_bytes) from None
        return raw

    async def create(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call.

        Raises ``ModelConnectionError``, ``RateLimitError``, ``ContextLengthExceeded``,
        ``ModelAuthError`` or ``ModelResponseError``.
        """
        raw: Any
        try:
            async with asyncio.timeout(self.request_deadline):
                if self._transport is not None:
                    raw = await self._post_and_read(
                        self._transport, self._body(request, stream=False), request.purpose
                    )
                else:
                    assert self._sdk is not None
                    raw = await self._sdk.create(
                        self._build(request, stream=False), request.purpose
                    )
        except self._boundary as exc:
            self._raise(exc, request)
        except TimeoutError:
            self._timed_out(request, idle=False, status=None)
        try:
            data = orjson.loads(raw) if self._sdk is None else plain(raw)
            response = self._parse_body(data)
            self._check_size(answer_chars(response))
        except self._boundary as exc:  # the body came (HTTP 200) but cannot be used
            self._raise(exc, request, status=200)
        return response

    async def compact(self, request: ModelRequest) -> ProviderCompaction:
        """Compact ``request.input`` with the endpoint's own ``POST /responses/compact``: the
        compaction item it answers, verbatim, to stand for those items from now on.

        Raises what ``create`` raises (an endpoint without it: ``ModelResponseError`` for its
        404, 405 or 501), and ``ModelResponseError`` for an answer with no compaction item or
        on the chat wire, which has no such endpoint.
        """
        if self.wire_api != "responses":
            raise ModelResponseError(
                "provider compaction needs the responses wire API; this gateway speaks chat"
            )
        body = compact_body(request)
        raw: Any
        try:
            async with asyncio.timeout(self.request_deadline):
                if self._compactor is not None:
                    raw = await self._post_and_read(
                        self._compactor, orjson.dumps(body), request.purpose
                    )
                else:
                    assert self._sdk is not None
                    raw = await self._sdk.compact(body, request.purpose)
        except self._boundary as exc:
            self._raise(exc, request, url=self.compact_url)
        except TimeoutError:
            self._timed_out(request, idle=False, status=None)
        try:
            data = orjson.loads(raw)
            compaction = parse_compaction(data, covered=len(request.input))
        except self._boundary as exc:  # the body came (HTTP 200) but cannot be used
            self._raise(exc, request, status=200, url=self.compact_url)
        return compaction

    def _check_size(self, chars: int) -> None:
        """Raises ``ResponseTooLarge`` when an answer of ``chars`` characters (text and call
        arguments, or as many as were read) passes ``max_answer_chars``."""
        reason = oversized_answer(chars, self.max_answer_chars)
        if reason is not None:
            raise ResponseTooLarge(reason)

    async def _open_stream(self, request: ModelRequest) -> JsonEventStream | PlainEvents:
        """Send a streaming request; the events of its answer, unread."""
        if self._transport is None:
            assert self._sdk is not None
            return PlainEvents(
                await self._sdk.create(self._build(request, stream=True), request.purpose)
            )
        transport = self._transport
        response = await transport.post(
            self._body(request, stream=True), request.purpose, max_error_bytes=self.max_body_bytes
        )

        async def read() -> bytes:
            return await transport.read_chunk(response)

        async def close(ended: bool) -> None:
            transport.finish(response, ended=ended)

        return JsonEventStream(
            read, close, status=response.status, max_event_bytes=self.max_body_bytes
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response: ``TextDelta`` pieces, then exactly one ``ResponseDone``.

        Raises what ``create`` raises, at the point of failure in the stream.
        """
        accumulator: ChatStreamAccumulator | ResponsesStreamAccumulator = (
            ChatStreamAccumulator() if self.wire_api == "chat" else ResponsesStreamAccumulator()
        )
        events: JsonEventStream | PlainEvents
        deadline = asyncio.get_running_loop().time() + self.request_deadline
        limit, idle = self._wait_limit(deadline)
        try:
            async with asyncio.timeout(limit):
                events = await self._open_stream(request)
        except self._boundary as exc:
            self._raise(exc, request)
        except TimeoutError:
            self._timed_out(request, idle=idle, status=None)
        status = events.status
        async with events:
            while True:
                # one read at a time under the clock, never a yield: keep-alives are skipped
                # inside the read, so only a real event resets it
                limit, idle = self._wait_limit(deadline)
                try:
                    async with asyncio.timeout(limit):
                        batch = await events.next_events()
                    texts = [accumulator.feed(event) for event in batch or ()]
                    # stop reading once the answer passes the cap: it is never held
                    self._check_size(accumulator.answer_chars)
                except self._boundary as exc:
                    self._raise(exc, request, status=status)
                except TimeoutError:
                    self._timed_out(request, idle=idle, status=status)
                if batch is None:
                    break
                text = "".join(texts)
                if text:
                    yield TextDelta(text=text)
        try:
            response = accumulator.finish()
        except ModelError as exc:
            self._raise(exc, request, status=status)
        yield ResponseDone(response=response)

    async def aclose(self) -> None:
        """Close the connections."""
        if self._transport is not None:
            await self._transport.aclose()
        if self._compactor is not None:
            await self._compactor.aclose()
        if self._sdk is not None:
            await self._sdk.aclose()
