"""The lean HTTP/1.1 client of the gateway's fast wire path, against real sockets: framing,
keep-alive reuse, servers that close, cut, stall or answer garbage."""

from __future__ import annotations

import contextlib
import gzip
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import SocketStream
from hypothesis import given, settings
from hypothesis import strategies as st
from stowage import ModelRequest, SystemMessage, UserMessage
from stowage.core import ConfigError
from stowage.model._brain import ScriptedBrain
from stowage.model._http1 import (
    HIGH_WATER,
    KEEPALIVE_EXPIRY,
    Http1Error,
    Http1Pool,
    Http1Response,
    Http1Timeout,
    Http1TooLarge,
    _Connection,
    _read_head,
    request_head,
)
from stowage.model._openai_gateway import OpenAIGateway, _tls_context, lean_http_gap
from stowage.testing import FakeOpenAIServer

#: one connection's part of a test server: what it does with each request read from it
Handler = Callable[[SocketStream, "Served"], Awaitable[None]]


class Served:
    """What a test server saw: connections accepted, requests read (head and body)."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []


async def _read_request(stream: SocketStream, served: Served) -> bool:
    """Read one request off ``stream`` into ``served``; False if the client closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return False
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await stream.receive()
    served.requests.append((head, body))
    return True


@asynccontextmanager
async def _server(*handlers: Handler) -> AsyncIterator[tuple[int, Served]]:
    """A TCP server on loopback whose n-th connection is served by ``handlers[n]`` (the last
    one for any after); yields its port and what it saw."""
    served = Served()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")

    async def serve(stream: SocketStream) -> None:
        handler = handlers[min(served.connections, len(handlers) - 1)]
        served.connections += 1
        async with stream:
            await handler(stream, served)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield listener.extra(anyio.abc.SocketAttribute.local_port), served
        tg.cancel_scope.cancel()


def _answer(body: bytes, *extra: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body),
        b"".join(h + b"\r\n" for h in extra),
        body,
    )


def _keeps_answering(body: bytes) -> Handler:
    async def handler(stream: SocketStream, served: Served) -> None:
        while await _read_request(stream, served):
            await stream.send(_answer(body))

    return handler


def _answers_once(answer: bytes) -> Handler:
    """Answer one request with ``answer``, then close the connection."""

    async def handler(stream: SocketStream, served: Served) -> None:
        if await _read_request(stream, served):
            await stream.send(answer)

    return handler


def _pool(port: int, **kw: float) -> Http1Pool:
    return Http1Pool(scheme="http", host="127.0.0.1", port=port, **kw)


async def _post(pool: Http1Pool, body: bytes = b"{}") -> tuple[int, bytes]:
    response = await pool.post(
        request_head(b"/v1/chat", [(b"Host", b"h"), (b"X-Test", b"1")]), body, None
    )
    try:
        return response.status_code, await response.aread()
    finally:
        await response.aclose()


async def test_a_connection_is_kept_alive_and_reused_and_the_request_is_whole() -> None:
    with anyio.fail_after(10):
        async with _server(_keeps_answering(b"pong")) as (port, served):
            pool = _pool(port)
            assert await _post(pool, b'{"a": 1}') == (200, b"pong")
            assert await _post(pool, b'{"b": 2}') == (200, b"pong")
            await pool.aclose()
    assert served.connections == 1
    head = served.requests[0][0]
    assert head.startswith(b"POST /v1/chat HTTP/1.1\r\n")
    assert b"\r\nX-Test: 1" in head and b"\r\nContent-Length: 8" in head
    assert [body for _, body in served.requests] == [b'{"a": 1}', b'{"b": 2}']


async def test_a_kept_connection_the_server_closed_is_replaced_and_the_request_sent_once() -> None:
    with anyio.fail_after(10):
        # the first connection answers without saying it will close, then closes
        async with _server(_answers_once(_answer(b"one")), _keeps_answering(b"two")) as (
            port,
            served,
        ):
            pool = _pool(port)
            assert await _post(pool) == (200, b"one")
            await anyio.sleep(0.05)  # the close reaches the client
            assert await _post(pool) == (200, b"two")
            await pool.aclose()
    assert served.connections == 2 and len(served.requests) == 2


