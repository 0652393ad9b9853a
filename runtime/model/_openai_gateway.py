"""The OpenAI(-compatible) model gateway: one ``AsyncOpenAI`` client, two wire APIs.

Bodies are built by the pure functions of ``runtime._openai_wire`` and sent through the client's
low-level ``post`` (auth, retries with Retry-After, timeouts and error classes stay the SDK's);
the answer is parsed as plain JSON with orjson. That skips the SDK's typed request
transformation and model construction, which are most of its CPU cost. Every openai/httpx
failure is mapped here to a ``ModelError``.

Calls are spread over shards of at most ``SHARD_CALLS`` calls in flight, one client (and one
connection pool) each, opened as concurrency grows: the HTTP pool checks every idle connection
of its pool on each request, so one pool serving hundreds of sessions costs more CPU per call
the more sessions there are, and small pools keep that cost flat.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from email.utils import parsedate_to_datetime
from typing import Any, Literal, NoReturn

import openai
import orjson
import structlog
from stowage.core import (
    ConfigError,
    ContextLengthExceeded,
    ModelAuthError,
    ModelConnectionError,
    ModelError,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    RateLimitError,
    ResponseDone,
    Settings,
    StreamEvent,
    TextDelta,
)

from ._openai_wire import (
    ChatStreamAccumulator,
    ResponsesStreamAccumulator,
    chat_body,
    chat_messages,
    chat_tools,
    is_context_length_error,
    parse_chat_completion,
    parse_responses_response,
    responses_body,
    responses_input,
    responses_tools,
)
from ._sse import JsonEventStream

__all__ = [
    "PURPOSE_HEADER",
    "SHARD_CALLS",
    "OpenAIGateway",
    "chat_body",
    "chat_messages",
    "chat_tools",
    "make_gateway",
    "map_openai_error",
    "parse_retry_after",
    "responses_body",
    "responses_input",
    "responses_tools",
]

# Tells a test server whether a request is a summary; real providers ignore unknown headers.
PURPOSE_HEADER = "x-stowage-purpose"

_log = structlog.get_logger("stowage.gateway")
_SECURITY: Any = {"bearer_auth": True}
SHARD_CALLS = 16


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta seconds or an HTTP date), or None."""
    if value is None or not value.strip():
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    return parse_retry_after(headers.get("retry-after"))


