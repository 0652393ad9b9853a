"""Server-sent events decoded straight from the response bytes with orjson.

``JsonEventStream`` takes a ``read`` coroutine function that returns whatever bytes of the
body have arrived (``b""`` at its end; the aiohttp transport hands it
``response.content.readany``, wrapped so that a transport failure is a ``TransportError``), so
one read returns every event that came together and a caller times each read, not each event.
An ``error`` payload raises ``EventError``; an event that grows past ``max_event_bytes``
before it ends raises ``ResponseTooLarge``: an endpoint that streams one endless event must
not fill memory. Nothing here imports an HTTP library.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import orjson
from stowage.core import ResponseTooLarge

from ._http_errors import EventError

__all__ = ["JsonEventStream", "sse_data"]


def sse_data(block: bytes) -> bytes | None:
    """The data of one event block, or None if it has none (a comment or a keep-alive)."""
    # found with two searches, not a split into lines: nearly every event has one data line,
    # alone (Chat's) or after its ``event:`` line (Responses')
    if block.startswith(b"data:"):
        start = 5
    else:
        start = block.find(b"\ndata:") + 6
        if start == 5:
            return None
    end = block.find(b"\n", start)
    if end < 0:
        data = block[start:]
    elif block.find(b"\ndata:", end) < 0:
        data = block[start:end]
    else:  # more data lines
        return b"\n".join(
            line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")
        )
    return data[1:] if data.startswith(b" ") else data


class JsonEventStream:
    """The decoded JSON payloads of a streamed body, ending at ``[DONE]`` or the body's end."""

    def __init__(
        self,
        read: Callable[[], Awaitable[bytes]],
        close: Callable[[bool], Awaitable[None]],
        *,
        status: int | None = None,
        max_event_bytes: int | None = None,
    ) -> None:
        """``status``: the response's, for errors; ``max_event_bytes``: one event's cap."""
        self.status = status
        self._read = read
        self._close = close
        self._max_event_bytes = max_event_bytes
        self._buffer = b""
        self._done = False  # [DONE] came: what is left of the body is read and dropped
        self._ended = False

    async def __aenter__(self) -> JsonEventStream:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close(self._ended)

    async def next_events(self) -> list[Any] | None:
        """The events of the chunks that arrived together, or None at the end of the stream."""
        while not self._ended:
            chunk = await self._read()
            if not chunk:
                self._ended = True
                return self._rest()
            if self._done:
                continue  # drain the body so the connection can be reused
            events = self._decode(chunk)
            if events:
                return events
        return None

    def _decode(self, chunk: bytes) -> list[Any]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events: list[Any] = []
        *blocks, buffer = buffer.split(b"\n\n")  # the last: an event not ended yet
        for block in blocks:
            data = sse_data(block)
            if data is None:
                continue
            if data.startswith(b"[DONE]"):
                self._done = True
                buffer = b""
                break
            event = orjson.loads(data)
            if isinstance(event, dict) and event.get("error"):
                raise EventError(event["error"])
            events.append(event)
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
        return [_checked(orjson.loads(data))]


def _checked(event: Any) -> Any:
    if isinstance(event, dict) and event.get("error"):
        raise EventError(event["error"])
    return event
