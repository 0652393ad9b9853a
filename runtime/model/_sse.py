"""Server-sent events decoded straight from the response bytes with orjson.

The SDK's ``AsyncStream`` decodes events line by line in Python and each payload with the
standard ``json`` module; on a streamed answer (one event per token at a real provider) that is
most of the client's CPU. ``JsonEventStream`` reads the HTTP response the gateway's fast wire
path sent through the SDK's own HTTP client. Errors keep the SDK's types: an ``error`` payload
raises ``openai.APIError``, a transport failure ``openai.APIConnectionError``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import Any

import openai
import orjson

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
    SDK's HTTP client), ending at ``[DONE]`` or the body's end; closing it closes the response."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self._events = self._decode()

    async def __aenter__(self) -> JsonEventStream:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._events.aclose()
        await self.response.aclose()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._events

    async def _decode(self) -> AsyncGenerator[Any, None]:
        response = self.response
        buffer = b""
        done = False
        try:
            async for chunk in response.aiter_bytes():
                if done:
                    continue  # drain the body so the connection can be reused
                buffer += chunk
                if b"\r" in buffer:
                    buffer = buffer.replace(b"\r\n", b"\n")
                while not done and (cut := buffer.find(b"\n\n")) >= 0:
                    data = sse_data(buffer[:cut])
                    buffer = buffer[cut + 2 :]
                    if data is None:
                        continue
                    if data.startswith(b"[DONE]"):
                        done = True
                        break
                    yield _checked(orjson.loads(data), response)
        except (openai.APIError, orjson.JSONDecodeError):
            raise
        except Exception as exc:  # the transport's own error classes: a broken stream
            raise openai.APIConnectionError(request=response.request) from exc
        if not done and buffer.strip():
            data = sse_data(buffer.strip())
            if data is not None and not data.startswith(b"[DONE]"):
                yield _checked(orjson.loads(data), response)


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
