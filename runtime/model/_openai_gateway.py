"""The OpenAI(-compatible) model gateway: one ``AsyncOpenAI`` client, two wire APIs.

Bodies are built by the pure functions of ``_openai_wire``. On the fast wire path the SDK
builds one request per endpoint when the gateway starts (URL, auth and its own headers,
timeouts: ``_Wire``); each call sends its head with the call's body and purpose header through
stowage's lean HTTP/1.1 client (``_http1``; the SDK's own HTTP client when ``lean_http_gap``
finds a reason: a proxy, credentials in the URL, ``STOWAGE_HTTP_CLIENT=sdk``), and an error
status becomes the SDK's own error class (``_make_status_error_from_response``). The answer
is parsed as plain JSON with orjson, a stream decoded by ``JsonEventStream``. That skips the
SDK's per-call option handling, header merging, URL joining and typed model construction,
which are most of its CPU cost; stowage retries itself, so the SDK's retry loop is never used.
Every openai/httpx/lean client failure is mapped here to a ``ModelError``.

The fast path leans on private parts of the SDK (``_build_request``, ``_client``,
``_make_status_error_from_response``, ``FinalRequestOptions``). ``fast_wire_gaps`` checks them
when a gateway starts; an SDK that lacks one gets the public API instead,
``chat.completions.create`` or ``responses.create``, whose typed results are turned back into
the same plain JSON and go through the same parsers, with one warning per process.

Time is bounded twice: a streamed response that goes ``stream_idle_timeout`` seconds without
an event (SSE comments and keep-alives do not count) and any request still unfinished after
``request_deadline`` seconds are abandoned as ``ModelConnectionError``, so a silent or dripping
endpoint fails in bounded time and is retried. Every error names the endpoint (its URL
redacted) and the HTTP status, and carries the longest wait the server asked for.

Size is bounded too: an answer whose text and call arguments pass ``max_answer_chars`` is
``ResponseTooLarge``, raised as soon as a stream's deltas pass it, and a body (or one event of
a stream) is not read past ``_JSON_BYTES_PER_CHAR`` bytes a character of the cap plus
``_BODY_SLACK`` (the most such an answer can take as JSON, with room for the rest of the
body): an endpoint that streams 30 MB is cut off at the cap, never held. On the public API
the SDK reads each event and body itself, so there only the parsed answer is checked.

When the SDK's HTTP client sends, calls are spread over shards of at most ``SHARD_CALLS``
calls in flight, one client (and one connection pool) each, opened as concurrency grows: that
pool checks every idle connection on each request, so one pool serving hundreds of sessions
costs more CPU per call the more sessions there are, and small pools keep that cost flat. The
lean client's one pool takes and gives back a connection in constant time.
"""

from __future__ import annotations

import inspect
import json
import os
import ssl
import sys
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Literal, NoReturn

import anyio
import openai
import orjson
import structlog
from stowage.core import (
    ConfigError,
    IncompleteResponse,
    ModelAuthError,
    ModelConnectionError,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    RateLimitError,
    ResponseDone,
    ResponseTooLarge,
    StreamEvent,
    TextDelta,
    redact_url,
)
from stowage.policy import answer_chars, oversized_answer

from ._http1 import (
    Http1Error,
    Http1Pool,
    Http1Response,
    Http1Timeout,
    Http1TooLarge,
    request_head,
)
from ._openai_wire import (
    PURPOSE_HEADER,
    ChatStreamAccumulator,
    ResponsesStreamAccumulator,
    chat_body,
    chat_messages,
    chat_tools,
    context_error,
    is_context_length_error,
    parse_chat_completion,
    parse_responses_response,
    responses_body,
    responses_input,
    responses_tools,
)
from ._retry_headers import parse_retry_after, requested_wait
from ._sse import JsonEventStream

__all__ = [
    "PURPOSE_HEADER",
    "SHARD_CALLS",
    "OpenAIGateway",
    "chat_body",
    "chat_messages",
    "chat_tools",
    "fast_wire_gaps",
    "lean_http_gap",
    "map_openai_error",
    "parse_retry_after",
    "responses_body",
    "responses_input",
    "responses_tools",
]


