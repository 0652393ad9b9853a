"""One model call over HTTP, bounded in time and size, whatever the wire: what the OpenAI and the
Anthropic gateways share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, NoReturn, Protocol

import orjson
import structlog
from stowage.core import (
    ModelConnectionError,
    ModelError,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    ResponseTooLarge,
    StreamEvent,
    TextDelta,
)
from stowage.policy import answer_chars, oversized_answer

from ._aiohttp_transport import AiohttpTransport
from ._call_clock import CallClock
from ._endpoint_url import locate_error
from ._http_errors import BodyTooLarge, EventError, HttpStatusError, TransportError
from ._sse import JsonEventStream

__all__ = [
    "CALL_ERRORS",
    "Events",
    "HttpModelCalls",
    "SdkCalls",
    "StreamAccumulator",
    "body_bytes_cap",
]

_log = structlog.get_logger("stowage.gateway")
# A character of an answer takes at most 6 bytes in a JSON body (``\u0001``); the slack holds
# the rest of a body: ids, usage, and the tool schemas a Responses object echoes.
_JSON_BYTES_PER_CHAR = 6
_BODY_SLACK = 1024 * 1024
#: what a call may raise that is the provider's fault, not ours (an SDK path adds its own)
CALL_ERRORS: tuple[type[Exception], ...] = (
    ModelError,
    HttpStatusError,
    TransportError,
    EventError,
    ValueError,
    TypeError,
    KeyError,
)


def body_bytes_cap(max_answer_chars: int) -> int:
    """The most bytes a body, or one stream event, is read to for ``max_answer_chars``."""
    return _JSON_BYTES_PER_CHAR * max_answer_chars + _BODY_SLACK


class StreamAccumulator(Protocol):
    """A wire's fold of stream events into one answer."""

    @property
    def answer_chars(self) -> int:
        """Characters of text and call arguments folded so far."""
        ...

    def feed(self, event: Any) -> str:
        """Fold one event; the text it adds."""
        ...

    def finish(self) -> ModelResponse:
        """The whole answer. Raises ``ModelError`` for a stream that ended short."""
        ...


class Events(Protocol):
    """The events of one streamed answer, read a batch at a time (None: the end)."""

    status: int | None

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    async def next_events(self) -> list[Any] | None: ...


class SdkCalls(Protocol):
    """A provider SDK's client, called through its public API only."""

    async def create(self, body: dict[str, Any], purpose: str) -> Any: ...

    async def aclose(self) -> None: ...


def too_large_body(size: int, max_bytes: int) -> ResponseTooLarge:
    """The error for a body that passed ``max_bytes`` (``size`` read) before it ended."""
    return ResponseTooLarge(
        f"the response body passed {max_bytes:,} bytes ({size:,} read) before it ended, more "
        "than an answer within max_answer_chars can take"
    )