def map_openai_error(exc: BaseException) -> ModelError:
    """The ``ModelError`` that stands for an openai/httpx/parse failure ``exc``."""
    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return ModelConnectionError(f"cannot reach the model endpoint: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = str(exc.message)
        if status == 429:
            return RateLimitError(message, retry_after=_retry_after(exc))
        if status in (400, 413, 422) and is_context_length_error(exc.code, message):
            return ContextLengthExceeded(message)
        if status in (401, 403):
            return ModelAuthError(message)
        if status >= 500:
            return ModelConnectionError(message)
        return ModelResponseError(message)
    if isinstance(exc, openai.APIError):  # an error event inside a stream, a bad body
        if is_context_length_error(exc.code, str(exc.message)):
            return ContextLengthExceeded(str(exc.message))
        return ModelResponseError(str(exc.message))
    return ModelResponseError(f"unusable model response: {type(exc).__name__}: {exc}")


# What a call may raise that is the provider's fault, not ours.
_BOUNDARY = (ModelError, openai.APIError, ValueError, TypeError, KeyError)


class OpenAIGateway:
    """A ``ModelGateway`` over ``openai.AsyncOpenAI``, on the chat or the responses wire API."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        wire_api: Literal["chat", "responses"],
        timeout: float = 120,
        max_retries: int = 2,
    ) -> None:
        """Raises ``ConfigError`` if no API key is given or in ``OPENAI_API_KEY``, or
        ``wire_api`` is unknown."""
        if wire_api not in ("chat", "responses"):
            raise ConfigError(f"wire_api must be 'chat' or 'responses', got {wire_api!r}")
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            raise ConfigError(
                "no API key for the model endpoint: pass --api-key or set OPENAI_API_KEY"
            )
        self.wire_api = wire_api
        self._path = "/chat/completions" if wire_api == "chat" else "/responses"
        self._client_options: dict[str, Any] = {
            "api_key": key,
            "base_url": base_url or os.environ.get("OPENAI_BASE_URL") or None,
            "timeout": timeout,
            "max_retries": max_retries,
        }
        try:
            self._client = openai.AsyncOpenAI(**self._client_options)
        except openai.OpenAIError as exc:
            raise ConfigError(f"cannot configure the OpenAI client: {exc}") from exc
        self._shards: list[openai.AsyncOpenAI] = [self._client]
        self._in_flight: list[int] = [0]

    def _take_shard(self) -> int:
        """The least busy shard; a new one when every shard has ``SHARD_CALLS`` in flight."""
        in_flight = self._in_flight
        index = min(range(len(in_flight)), key=in_flight.__getitem__)
        if in_flight[index] >= SHARD_CALLS:
            self._shards.append(openai.AsyncOpenAI(**self._client_options))
            in_flight.append(0)
            index = len(in_flight) - 1
        in_flight[index] += 1
        return index

    def _body(self, request: ModelRequest, *, stream: bool) -> bytes:
        build = chat_body if self.wire_api == "chat" else responses_body
        return orjson.dumps(build(request, stream=stream))

    def _options(self, request: ModelRequest) -> Any:
        return {"security": _SECURITY, "headers": {PURPOSE_HEADER: request.purpose}}

    def _raise(self, exc: BaseException, request: ModelRequest) -> NoReturn:
        error = map_openai_error(exc)
        _log.warning(
            "model_call_failed",
            wire_api=self.wire_api,
            model=request.model,
            purpose=request.purpose,
            error=type(error).__name__,
            status=getattr(exc, "status_code", None),
        )
        if error is exc:
            raise error
        raise error from exc

    async def create(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call.

        Raises ``ModelConnectionError``, ``RateLimitError``, ``ContextLengthExceeded``,
        ``ModelAuthError`` or ``ModelResponseError``.
        """
        shard = self._take_shard()
        try:
            raw = await self._shards[shard].post(
                self._path,
                cast_to=bytes,
                content=self._body(request, stream=False),
                options=self._options(request),
            )
            data = orjson.loads(raw)
            if self.wire_api == "chat":
                return parse_chat_completion(data)
            return parse_responses_response(data)
        except _BOUNDARY as exc:
            self._raise(exc, request)
        finally:
            self._in_flight[shard] -= 1

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response: ``TextDelta`` pieces, then exactly one ``ResponseDone``.

        Raises what ``create`` raises, at the point of failure in the stream.
        """
        accumulator: ChatStreamAccumulator | ResponsesStreamAccumulator = (
            ChatStreamAccumulator() if self.wire_api == "chat" else ResponsesStreamAccumulator()
        )
        shard = self._take_shard()
        try:
            try:
                events = await self._shards[shard].post(
                    self._path,
                    cast_to=object,
                    content=self._body(request, stream=True),
                    options=self._options(request),
                    stream=True,
                    stream_cls=JsonEventStream,
                )
            except _BOUNDARY as exc:
                self._raise(exc, request)
            async with events:
                iterator = aiter(events)
                while True:
                    try:
                        event = await anext(iterator)
                        text = accumulator.feed(event)
                    except StopAsyncIteration:
                        break
                    except _BOUNDARY as exc:
                        self._raise(exc, request)
                    if text:
                        yield TextDelta(text=text)
        finally:
            self._in_flight[shard] -= 1
        try:
            response = accumulator.finish()
        except ModelError as exc:
            self._raise(exc, request)
        yield ResponseDone(response=response)

    async def aclose(self) -> None:
        """Close the connections of every shard."""
        for client in self._shards:
            await client.close()


def make_gateway(settings: Settings) -> ModelGateway:
    """The gateway ``settings`` ask for: ``ScriptedModel`` for model ``scripted``.

    Raises ``ConfigError`` when an OpenAI gateway has no API key.
    """
    if settings.model == "scripted":
        from ._scripted import ScriptedModel

        return ScriptedModel()
    return OpenAIGateway(
        base_url=settings.base_url,
        api_key=settings.api_key,
        wire_api=settings.wire_api,
        timeout=settings.request_timeout,
        # the runtime retries itself (jittered, Retry-After honoured, logged): not twice
        max_retries=0,
    )