async def test_a_connection_idle_past_its_expiry_is_closed_not_reused() -> None:
    with anyio.fail_after(10):
        async with _server(_keeps_answering(b"pong")) as (port, served):
            pool = _pool(port)
            await _post(pool)
            first = pool._idle[0]
            first.idle_since -= KEEPALIVE_EXPIRY + 1
            await _post(pool)
            assert first.ended and len(pool._idle) == 1 and pool._idle[0] is not first
            # two in use at once, then idle; the older one expires while the newer is reused
            answers = [await pool.post(request_head(b"/", []), b"{}", None) for _ in range(2)]
            for response in answers:
                await response.aread()
                await response.aclose()
            older, newer = pool._idle
            older.idle_since -= KEEPALIVE_EXPIRY + 1
            await _post(pool)
            assert older.ended and pool._idle == [newer]
            await pool.aclose()
    assert served.connections == 3


async def test_a_new_connection_closed_without_an_answer_fails_and_is_not_resent() -> None:
    with anyio.fail_after(10):
        async with _server(_answers_once(b"")) as (port, served):
            with pytest.raises(Http1Error, match="without answering"):
                await _post(_pool(port))
    assert served.connections == 1 and len(served.requests) == 1


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", "before the body ended"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "before the body"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\n\r\n", "Content-Encoding"),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not an HTTP/1.x answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "within the answer's head"),
    ],
    ids=["cut", "cut-chunked", "bad-chunk", "bad-length", "encoding", "not-http", "cut-head"],
)
async def test_a_broken_answer_is_an_http1_error_naming_what_is_wrong(
    answer: bytes, match: str
) -> None:
    with anyio.fail_after(10):
        async with _server(_answers_once(answer)) as (port, _):
            pool = _pool(port)
            with pytest.raises(Http1Error, match=match):
                await _post(pool)
            assert pool._idle == []  # the broken connection is not kept


async def test_a_server_that_never_answers_times_out() -> None:
    async def silent(stream: SocketStream, served: Served) -> None:
        await _read_request(stream, served)
        await anyio.sleep(30)

    with anyio.fail_after(10):
        async with _server(silent) as (port, _):
            with pytest.raises(Http1Timeout, match=r"no answer within 0\.2 s"):
                await _post(_pool(port, read_timeout=0.2))


async def test_a_body_that_stops_coming_times_out() -> None:
    async def stalls(stream: SocketStream, served: Served) -> None:
        await _read_request(stream, served)
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await anyio.sleep(30)

    with anyio.fail_after(10):
        async with _server(stalls) as (port, _):
            with pytest.raises(Http1Timeout, match="without a byte"):
                await _post(_pool(port, read_timeout=0.2))


async def test_a_refused_connection_names_the_address() -> None:
    with pytest.raises(Http1Error, match=r"cannot connect to 127\.0\.0\.1:9"):
        await _post(_pool(9))


async def test_interim_answers_are_skipped_and_connection_close_is_honoured() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + _answer(b"done", b"Connection: close")
    with anyio.fail_after(10):
        async with _server(_answers_once(answer)) as (port, served):
            pool = _pool(port)
            assert await _post(pool) == (200, b"done")
            assert pool._idle == []
            assert await _post(pool) == (200, b"done")
    assert served.connections == 2


async def test_an_http10_answer_keeps_its_connection_only_if_it_says_keep_alive() -> None:
    kept = b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok"
    closed = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"

    async def answers(stream: SocketStream, served: Served) -> None:
        while await _read_request(stream, served):
            await stream.send(kept if len(served.requests) == 1 else closed)

    with anyio.fail_after(10):
        async with _server(answers) as (port, served):
            pool = _pool(port)
            assert await _post(pool) == (200, b"ok")
            assert len(pool._idle) == 1
            assert await _post(pool) == (200, b"ok")
            assert pool._idle == []
    assert served.connections == 1


