"""The Anthropic (Claude) model gateway: the Messages API, on aiohttp or on the anthropic SDK.

Bodies are built by ``_anthropic_wire`` (system on top, tool calls as content blocks, prompt
cache breakpoints where the prefix is stable) and POSTed to ``base_url + "/v1/messages"`` with
``x-api-key`` and ``anthropic-version``: through ``_aiohttp_transport`` by default, or
(``http_client="sdk"``) through the public ``messages.create`` of the official SDK, an extra.
A base URL that ends in ``/v1`` (as OpenAI-style URLs do) is taken without it. The key is the
settings' ``api_key``, else ``ANTHROPIC_API_KEY``; the endpoint ``base_url``, else
``ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com``.

Errors map as on the OpenAI gateway (``_http_errors``): a 400 "prompt is too long: N tokens >
M maximum" is ``ContextLengthExceeded`` with both figures, 429 ``RateLimitError`` with the
wait from ``retry-after`` or the ``anthropic-ratelimit-*-reset`` of a used-up limit, 529
(overloaded) and 5xx ``ModelConnectionError``, retried by the caller; an ``error`` event in a
stream by its type (``event_error``). Time and size are bounded as there: a stream idle for
``stream_idle_timeout``, a request past ``request_deadline``, an answer past
``max_answer_chars``.
"""

from __future__ import annotations

import os
from typing import Any

from stowage._version import __version__
from stowage.core import ConfigError, ModelError, ModelRequest, ModelResponse, redact_url

from ._aiohttp_transport import AiohttpTransport
from ._anthropic_sdk import AnthropicEvents, AnthropicSdkClient, map_anthropic_error, plain_message
from ._anthropic_wire import (
    ANTHROPIC_VERSION,
    MessagesStreamAccumulator,
    event_error,
    messages_body,
    parse_message,
)
from ._endpoint_url import post_url
from ._gateway_calls import CALL_ERRORS, Events, HttpModelCalls, StreamAccumulator, body_bytes_cap
from ._http_errors import EventError, model_error
from ._openai_gateway import choose_http_client
from ._openai_wire import PURPOSE_HEADER

__all__ = ["ANTHROPIC_BASE_URL", "AnthropicGateway"]

#: the endpoint when neither ``base_url`` nor ``ANTHROPIC_BASE_URL`` names one
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
_PATH = "/v1/messages"


class AnthropicGateway(HttpModelCalls):
    """A ``ModelGateway`` for Anthropic's Messages API, through aiohttp or the anthropic SDK."""

    wire_api = "anthropic"

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float = 120,
        stream_idle_timeout: float = 60.0,
        request_deadline: float = 600.0,
        max_retry_wait: float = 60.0,
        max_answer_chars: int = 1_000_000,
        http_client: str | None = None,
    ) -> None:
        """The arguments mean what they mean for ``OpenAIGateway``."""
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ConfigError(
                "no API key for the Anthropic endpoint: pass --api-key, set STOWAGE_API_KEY or "
                "ANTHROPIC_API_KEY, or give the model profile an api_key in stowage.toml"
            )
        base = (base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_BASE_URL).rstrip("/")
        base = base.removesuffix("/v1")
        self.http_client = choose_http_client(http_client)
        self.stream_idle_timeout = stream_idle_timeout
        self.request_deadline = request_deadline
        self.max_retry_wait = max_retry_wait
        self.max_answer_chars = max_answer_chars
        #: the most bytes a body, or one event of a stream, is read to
        self.max_body_bytes = body_bytes_cap(max_answer_chars)
        url, basic = post_url(base, _PATH)
        #: the endpoint as errors and logs name it: never with its credentials
        self.url = redact_url(base + _PATH) or ""
        self._boundary = CALL_ERRORS
        self._sdk: AnthropicSdkClient | None = None
        self._transport: AiohttpTransport | None = None
        if self.http_client == "sdk":
            self._sdk = AnthropicSdkClient(api_key=key, base_url=base, timeout=timeout)
            self._boundary = (*CALL_ERRORS, *self._sdk.errors)
        else:
            headers = {
                "x-api-key": key,
                "anthropic-version": ANTHROPIC_VERSION,
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": f"stowage/{__version__}",
            }
            if basic is not None:  # credentials in the URL, for a proxy in front
                headers["Authorization"] = basic
            self._transport = AiohttpTransport(
                url,
                headers,
                purpose_header=PURPOSE_HEADER,
                connect_timeout=timeout,
                read_timeout=timeout,
            )

    def _map(self, exc: BaseException) -> ModelError:
        if isinstance(exc, EventError):
            return event_error(exc.error)
        if self._sdk is not None and not isinstance(exc, ModelError):
            return map_anthropic_error(exc, max_retry_wait=self.max_retry_wait)
        return model_error(exc, max_retry_wait=self.max_retry_wait)

    def _request_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return messages_body(request, stream=stream)

    def _parse(self, data: Any) -> ModelResponse:
        return parse_message(data)

    def _sdk_data(self, raw: Any) -> Any:
        return plain_message(raw)

    def _sdk_events(self, raw: Any) -> Events:
        return AnthropicEvents(raw)

    def _new_accumulator(self) -> StreamAccumulator:
        return MessagesStreamAccumulator()
