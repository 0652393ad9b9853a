"""The gateway's clocks on a real socket: a body that drips within the read timeout is read,
a socket silent past it fails, a stream idle past its limit fails, each naming why; and a
call arms no timer handle per chunk."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from stowage.core import ModelConnectionError, ModelRequest, UserMessage
from stowage.model._openai_gateway import OpenAIGateway

REQUEST = ModelRequest(model="m", input=(UserMessage(text="hi"),))
ANSWER = json.dumps(
    {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "model": "m",
    }
).encode()
CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
LAST = (
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
)

#: what the server does once it has read a request: writes to the socket, sleeps
Reply = Callable[[asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def _server(reply: Reply, heads: list[bytes]) -> AsyncIterator[int]:
    """A loopback HTTP/1.1 server that reads one request a connection (its head into
    ``heads``) and hands the socket to ``reply``; yields its port."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            found = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            await reader.readexactly(int(found[1]) if found else 0)
            await reply(writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


def _gateway(port: int, **kw: Any) -> OpenAIGateway:
    return OpenAIGateway(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", wire_api="chat", **kw)


async def test_a_body_that_drips_within_the_read_timeout_is_read_whole() -> None:
    """Pieces 150 ms apart for a second, with a 500 ms read timeout: each piece is
    progress."""

    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ANSWER))
        piece = len(ANSWER) // 7 + 1
        for start in range(0, len(ANSWER), piece):
            await asyncio.sleep(0.15)
            writer.write(ANSWER[start : start + piece])
            await writer.drain()

    heads: list[bytes] = []
    async with asyncio.timeout(10), _server(reply, heads) as port:
        gateway = _gateway(port, timeout=0.5)
        try:
            response = await gateway.create(REQUEST)
        finally:
            await gateway.aclose()
    assert response.text == "hi"
    head = heads[0].lower()
    assert b"\r\ncontent-type: application/json\r\n" in head
    assert head.count(b"\r\ncontent-type:") == 1
    assert b"\r\nx-stowage-purpose: round\r\n" in head


async def test_a_socket_silent_after_the_headers_fails_after_the_read_timeout() -> None:
    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{")
        await writer.drain()
        await asyncio.sleep(30)

    async with asyncio.timeout(10), _server(reply, []) as port:
        gateway = _gateway(port, timeout=0.3)
        try:
            with pytest.raises(ModelConnectionError, match="timed out") as caught:
                await gateway.create(REQUEST)
        finally:
            await gateway.aclose()
    assert "read timeout" in str(caught.value)
    assert "no HTTP status" in str(caught.value)


async def test_a_stream_silent_past_the_read_timeout_fails_with_its_status() -> None:
    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + CHUNK)
        await writer.drain()
        await asyncio.sleep(30)

    async with asyncio.timeout(10), _server(reply, []) as port:
        gateway = _gateway(port, timeout=0.3, stream_idle_timeout=5)
        try:
            with pytest.raises(ModelConnectionError, match="timed out") as caught:
                async for _ in gateway.stream(REQUEST):
                    pass
        finally:
            await gateway.aclose()
    assert "HTTP 200" in str(caught.value)


async def test_a_stream_of_keep_alives_fails_after_the_idle_timeout() -> None:
    """Comments every 50 ms keep the socket busy, but no event comes within 300 ms."""

    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + CHUNK)
        for _ in range(200):
            await asyncio.sleep(0.05)
            writer.write(b": keep-alive\n\n")
            await writer.drain()

    async with asyncio.timeout(10), _server(reply, []) as port:
        gateway = _gateway(port, timeout=5, stream_idle_timeout=0.3)
        try:
            with pytest.raises(ModelConnectionError, match=r"no stream event for 0\.3 s"):
                async for _ in gateway.stream(REQUEST):
                    pass
        finally:
            await gateway.aclose()