_log = structlog.get_logger("stowage.gateway")
_SECURITY: Any = {"bearer_auth": True}
_PURPOSE = PURPOSE_HEADER.lower().encode()
SHARD_CALLS = 4
# A character of an answer takes at most 6 bytes in a JSON body (``\u0001``); the slack holds
# the rest of a body: ids, usage, and the tool schemas a Responses object echoes.
_JSON_BYTES_PER_CHAR = 6
_BODY_SLACK = 1024 * 1024

# The private hooks of the SDK the fast wire path calls, exactly as it calls them:
#   FinalRequestOptions.construct(method=, url=, json_data=, headers=[, security=])
#   AsyncOpenAI._build_request(options) -> an httpx Request (url, headers, extensions)
#   AsyncOpenAI._client: the httpx AsyncClient it sends with (``send(request, stream=True)``)
#   AsyncOpenAI._make_status_error_from_response(response) -> openai.APIStatusError
_CLIENT_METHODS = ("_build_request", "_make_status_error_from_response")
_fallback_logged = False


def fast_wire_gaps(sdk: Any = openai) -> tuple[str, ...]:
    """The private hooks of the openai module ``sdk`` that the fast wire path uses and ``sdk``
    lacks, as short descriptions; empty when it has them all."""
    client = getattr(sdk, "AsyncOpenAI", None)
    if not isinstance(client, type):
        return ("AsyncOpenAI",)
    gaps = [f"AsyncOpenAI.{m}" for m in _CLIENT_METHODS if not callable(getattr(client, m, None))]
    options = getattr(getattr(sdk, "_models", None), "FinalRequestOptions", None)
    if not callable(getattr(options, "construct", None)):
        gaps.append("_models.FinalRequestOptions.construct")
    return tuple(gaps)


def _takes_security(sdk: Any = openai) -> bool:
    """Whether the SDK's request options have ``security`` (openai 2.34 and later): then the fast
    path asks for bearer auth only, as the SDK's own chat and responses calls do."""
    options = getattr(getattr(sdk, "_models", None), "FinalRequestOptions", None)
    return "security" in (getattr(options, "model_fields", None) or {})


def _plain(value: Any) -> Any:
    """A typed SDK object (a response, a stream chunk or event) as the plain JSON it came from.

    Raises ``IncompleteResponse`` for anything else, such as the text the SDK returns for an
    answer that is not JSON.
    """
    to_dict = getattr(value, "to_dict", None)
    if not callable(to_dict):
        raise IncompleteResponse(f"the response is not valid JSON: {type(value).__name__}")
    return to_dict(warnings=False)


class _PlainEvents:
    """The SDK's typed ``AsyncStream`` as plain JSON events, used like ``JsonEventStream``: its
    transport failures become ``openai.APIConnectionError`` as there."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @property
    def response(self) -> Any:
        """The HTTP response the stream reads (as ``JsonEventStream.response``)."""
        return getattr(self._stream, "response", None)

    async def __aenter__(self) -> _PlainEvents:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stream.close()

    async def next_events(self) -> list[Any] | None:
        """The next event as a batch of one (as ``JsonEventStream.next_events``), or None at
        the end."""
        try:
            event = await anext(self._stream)
        except StopAsyncIteration:
            return None
        except _BOUNDARY:
            raise
        except Exception as exc:  # the transport's own error classes: a broken stream
            raise openai.APIConnectionError(request=self._stream.response.request) from exc
        return [_plain(event)]


def _public_parameters(client: openai.AsyncOpenAI, wire_api: str) -> frozenset[str] | None:
    """The keyword arguments the public ``create`` of ``wire_api`` takes (None: any).

    Raises ``ConfigError`` if the SDK has no public API for ``wire_api`` (the responses API came
    with openai 1.66).
    """
    if wire_api == "chat":
        endpoint = getattr(getattr(client, "chat", None), "completions", None)
    else:
        endpoint = getattr(client, "responses", None)
    create = getattr(endpoint, "create", None)
    if not callable(create):
        version = getattr(openai, "__version__", "unknown")
        raise ConfigError(f"openai {version} has no {wire_api} API: upgrade the openai package")
    try:
        parameters = inspect.signature(create).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return frozenset(parameters)


def _split_body(
    body: dict[str, Any], parameters: frozenset[str] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``body`` as the keyword arguments of a public ``create`` that takes ``parameters`` (None:
    any), and the rest of it, to be sent as ``extra_body``."""
    if parameters is None:
        return body, {}
    known = {k: v for k, v in body.items() if k in parameters}
    return known, {k: v for k, v in body.items() if k not in parameters}