async def test_a_response_closed_before_its_body_is_read_does_not_keep_the_connection() -> None:
    with anyio.fail_after(10):
        async with _server(_keeps_answering(b"x" * 1000)) as (port, served):
            pool = _pool(port)
            response = await pool.post(request_head(b"/", []), b"{}", None)
            await response.aclose()
            assert pool._idle == []
            assert await _post(pool) == (200, b"x" * 1000)
            await pool.aclose()
    assert served.connections == 2


def _floods(size: int, sent: list[int]) -> Handler:
    """Answer one request with a body of ``size`` bytes, sent as fast as the client takes it;
    ``sent`` gets how many bytes of it went out before the client hung up."""

    async def handler(stream: SocketStream, served: Served) -> None:
        if not await _read_request(stream, served):
            return
        sent.append(0)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
            piece = b"x" * 65536
            while sent[0] < size:
                await stream.send(piece)
                sent[0] += len(piece)

    return handler


async def test_a_flood_waits_in_the_socket_not_in_memory_and_a_capped_read_stops() -> None:
    big = 64 * 1024 * 1024
    sent: list[int] = []
    with anyio.fail_after(20):
        async with _server(_floods(big, sent)) as (port, _):
            pool = _pool(port)
            response = await pool.post(request_head(b"/", []), b"{}", None)
            connection = response._connection
            assert connection is not None
            while len(connection.buffer) < HIGH_WATER:  # the answer is coming in
                await connection.more()
            await anyio.sleep(0.2)  # time enough for a loopback peer to send it all
            # reading stopped at the high-water mark: the rest waits in the socket buffers
            assert len(connection.buffer) < 2 * HIGH_WATER
            with pytest.raises(Http1TooLarge) as raised:
                await response.aread(max_bytes=4 * HIGH_WATER)
            await response.aclose()
            await pool.aclose()
    assert 4 * HIGH_WATER < raised.value.size <= 6 * HIGH_WATER
    assert sent[0] < big // 2  # the client hung up long before the end


async def test_streamed_chunks_that_arrive_together_are_read_together() -> None:
    events = [b"data: %d\n\n" % n for n in range(5)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
    with anyio.fail_after(10):
        async with _server(_answers_once(answer)) as (port, _):
            pool = _pool(port)
            response = await pool.post(request_head(b"/", []), b"{}", None)
            await anyio.sleep(0.05)  # every chunk has arrived
            reads = [piece async for piece in response.aiter_bytes()]
            await response.aclose()
            await pool.aclose()
    assert reads == [b"".join(events)]


def _framed(body: bytes, framing: str, encoding: str) -> bytes:
    """An answer carrying ``body`` framed and encoded as asked."""
    headers = b""
    if encoding == "gzip":
        body, headers = gzip.compress(body), b"Content-Encoding: gzip\r\n"
    elif encoding == "deflate":
        body, headers = zlib.compress(body), b"Content-Encoding: deflate\r\n"
    if framing == "length":
        return b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (headers, len(body), body)
    if framing == "close":
        return b"HTTP/1.1 200 OK\r\n%s\r\n%s" % (headers, body)
    chunks, rest = [], body
    while rest:
        chunks.append(b"%x;ext=1\r\n%s\r\n" % (len(rest[:7]), rest[:7]))
        rest = rest[7:]
    chunked = b"".join(chunks) + b"0\r\nTrailer: t\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\n%sTransfer-Encoding: chunked\r\n\r\n%s" % (headers, chunked)


@settings(max_examples=150, deadline=None)
@given(
    body=st.binary(max_size=300),
    framing=st.sampled_from(["length", "chunked", "close"]),
    encoding=st.sampled_from(["identity", "gzip", "deflate"]),
    cuts=st.lists(st.integers(min_value=1, max_value=40), max_size=30),
)
def test_a_body_comes_whole_however_its_bytes_are_split_on_arrival(
    body: bytes, framing: str, encoding: str, cuts: list[int]
) -> None:
    wire = _framed(body, framing, encoding)
    pieces, rest = [], wire
    for cut in cuts:
        pieces.append(rest[:cut])
        rest = rest[cut:]
    pieces.append(rest)

    async def run() -> bytes:
        # the connection's protocol fed as asyncio feeds it, a piece per event loop turn
        connection = _Connection()
        pool = _pool(1)

        async def feed() -> None:
            for piece in pieces:
                connection.data_received(piece)
                await anyio.lowlevel.checkpoint()
            if framing == "close":
                connection.eof_received()

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            status, headers, _ = await _read_head(connection)
            response = Http1Response(pool, connection, status, headers, None)
            data = b"".join([piece async for piece in response.aiter_bytes()])
        assert not connection.buffer  # nothing of the answer is left behind
        return data

    assert anyio.run(run) == body


# --- in the gateway -------------------------------------------------------------------------


async def test_the_gateway_sends_every_call_through_one_pool_of_reused_connections() -> None:
    request = ModelRequest(model="m", input=(SystemMessage(text="s"), UserMessage(text="hi")))
    with anyio.fail_after(30):
        async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=0), latency=0.05) as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="sk-test", wire_api="chat")
            assert gateway.lean_http
            pool = gateway._wires[0].pool
            assert pool is not None
            kept: list[set[int]] = []
            try:
                for _ in range(2):
                    async with anyio.create_task_group() as tg:
                        for _ in range(12):
                            tg.start_soon(gateway.create, request)
                    kept.append(set(map(id, pool._idle)))
                assert len(gateway._shards) == 1 and gateway._in_flight == [0]
                # the second dozen reused the first dozen's connections
                assert len(kept[0]) == 12 and kept[1] == kept[0]
            finally:
                await gateway.aclose()
            assert pool._idle == []