class HttpModelCalls(ABC):
    """``create`` and ``stream`` over aiohttp (``_transport``) or an SDK (``_sdk``)."""

    wire_api: str
    #: the endpoint as errors and logs name it: never with its credentials
    url: str
    stream_idle_timeout: float
    request_deadline: float
    max_retry_wait: float
    max_answer_chars: int
    #: the most bytes a body, or one event of a stream, is read to
    max_body_bytes: int
    _boundary: tuple[type[BaseException], ...]
    _transport: AiohttpTransport | None
    _sdk: SdkCalls | None

    # the wire's parts -------------------------------------------------------------------------

    @abstractmethod
    def _request_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]: ...

    @abstractmethod
    def _parse(self, data: Any) -> ModelResponse: ...

    @abstractmethod
    def _sdk_data(self, raw: Any) -> Any:
        """The plain JSON of the SDK's typed answer."""
        ...

    @abstractmethod
    def _sdk_events(self, raw: Any) -> Events:
        """The SDK's typed stream as plain JSON events."""
        ...

    @abstractmethod
    def _new_accumulator(self) -> StreamAccumulator: ...

    @abstractmethod
    def _map(self, exc: BaseException) -> ModelError: ...

    # shared -----------------------------------------------------------------------------------

    def _raise(
        self,
        exc: BaseException,
        request: ModelRequest,
        *,
        status: int | None = None,
        url: str | None = None,
    ) -> NoReturn:
        """Raise the ``ModelError`` for ``exc``, naming the endpoint and the HTTP status."""
        error = self._map(exc)
        if isinstance(exc, HttpStatusError):
            status = exc.status
        else:
            code = getattr(exc, "status_code", None)  # the SDKs' status errors
            status = code if isinstance(code, int) else status
        url = url or self.url
        where = f"POST {url}" + (f", HTTP {status}" if status else ", no HTTP status")
        locate_error(error, where)
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
        """Raise the ``ModelConnectionError`` of a call that stalled (``idle``: the stream did)."""
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

    def _clock(self, *, idle: float | None = None) -> CallClock:
        """The clock of one call: ``request_deadline``, and ``idle`` for a stream."""
        return CallClock(deadline=self.request_deadline, idle=idle)

    def _expired(self, clock: CallClock, request: ModelRequest, *, status: int | None) -> NoReturn:
        """Raise the ``ModelError`` of a call whose ``clock`` ran out."""
        self._timed_out(request, idle=clock.expired == "idle", status=status)

    def _check_size(self, chars: int) -> None:
        """Raises ``ResponseTooLarge`` when ``chars`` characters pass ``max_answer_chars``."""
        reason = oversized_answer(chars, self.max_answer_chars)
        if reason is not None:
            raise ResponseTooLarge(reason)

    async def _post_and_read(self, transport: AiohttpTransport, body: bytes, purpose: str) -> Any:
        """The raw JSON answer to ``body``."""
        max_bytes = self.max_body_bytes
        response = await transport.post(body, purpose, max_error_bytes=max_bytes)
        try:
            return await transport.read(response, max_bytes=max_bytes)
        except BodyTooLarge as exc:
            raise too_large_body(exc.size, max_bytes) from None

    async def _exchange(
        self,
        request: ModelRequest,
        body: dict[str, Any],
        transport: AiohttpTransport | None,
        sdk_send: Callable[[dict[str, Any], str], Awaitable[Any]] | None,
        *,
        url: str | None = None,
    ) -> Any:
        """The raw answer to ``body``, sent through ``transport``, else ``sdk_send``."""
        raw: Any
        clock = self._clock()
        try:
            async with clock:
                if transport is not None:
                    raw = await self._post_and_read(transport, orjson.dumps(body), request.purpose)
                else:
                    assert sdk_send is not None
                    raw = await sdk_send(body, request.purpose)
        except self._boundary as exc:
            self._raise(exc, request, url=url)
        except TimeoutError:
            self._expired(clock, request, status=None)
        return raw

    async def create(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call."""
        body = self._request_body(request, stream=False)
        sdk_send = None if self._sdk is None else self._sdk.create
        raw = await self._exchange(request, body, self._transport, sdk_send)
        try:
            data = orjson.loads(raw) if self._sdk is None else self._sdk_data(raw)
            response = self._parse(data)
            self._check_size(answer_chars(response))
        except self._boundary as exc:  # the body came (HTTP 200) but cannot be used
            self._raise(exc, request, status=200)
        return response

    async def _open_stream(self, request: ModelRequest) -> Events:
        """Send a streaming request; the events of its answer, unread."""
        body = self._request_body(request, stream=True)
        if self._transport is None:
            assert self._sdk is not None
            return self._sdk_events(await self._sdk.create(body, request.purpose))
        transport = self._transport
        response = await transport.post(
            orjson.dumps(body), request.purpose, max_error_bytes=self.max_body_bytes
        )

        async def read() -> bytes:
            return await transport.read_chunk(response)

        async def close(ended: bool) -> None:
            transport.finish(response, ended=ended)

        return JsonEventStream(
            read, close, status=response.status, max_event_bytes=self.max_body_bytes
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response: ``TextDelta`` pieces, then exactly one ``ResponseDone``."""
        accumulator = self._new_accumulator()
        events: Events
        clock = self._clock(idle=self.stream_idle_timeout)
        try:
            async with clock:
                events = await self._open_stream(request)
        except self._boundary as exc:
            self._raise(exc, request)
        except TimeoutError:
            self._expired(clock, request, status=None)
        status = events.status
        async with events:
            while True:
                # one read at a time under the clock, never a yield: keep-alives are
                # skipped inside the read, so only a real event starts the idle time again
                try:
                    async with clock:
                        batch = await events.next_events()
                    texts = [accumulator.feed(event) for event in batch or ()]
                    # stop reading once the answer passes the cap: it is never held
                    self._check_size(accumulator.answer_chars)
                except self._boundary as exc:
                    self._raise(exc, request, status=status)
                except TimeoutError:
                    self._expired(clock, request, status=status)
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
        if self._sdk is not None:
            await self._sdk.aclose()