def map_openai_error(exc: BaseException, *, max_retry_wait: float | None = None) -> ModelError:
    """The ``ModelError`` that stands for an openai/httpx/parse failure ``exc``; a wait the
    server asked for (at most ``max_retry_wait`` seconds) is its ``retry_after``."""
    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return ModelConnectionError(f"cannot reach the model endpoint: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = str(exc.message)
        wait = requested_wait(exc.response.headers, cap=max_retry_wait)
        error: ModelError
        if status == 429:
            error = RateLimitError(message, retry_after=wait)
        elif status in (400, 413, 422) and is_context_length_error(exc.code, message):
            error = context_error(exc.code, message)
        elif status in (401, 403):
            error = ModelAuthError(message)
        elif status >= 500:
            error = ModelConnectionError(message)
            error.retry_after = wait
        else:
            error = ModelResponseError(message)
        return error
    if isinstance(exc, openai.APIError):  # an error event inside a stream, a bad body
        if is_context_length_error(exc.code, str(exc.message)):
            return context_error(exc.code, str(exc.message))
        return ModelResponseError(str(exc.message))
    if isinstance(exc, json.JSONDecodeError):  # orjson's too: a cut or garbled body
        return IncompleteResponse(f"the response is not valid JSON: {exc}")
    return ModelResponseError(f"unusable model response: {type(exc).__name__}: {exc}")


def _locate(error: ModelError, where: str) -> ModelError:
    """``error`` with ``where`` (endpoint and status) appended to its message, once."""
    text = str(error)
    if where not in text:
        error.args = (f"{text} ({where})", *error.args[1:])
    return error


# What a call may raise that is the provider's fault, not ours.
_BOUNDARY = (ModelError, openai.APIError, ValueError, TypeError, KeyError)


class _Wire:
    """One endpoint of one SDK client, as the fast wire path sends to it: the request the SDK
    builds for ``path`` (URL, auth, its headers, timeouts), copied per call with a body, and
    sent through the lean HTTP client (``lean``) or the SDK's own."""

    def __init__(self, client: openai.AsyncOpenAI, path: str, security: Any, lean: bool) -> None:
        """Raises what the SDK raises for a client it cannot build a request for."""
        fields: dict[str, Any] = {"method": "post", "url": path, "json_data": {}, "headers": {}}
        if security is not None:
            fields["security"] = security
        template: Any = client._build_request(
            openai._models.FinalRequestOptions.construct(**fields)
        )
        self._template = template
        self._request_class = type(template)
        self._url = template.url
        self._headers: list[tuple[bytes, bytes]] = [
            (name, value)
            for name, value in template.headers.raw
            if name.lower() not in (b"content-length", b"transfer-encoding")
        ]
        self._extensions = template.extensions
        self._http: Any = client._client
        self._status_error = client._make_status_error_from_response
        # the HTTP library the SDK sends with (httpx, or httpx2 from openai 3): its classes
        self._http_module = sys.modules[type(template).__module__.partition(".")[0]]
        self._timeout_error: type[Exception] = self._http_module.TimeoutException
        #: the lean HTTP/1.1 client's connections, when it sends (else the SDK's client does)
        self.pool: Http1Pool | None = None
        if lean:
            timeouts = template.extensions.get("timeout") or {}
            self.pool = Http1Pool(
                scheme=template.url.scheme,
                host=template.url.host,
                port=template.url.port,
                ssl_context=_tls_context(client),
                connect_timeout=timeouts.get("connect") or 30.0,
                read_timeout=timeouts.get("read") or 120.0,
            )
            # the lean client decodes gzip and deflate, not what else the SDK's may accept
            self._headers = [
                (name, b"gzip, deflate" if name.lower() == b"accept-encoding" else value)
                for name, value in self._headers
            ]
            self._target: bytes = template.url.raw_path
            #: the request head of each purpose, built once
            self._heads: dict[str, bytes] = {}

    async def send(self, body: bytes, purpose: str) -> Any:
        """POST ``body``; returns the response with its body unread (the caller closes it).

        Raises the SDK's ``APIStatusError`` for an error status (its body read),
        ``APITimeoutError`` or ``APIConnectionError`` when the exchange fails.
        """
        if self.pool is not None:
            return await self._send_lean(self.pool, body, purpose)
        request = self._request_class(
            "POST",
            self._url,
            headers=[*self._headers, (_PURPOSE, purpose.encode())],
            content=body,
            extensions=dict(self._extensions),
        )
        try:
            response = await self._http.send(request, stream=True)
        except self._timeout_error as exc:
            raise openai.APITimeoutError(request=request) from exc
        except Exception as exc:  # the transport's own error classes
            raise openai.APIConnectionError(request=request) from exc
        if response.status_code >= 400:
            try:
                await response.aread()
            except Exception as exc:  # cut while the error body was read
                raise openai.APIConnectionError(request=request) from exc
            finally:
                await response.aclose()
            raise self._status_error(response)
        return response

    async def _send_lean(self, pool: Http1Pool, body: bytes, purpose: str) -> Http1Response:
        request = self._template
        head = self._heads.get(purpose)
        if head is None:
            head = request_head(self._target, [*self._headers, (_PURPOSE, purpose.encode())])
            self._heads[purpose] = head
        try:
            response = await pool.post(head, body, request)
        except Http1Timeout as exc:
            raise openai.APITimeoutError(request=request) from exc
        except Http1Error as exc:
            raise openai.APIConnectionError(
                message=f"Connection error: {exc}", request=request
            ) from exc
        if response.status_code >= 400:
            try:
                content = await response.aread()
            except Http1Error as exc:  # cut while the error body was read
                raise openai.APIConnectionError(
                    message=f"Connection error: {exc}", request=request
                ) from exc
            finally:
                await response.aclose()
            # the SDK's error class, made from a response of its HTTP library (the body is
            # decoded already: no framing or encoding headers)
            headers = [
                (name, value) for name, value in response.headers if name.lower() not in _FRAMING
            ]
            raise self._status_error(
                self._http_module.Response(
                    response.status_code, headers=headers, content=content, request=request
                )
            )
        return response

    async def read(self, response: Any, *, max_bytes: int) -> bytes:
        """The whole body of ``response``, which is closed after.

        Raises ``APIConnectionError`` if the body is cut, ``ResponseTooLarge`` as soon as it
        passes ``max_bytes`` (the rest is never read).
        """
        try:
            if isinstance(response, Http1Response):
                body: bytes = await response.aread(max_bytes=max_bytes)
            else:
                body = await _read_capped(response, max_bytes)
        except Http1TooLarge as exc:
            raise _too_large_body(exc.size, max_bytes) from None
        except ResponseTooLarge:
            raise
        except (self._timeout_error, Http1Timeout) as exc:
            raise openai.APITimeoutError(request=response.request) from exc
        except Http1Error as exc:
            raise openai.APIConnectionError(
                message=f"Connection error: {exc}", request=response.request
            ) from exc
        except Exception as exc:  # the SDK's HTTP library's own error classes
            raise openai.APIConnectionError(request=response.request) from exc
        finally:
            await response.aclose()
        return body

    async def aclose(self) -> None:
        """Close the lean client's idle connections."""
        if self.pool is not None:
            await self.pool.aclose()


_FRAMING = (b"content-length", b"transfer-encoding", b"content-encoding")


async def _read_capped(response: Any, max_bytes: int) -> bytes:
    """The body of a response of the SDK's HTTP library, read a chunk at a time. Raises
    ``ResponseTooLarge`` as soon as it passes ``max_bytes``, and what the library raises."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise _too_large_body(size, max_bytes)
    return b"".join(parts)


def _too_large_body(size: int, max_bytes: int) -> ResponseTooLarge:
    return ResponseTooLarge(
        f"the response body passed {max_bytes:,} bytes ({size:,} read) before it ended, more "
        "than an answer within max_answer_chars can take"
    )


class OpenAIGateway:
    """A ``ModelGateway`` over ``openai.AsyncOpenAI``, on the chat or the responses wire API."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        wire_api: Literal["chat", "responses"],
        timeout: float = 120,
        fast_wire: bool | None = None,
        stream_idle_timeout: float = 60.0,
        request_deadline: float = 600.0,
        max_retry_wait: float = 60.0,
        lean_http: bool | None = None,
        max_answer_chars: int = 1_000_000,
    ) -> None:
        """``fast_wire``: None takes the fast wire path when the SDK has its hooks (see
        ``fast_wire_gaps``) and the public API otherwise, False always the public API, True
        always the fast path. ``stream_idle_timeout``: seconds a stream may go without an
        event; ``request_deadline``: seconds a request may take in all; ``max_retry_wait``:
        the most a wait the server asks for is taken at. ``lean_http``: whether the fast wire
        path sends through the lean HTTP/1.1 client (``_http1``) rather than the SDK's HTTP
        client; None: when ``lean_http_gap`` finds nothing against it. ``max_answer_chars``:
        the most characters of text and call arguments one answer may carry; reading stops
        as soon as a response passes it (``ResponseTooLarge``).

        Raises ``ConfigError`` if no API key is given or in ``OPENAI_API_KEY``, ``wire_api`` is
        unknown, or ``fast_wire`` is True and the SDK lacks a hook of the fast path.
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
        self._client_options: dict[str, Any] = {
            "api_key": key,
            "base_url": base_url or os.environ.get("OPENAI_BASE_URL") or None,
            "timeout": timeout,
            # the gateway sends each request once: retries are the caller's (the actors retry
            # with jitter, Retry-After honoured and logged), never the SDK's as well
            "max_retries": 0,
        }
        try:
            self._client = openai.AsyncOpenAI(**self._client_options)
        except openai.OpenAIError as exc:
            raise ConfigError(f"cannot configure the OpenAI client: {exc}") from exc
        self.stream_idle_timeout = stream_idle_timeout
        self.request_deadline = request_deadline
        self.max_retry_wait = max_retry_wait
        self.max_answer_chars = max_answer_chars
        #: the most bytes a body, or one event of a stream, is read to
        self.max_body_bytes = _JSON_BYTES_PER_CHAR * max_answer_chars + _BODY_SLACK
        #: the endpoint as errors and logs name it: never with its credentials
        self.url = redact_url(str(self._client.base_url).rstrip("/") + self._path) or ""
        self._shards: list[openai.AsyncOpenAI] = [self._client]
        self._in_flight: list[int] = [0]
        gaps = fast_wire_gaps() if fast_wire is not False else ()
        if gaps and fast_wire:
            raise ConfigError(f"the openai SDK lacks the fast wire path's {', '.join(gaps)}")
        #: whether calls take the fast wire path (else the SDK's public API)
        self.fast_wire = fast_wire is not False and not gaps
        if gaps:
            _log_fallback(gaps)
        self._security = _SECURITY if self.fast_wire and _takes_security() else None
        gap = lean_http_gap(self._client) if self.fast_wire and lean_http is not False else None
        if gap is not None and lean_http:
            raise ConfigError(f"the lean HTTP client cannot be used: {gap}")
        #: whether the fast wire path sends through the lean HTTP client (one pool of
        #: connections, no shards) rather than the SDK's HTTP client
        self.lean_http = self.fast_wire and lean_http is not False and gap is None
        if self.fast_wire and lean_http is None and gap is not None:
            _log.info("lean_http_off", reason=gap, url=self.url, using="the SDK's HTTP client")
        self._wires: list[_Wire] = []
        if self.fast_wire:
            self._wires.append(self._wire(self._client))
        self._public_parameters: frozenset[str] | None = None
        if not self.fast_wire:
            self._public_parameters = _public_parameters(self._client, wire_api)

    def _wire(self, client: openai.AsyncOpenAI) -> _Wire:
        try:
            return _Wire(client, self._path, self._security, self.lean_http)
        except (openai.OpenAIError, TypeError, ValueError) as exc:
            raise ConfigError(f"cannot configure the OpenAI client: {exc}") from exc

    def _take_shard(self) -> int:
        """The least busy shard; a new one when every shard has ``SHARD_CALLS`` in flight
        (the lean HTTP client has one)."""
        in_flight = self._in_flight
        if self.lean_http:  # one pool, which never scans its connections
            in_flight[0] += 1
            return 0
        index = min(range(len(in_flight)), key=in_flight.__getitem__)
        if in_flight[index] >= SHARD_CALLS:
            client = self._shard_client()
            if self.fast_wire:
                self._wires.append(self._wire(client))
            self._shards.append(client)
            in_flight.append(0)
            index = len(in_flight) - 1
        in_flight[index] += 1
        return index

    def _shard_client(self) -> openai.AsyncOpenAI:
        """One more client like the first, on its own connection pool; it shares the first
        one's TLS context (building one loads the CA store: ~20 ms of CPU per shard)."""
        context = _tls_context(self._client)
        try:
            http = openai.DefaultAsyncHttpxClient(verify=context) if context is not None else None
        except (TypeError, ValueError):  # an SDK whose client takes no such context
            http = None  # the SDK's default client, with its own
        return openai.AsyncOpenAI(**self._client_options, http_client=http)

    def _body(self, request: ModelRequest, *, stream: bool) -> bytes:
        build = chat_body if self.wire_api == "chat" else responses_body
        return orjson.dumps(build(request, stream=stream))

    async def _public_call(
        self, client: openai.AsyncOpenAI, request: ModelRequest, *, stream: bool
    ) -> Any:
        """The SDK's typed result of ``create`` on the public API: a response or a stream."""
        build = chat_body if self.wire_api == "chat" else responses_body
        known, extra = _split_body(build(request, stream=stream), self._public_parameters)
        endpoint: Any = client.chat.completions if self.wire_api == "chat" else client.responses
        return await endpoint.create(
            **known,
            extra_headers={PURPOSE_HEADER: request.purpose},
            extra_body=extra or None,
        )

    def _parse(self, data: Any) -> ModelResponse:
        if self.wire_api == "chat":
            return parse_chat_completion(data)
        return parse_responses_response(data)

    def _raise(
        self, exc: BaseException, request: ModelRequest, *, status: int | None = None
    ) -> NoReturn:
        """Raise the ``ModelError`` for ``exc``, naming the endpoint and the HTTP status
        (``status``: the stream's, for a failure after its headers came)."""
        error = map_openai_error(exc, max_retry_wait=self.max_retry_wait)
        status = getattr(exc, "status_code", None) or status
        where = f"POST {self.url}" + (f", HTTP {status}" if status else ", no HTTP status")
        _locate(error, where)
        _log.warning(
            "model_call_failed",
            wire_api=self.wire_api,
            model=request.model,
            purpose=request.purpose,
            error=type(error).__name__,
            status=status,
            url=self.url,
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
        left = deadline - anyio.current_time()
        return (
            (self.stream_idle_timeout, True)
            if self.stream_idle_timeout < left
            else (max(0.0, left), False)
        )

    async def create(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call.

        Raises ``ModelConnectionError``, ``RateLimitError``, ``ContextLengthExceeded``,
        ``ModelAuthError`` or ``ModelResponseError``.
        """
        shard = self._take_shard()
        client = self._shards[shard]
        raw: Any
        try:
            with anyio.fail_after(self.request_deadline):
                if not self.fast_wire:
                    raw = await self._public_call(client, request, stream=False)
                else:
                    wire = self._wires[shard]
                    raw = await wire.read(
                        await wire.send(self._body(request, stream=False), request.purpose),
                        max_bytes=self.max_body_bytes,
                    )
        except _BOUNDARY as exc:
            self._raise(exc, request)
        except TimeoutError:
            self._timed_out(request, idle=False, status=None)
        finally:
            self._in_flight[shard] -= 1
        try:
            response = self._parse(orjson.loads(raw) if self.fast_wire else _plain(raw))
            self._check_size(answer_chars(response))
        except _BOUNDARY as exc:  # the body came (HTTP 200) but cannot be used
            self._raise(exc, request, status=200)
        return response

    def _check_size(self, chars: int) -> None:
        """Raises ``ResponseTooLarge`` when an answer of ``chars`` characters (text and call
        arguments, or as many as were read) passes ``max_answer_chars``."""
        reason = oversized_answer(chars, self.max_answer_chars)
        if reason is not None:
            raise ResponseTooLarge(reason)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response: ``TextDelta`` pieces, then exactly one ``ResponseDone``.

        Raises what ``create`` raises, at the point of failure in the stream.
        """
        accumulator: ChatStreamAccumulator | ResponsesStreamAccumulator = (
            ChatStreamAccumulator() if self.wire_api == "chat" else ResponsesStreamAccumulator()
        )
        shard = self._take_shard()
        client = self._shards[shard]
        events: JsonEventStream | _PlainEvents
        deadline = anyio.current_time() + self.request_deadline
        status: int | None = None
        try:
            limit, idle = self._wait_limit(deadline)
            try:
                with anyio.fail_after(limit):
                    if self.fast_wire:
                        http_response = await self._wires[shard].send(
                            self._body(request, stream=True), request.purpose
                        )
                        events = JsonEventStream(http_response, max_event_bytes=self.max_body_bytes)
                    else:
                        events = _PlainEvents(await self._public_call(client, request, stream=True))
            except _BOUNDARY as exc:
                self._raise(exc, request)
            except TimeoutError:
                self._timed_out(request, idle=idle, status=None)
            status = _status(events)
            async with events:
                while True:
                    # one read at a time under the clock, never a yield: keep-alives are
                    # skipped inside the read, so only a real event resets it
                    limit, idle = self._wait_limit(deadline)
                    try:
                        with anyio.fail_after(limit):
                            batch = await events.next_events()
                        texts = [accumulator.feed(event) for event in batch or ()]
                        # stop reading once the answer passes the cap: it is never held
                        self._check_size(accumulator.answer_chars)
                    except _BOUNDARY as exc:
                        self._raise(exc, request, status=status)
                    except TimeoutError:
                        self._timed_out(request, idle=idle, status=status)
                    if batch is None:
                        break
                    text = "".join(texts)
                    if text:
                        yield TextDelta(text=text)
        finally:
            self._in_flight[shard] -= 1
        try:
            response = accumulator.finish()
        except ModelError as exc:
            self._raise(exc, request, status=status)
        yield ResponseDone(response=response)

    async def aclose(self) -> None:
        """Close the connections of every shard."""
        for wire in self._wires:
            await wire.aclose()
        for client in self._shards:
            await client.close()


def _log_fallback(gaps: tuple[str, ...]) -> None:
    """Warn, once per process, that calls take the public API."""
    global _fallback_logged
    if _fallback_logged:
        return
    _fallback_logged = True
    _log.warning(
        "openai_fast_wire_unavailable",
        openai_version=getattr(openai, "__version__", "unknown"),
        missing=list(gaps),
        using="the public API (chat.completions.create / responses.create)",
    )


def lean_http_gap(client: openai.AsyncOpenAI, environ: Any = None) -> str | None:
    """Why the lean HTTP client cannot send for ``client``, or None when it can: the
    ``STOWAGE_HTTP_CLIENT=sdk`` setting, a proxy in the environment for its endpoint (the SDK's
    client honours ``HTTPS_PROXY`` and the like; the lean one speaks to the endpoint directly),
    a scheme other than http(s), credentials in the URL, or an https endpoint whose TLS context
    (the SDK's, with its CA store) cannot be found.

    Raises ``ConfigError`` if ``STOWAGE_HTTP_CLIENT`` is neither ``lean`` nor ``sdk``.
    """
    env = os.environ if environ is None else environ
    choice = env.get("STOWAGE_HTTP_CLIENT", "").strip().lower()
    if choice == "sdk":
        return "STOWAGE_HTTP_CLIENT=sdk"
    if choice not in ("", "lean"):
        raise ConfigError(f"STOWAGE_HTTP_CLIENT must be 'lean' or 'sdk', got {choice!r}")
    url = client.base_url
    if url.scheme not in ("http", "https"):
        return f"the endpoint's scheme is {url.scheme!r}"
    if url.userinfo:  # the SDK's HTTP client turns them into basic auth
        return "the endpoint's URL carries credentials"
    proxies = {k.lower(): v for k, v in env.items() if k.lower().endswith("_proxy") and v}
    proxy = proxies.get(f"{url.scheme}_proxy") or proxies.get("all_proxy")
    if proxy and not _bypassed(url.host, proxies.get("no_proxy", "")):
        return f"a proxy is set for {url.scheme} ({url.scheme.upper()}_PROXY or ALL_PROXY)"
    if url.scheme == "https" and _tls_context(client) is None:
        return "the SDK's TLS context was not found"
    return None


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` (``no_proxy``) exempts ``host`` from the proxy."""
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        entry = entry.removeprefix(".")
        if entry and (host.lower() == entry or host.lower().endswith("." + entry)):
            return True
    return False


def _tls_context(client: openai.AsyncOpenAI) -> ssl.SSLContext | None:
    """The TLS context of ``client``'s connection pool, if it can be found (private parts of
    the HTTP library: None when they differ)."""
    pool = getattr(getattr(getattr(client, "_client", None), "_transport", None), "_pool", None)
    context = getattr(pool, "_ssl_context", None)
    return context if isinstance(context, ssl.SSLContext) else None


def _status(events: JsonEventStream | _PlainEvents) -> int | None:
    """The HTTP status of a stream's response, if it can be read."""
    status = getattr(events.response, "status_code", None)
    return status if isinstance(status, int) else None