@pytest.mark.parametrize(
    ("environ", "gap"),
    [
        ({}, None),
        ({"STOWAGE_HTTP_CLIENT": "lean"}, None),
        ({"STOWAGE_HTTP_CLIENT": "sdk"}, "STOWAGE_HTTP_CLIENT=sdk"),
        ({"HTTP_PROXY": "http://proxy:3128"}, "a proxy is set for http"),
        ({"all_proxy": "socks5://proxy:1080"}, "a proxy is set for http"),
        ({"HTTPS_PROXY": "http://proxy:3128"}, None),  # not for an http endpoint
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "localhost,.internal"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "no_proxy": "*"}, None),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "other.example"}, "a proxy"),
    ],
)
def test_the_lean_client_steps_aside_for_a_proxy_or_when_told(
    environ: dict[str, str], gap: str | None
) -> None:
    gateway = OpenAIGateway(
        base_url="http://api.internal:8000/v1", api_key="k", wire_api="chat", lean_http=False
    )
    found = lean_http_gap(gateway._client, environ)
    assert found == gap if gap is None else (found is not None and found.startswith(gap))


def test_credentials_in_the_endpoints_url_leave_the_sending_to_the_sdks_client() -> None:
    gateway = OpenAIGateway(
        base_url="https://user:secret@proxy.example/v1", api_key="k", wire_api="chat"
    )
    assert not gateway.lean_http and gateway._wires[0].pool is None
    assert lean_http_gap(gateway._client, {}) == "the endpoint's URL carries credentials"


def test_a_bad_http_client_setting_or_a_forced_lean_client_behind_a_proxy_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STOWAGE_HTTP_CLIENT", "curl")
    with pytest.raises(
        ConfigError, match="STOWAGE_HTTP_CLIENT must be 'lean' or 'sdk', got 'curl'"
    ):
        OpenAIGateway(base_url="http://h/v1", api_key="k", wire_api="chat")
    monkeypatch.delenv("STOWAGE_HTTP_CLIENT")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    with pytest.raises(ConfigError, match="lean HTTP client cannot be used: a proxy is set"):
        OpenAIGateway(base_url="http://h/v1", api_key="k", wire_api="chat", lean_http=True)
    assert not OpenAIGateway(base_url="http://h/v1", api_key="k", wire_api="chat").lean_http


def test_an_https_endpoint_uses_the_sdks_tls_context() -> None:
    gateway = OpenAIGateway(base_url="https://api.example/v1", api_key="k", wire_api="chat")
    pool = gateway._wires[0].pool
    assert gateway.lean_http and pool is not None
    assert pool._ssl is _tls_context(gateway._client) and pool._port == 443
