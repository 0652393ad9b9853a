"""The gateway's aiohttp transport against raw sockets: connections kept and reused, a proxy
from the environment, gzip, and endpoints that cut, stall or close."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from stowage.core import ModelConnectionError, ModelRequest, UserMessage
from stowage.model._aiohttp_transport import env_proxy
from stowage.model._openai_gateway import OpenAIGateway
from yarl import URL

REQUEST = ModelRequest(model="m", input=(UserMessage(text="hi"),))
ANSWER = json.dumps(
    {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "model": "m",
    }
).encode()


def _whole(body: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
        % (
            len(body),
            extra,
            body,
        )
    )


class Served:
    """What a raw server saw: connections accepted and the head of each request."""

    def __init__(self) -> None:
        self.connections = 0
        self.heads: list[bytes] = []
        #: hang up after each answer
        self.close = False


#: what the server does with each request: the bytes it answers (None: nothing, hang up)
Answer = Callable[[Served], Awaitable[bytes | None]]


@asynccontextmanager
async def _server(answer: Answer) -> AsyncIterator[tuple[int, Served]]:
    """A loopback HTTP/1.1 server reading each request whole and sending ``answer``'s bytes;
    yields its port and what it saw."""
    served = Served()

    async def serve(stream: SocketStream) -> None:
        served.connections += 1
        data = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in data:
                    try:
                        data += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        return
                head, _, data = data.partition(b"\r\n\r\n")
                served.heads.append(head)
                found = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                length = int(found[1]) if found else 0
                while len(data) < length:
                    data += await stream.receive()
                data = data[length:]
                reply = await answer(served)
                if reply is None:
                    return
                await stream.send(reply)
                if served.close:
                    return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield listener.extra(SocketAttribute.local_port), served
        tg.cancel_scope.cancel()


def _gateway(port: int, **kw: Any) -> OpenAIGateway:
    return OpenAIGateway(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", wire_api="chat", **kw)


async def test_calls_reuse_the_sessions_connections_and_aclose_closes_them() -> None:
    async def answer(served: Served) -> bytes:
        await anyio.sleep(0.05)  # a dozen in flight at once
        return _whole(ANSWER)

    with anyio.fail_after(30):
        async with _server(answer) as (port, served):
            gateway = _gateway(port)
            try:
                for _ in range(2):
                    async with anyio.create_task_group() as tg:
                        for _ in range(12):
                            tg.start_soon(gateway.create, REQUEST)
                transport: Any = gateway._transport
                session = transport._session
                assert session is not None and not session.closed
            finally:
                await gateway.aclose()
            assert session.closed
    # 24 calls, a dozen at a time: the second dozen reused the first dozen's connections
    assert len(served.heads) == 24 and served.connections == 12
    assert served.heads[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")


async def test_a_gzipped_answer_is_decoded() -> None:
    async def answer(served: Served) -> bytes:
        return _whole(gzip.compress(ANSWER), b"Content-Encoding: gzip")

    with anyio.fail_after(10):
        async with _server(answer) as (port, served):
            gateway = _gateway(port)
            try:
                assert (await gateway.create(REQUEST)).text == "hi"
            finally:
                await gateway.aclose()
    assert re.search(rb"(?i)\r\naccept-encoding: [^\r]*gzip", served.heads[0])


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (None, "cannot reach the model endpoint"),
        (b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"choices"', "cannot reach"),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "cannot reach"),
    ],
    ids=["closed", "cut", "not-http"],
)
async def test_an_endpoint_that_closes_or_cuts_is_a_connection_error(
    reply: bytes | None, match: str
) -> None:
    async def answer(served: Served) -> bytes | None:
        served.close = True
        return reply

    with anyio.fail_after(10):
        async with _server(answer) as (port, _):
            gateway = _gateway(port)
            try:
                with pytest.raises(ModelConnectionError, match=match) as caught:
                    await gateway.create(REQUEST)
            finally:
                await gateway.aclose()
    assert f"127.0.0.1:{port}/v1/chat/completions, no HTTP status" in str(caught.value)
    assert caught.value.__cause__ is not None


async def test_a_silent_socket_fails_after_the_read_timeout() -> None:
    async def answer(served: Served) -> bytes:
        await anyio.sleep(30)
        return b""

    with anyio.fail_after(10):
        async with _server(answer) as (port, _):
            gateway = _gateway(port, timeout=0.3)
            try:
                with pytest.raises(ModelConnectionError, match="timed out"):
                    await gateway.create(REQUEST)
            finally:
                await gateway.aclose()


async def test_requests_go_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def answer(served: Served) -> bytes:
        return _whole(ANSWER)

    with anyio.fail_after(10):
        async with _server(answer) as (port, served):
            monkeypatch.setenv("HTTP_PROXY", f"http://puser:ppass@127.0.0.1:{port}")
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            gateway = OpenAIGateway(
                base_url="http://api.example.invalid/v1", api_key="k", wire_api="chat"
            )
            try:
                assert (await gateway.create(REQUEST)).text == "hi"
            finally:
                await gateway.aclose()
    head = served.heads[0]
    assert head.startswith(b"POST http://api.example.invalid/v1/chat/completions HTTP/1.1")
    assert re.search(rb"(?i)\r\nproxy-authorization: basic ", head)


@pytest.mark.parametrize(
    ("environ", "proxy"),
    [
        ({}, None),
        ({"HTTP_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ({"http_proxy": "http://proxy:3128"}, "http://proxy:3128"),
        ({"HTTPS_PROXY": "http://proxy:3128"}, None),  # not for an http endpoint
        ({"HTTP_PROXY": "socks5://proxy:1080"}, None),  # aiohttp cannot speak to it
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "localhost,.internal"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "no_proxy": "*"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "other.example"}, "http://proxy:3128"),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "api.internal:8000"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "api.internal:9"}, "http://proxy:3128"),
    ],
)
def test_the_proxy_is_the_environments_for_the_endpoints_scheme_and_host(
    environ: dict[str, str], proxy: str | None
) -> None:
    found, auth = env_proxy(URL("http://api.internal:8000/v1/chat/completions"), environ)
    assert (str(found) if found is not None else None) == proxy and auth is None


def test_credentials_in_the_proxys_url_become_proxy_auth() -> None:
    found, auth = env_proxy(
        URL("https://api.example/v1/responses"), {"HTTPS_PROXY": "http://u:p%40ss@proxy:3128"}
    )
    assert str(found) == "http://proxy:3128"
    assert auth is not None and (auth.login, auth.password) == ("u", "p@ss")
