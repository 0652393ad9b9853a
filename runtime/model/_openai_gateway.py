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
endpoint fails in bounded time and is retried. Those clocks (``_call_clock``) cancel through
an ``asyncio.timeout`` (aiohttp runs on asyncio only, and it costs a fraction of a cancel
scope); the socket's silence is aiohttp's read timeout.
Every error names the endpoint (its URL redacted) and the HTTP status, and carries the
longest wait the server asked for.

Size is bounded too: an answer whose text and call arguments pass ``max_answer_chars`` is
``ResponseTooLarge``, raised as soon as a stream's deltas pass it, and a body (or one event of
a stream) is not read past ``body_bytes_cap`` bytes (six a character of the cap plus a
slack) (the most such an answer can take as JSON, with room for the rest of the
body): an endpoint that streams 30 MB is cut off at the cap, never held. On the SDK path the
SDK reads each event and body itself, so there only the parsed answer is checked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import orjson
from stowage._version import __version__
from stowage.core import (
    ConfigError,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ProviderCompaction,
    redact_url,
)

from ._aiohttp_transport import AiohttpTransport
from ._endpoint_url import post_url
from ._gateway_calls import CALL_ERRORS, Events, HttpModelCalls, StreamAccumulator, body_bytes_cap
from ._http_errors import model_error
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

# OpenAI's provider-native compaction, beside ``/responses``
_COMPACT_PATH = "/responses/compact"


def choose_http_client(http_client: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``http_client`` if given, else ``STOWAGE_HTTP_CLIENT`` (``lean``: aiohttp), else aiohttp."""
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


class OpenAIGateway(HttpModelCalls):
    """A ``ModelGateway`` for an OpenAI-compatible endpoint, chat or responses wire API."""

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
        """The bounds are the settings of those names; ``http_client``: ``aiohttp`` or ``sdk``."""
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
        self.max_body_bytes = body_bytes_cap(max_answer_chars)
        base = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self._boundary = CALL_ERRORS
        self._sdk: SdkClient | None = None
        self._transport: AiohttpTransport | None = None
        if self.http_client == "sdk":
            self._sdk = SdkClient(api_key=key, base_url=base, timeout=timeout, wire_api=wire_api)
            self._boundary = (*CALL_ERRORS, *self._sdk.errors)
            base = self._sdk.base_url
        url, basic = post_url(base, self._path)
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
                    post_url(base, _COMPACT_PATH)[0],
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

    def _request_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return self._build(request, stream=stream)

    def _parse(self, data: Any) -> ModelResponse:
        return self._parse_body(data)

    def _sdk_data(self, raw: Any) -> Any:
        return plain(raw)

    def _sdk_events(self, raw: Any) -> Events:
        return PlainEvents(raw)

    def _new_accumulator(self) -> StreamAccumulator:
        if self.wire_api == "chat":
            return ChatStreamAccumulator()
        return ResponsesStreamAccumulator()

    def _map(self, exc: BaseException) -> ModelError:
        if self._sdk is not None and not isinstance(exc, ModelError):
            return map_openai_error(exc, max_retry_wait=self.max_retry_wait)
        return model_error(exc, max_retry_wait=self.max_retry_wait)

    async def compact(self, request: ModelRequest) -> ProviderCompaction:
        """Compact ``request.input`` with ``POST /responses/compact``: the item it answers."""
        if self.wire_api != "responses":
            raise ModelResponseError(
                "provider compaction needs the responses wire API; this gateway speaks chat"
            )
        sdk_send = None if self._sdk is None else self._sdk.compact
        raw = await self._exchange(
            request, compact_body(request), self._compactor, sdk_send, url=self.compact_url
        )
        try:
            data = orjson.loads(raw)
            compaction = parse_compaction(data, covered=len(request.input))
        except self._boundary as exc:  # the body came (HTTP 200) but cannot be used
            self._raise(exc, request, status=200, url=self.compact_url)
        return compaction

    async def aclose(self) -> None:
        """Close the connections."""
        if self._compactor is not None:
            await self._compactor.aclose()
        await super().aclose()
