"""Server-sent events decoded straight from the response bytes with orjson.

The SDK's ``AsyncStream`` decodes events line by line in Python and each payload with the
standard ``json`` module; on a streamed answer (one event per token at a real provider) that is
most of the client's CPU. ``JsonEventStream`` reads the HTTP response the gateway's fast wire
path sent through the SDK's own HTTP client. Errors keep the SDK's types: an ``error`` payload
raises ``openai.APIError``, a transport failure ``openai.APIConnectionError``. An event that
grows past ``max_event_bytes`` before it ends raises ``ResponseTooLarge``: an endpoint that
streams one endless event must not fill memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import openai
import orjson
from stowage.core import ResponseTooLarge

__all__ = ["JsonEventStream", "sse_data"]


def sse_data(block: bytes) -> bytes | None:
    """The data of one event block (its ``data:`` lines joined by newlines), or None if it has
    none (a comment or a keep-alive)."""
    parts = [
        line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")
    ]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else b"\n".join(parts)


class JsonEventStream:
    """The decoded JSON payloads of a streamed HTTP ``response`` (an httpx response of the
    SDK's HTTP client), read a chunk of the body at a time and ending at ``[DONE]`` or the
    body's end; closing it closes the response."""

    def __init__(self, response: Any, *, max_event_bytes: int | None = None) -> None:
        """``max_event_bytes``: the most bytes one event may take before it ends (None: no
        limit)."""
        self.response = response
        self._max_event_bytes = max_event_bytes
        self._chunks: AsyncIterator[bytes] = response.aiter_bytes()
        self._buffer = b""
        self._done = False  # [DONE] came: what is left of the body is read and dropped
        self._ended = False

    async def __aenter__(self) -> JsonEventStream:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.response.aclose()

    async def next_events(self) -> list[Any] | None:
        """The events of the next chunks of the body (at least one, as many as arrived
        together), or None at the end of the stream. One await per network read: a caller
        times each call, not each event.

        Raises ``openai.APIError`` for an ``error`` payload, ``orjson.JSONDecodeError`` for a
        payload that is not JSON, ``openai.APIConnectionError`` when the transport fails,
        ``ResponseTooLarge`` when an event passes ``max_event_bytes`` before it ends.
        """
        while not self._ended:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._ended = True
                return self._rest()
            except Exception as exc:  # the transport's own error classes: a broken stream
                raise openai.APIConnectionError(request=self.response.request) from exc
            if self._done:
                continue  # drain the body so the connection can be reused
            events = self._decode(chunk)
            if events:
                return events
        return None

    def _decode(self, chunk: bytes) -> list[Any]:
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events: list[Any] = []
        while (cut := buffer.find(b"\n\n")) >= 0:
            data = sse_data(buffer[:cut])
            buffer = buffer[cut + 2 :]
            if data is None:
                continue
            if data.startswith(b"[DONE]"):
                self._done = True
                buffer = b""
                break
            events.append(_checked(orjson.loads(data), self.response))
        self._buffer = buffer
        limit = self._max_event_bytes
        if limit is not None and len(buffer) > limit:
            raise ResponseTooLarge(
                f"one event of the stream passed {len(buffer):,} bytes before it ended, more "
                f"than an answer within max_answer_chars can take ({limit:,} bytes)"
            )
        return events

    def _rest(self) -> list[Any] | None:
        """The last event, when the body ended without a blank line after it."""
        rest, self._buffer = self._buffer.strip(), b""
        if self._done or not rest:
            return None
        data = sse_data(rest)
        if data is None or data.startswith(b"[DONE]"):
            return None
        return [_checked(orjson.loads(data), self.response)]


def _checked(event: Any, response: Any) -> Any:
    if isinstance(event, dict) and event.get("error"):
        error = event["error"]
        message = error.get("message") if isinstance(error, dict) else None
        raise openai.APIError(
            message if isinstance(message, str) and message else "error in the event stream",
            request=response.request,
            body=error,
        )
    return event
