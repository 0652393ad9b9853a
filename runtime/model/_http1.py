"""A lean HTTP/1.1 client for the gateway's fast wire path: POST a body, read the answer.

The SDK's HTTP stack (httpx2 over httpcore2 over h11 on anyio) spends most of a model call's
client CPU on its own machinery: request and response models, a dozen cancel scopes around
socket reads and writes, header validation, the pool's checks of every idle connection. This
client speaks the small part of HTTP/1.1 an OpenAI-compatible endpoint needs: one request per
connection at a time, kept alive and reused; a body framed by ``Content-Length``, chunked, or
ended by the close of the connection; ``gzip`` and ``deflate`` bodies; TLS with the SDK's own
context. Each connection is an ``asyncio.Protocol`` that buffers what arrives; a streamed body
is handed over as whatever has arrived at each wake-up, so one read returns every chunk that
came together. A connection stops reading from its socket while ``HIGH_WATER`` bytes wait in
its buffer, so an endpoint that sends faster than the answer is consumed (or sends far more
than the caller will read) cannot fill memory; ``aread(max_bytes=...)`` stops at a size.

Failures are ``Http1Error`` (``Http1Timeout`` for a timeout): refused or reset connections,
a body cut short, bytes that are not HTTP. A request on a reused keep-alive connection that the
server had closed (it fails before a single byte of the answer arrived) is sent once more on a
new connection, as it cannot have been answered. Nothing here logs or stores the headers, so
the credentials in them go only to the endpoint.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import anyio

__all__ = [
    "Http1Error",
    "Http1Pool",
    "Http1Response",
    "Http1Timeout",
    "Http1TooLarge",
    "request_head",
]

#: seconds an idle connection is kept for reuse (as httpx's pool keeps them)
KEEPALIVE_EXPIRY = 5.0
#: the largest status line and header block accepted
MAX_HEAD = 64 * 1024
_NO_BODY = frozenset({204, 304})
#: bytes a connection buffers before it stops reading from its socket until they are consumed
HIGH_WATER = 1024 * 1024


def request_head(target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """The request line of a POST to ``target`` (path and query) and ``headers`` (Host among
    them), as ``Http1Pool.post`` takes it; a caller sending many requests builds it once."""
    lines = [b"%s: %s\r\n" % pair for pair in headers]
    return b"".join([b"POST ", target, b" HTTP/1.1\r\n", *lines])


class Http1Error(Exception):
    """The HTTP exchange failed: no connection, a reset, a cut body, or not HTTP."""


class Http1Timeout(Http1Error):
    """The endpoint took longer than allowed to connect or to answer."""


class Http1TooLarge(Http1Error):
    """Raised when a body read with ``aread(max_bytes=...)`` passes ``max_bytes``; ``size`` is
    how many bytes had been read."""

    def __init__(self, size: int, max_bytes: int) -> None:
        super().__init__(f"the body passed {max_bytes:,} bytes ({size:,} read)")
        self.size = size
        self.max_bytes = max_bytes


class _Connection(asyncio.Protocol):
    """One connection: what the peer sent, buffered, and a way to wait for more."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.ended = False  # the peer closed its side, or the connection was lost
        self.lost: BaseException | None = None
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False  # reading from the socket stopped: HIGH_WATER bytes wait

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= HIGH_WATER and not self._paused and self.transport is not None:
            self.transport.pause_reading()
            self._paused = True
        self._wake()

    def resume(self) -> None:
        """Read from the socket again (the buffer was consumed, or more of it is needed)."""
        if self._paused and self.transport is not None and not self.transport.is_closing():
            self._paused = False
            self.transport.resume_reading()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.lost = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def more(self) -> bool:
        """Wait until more bytes arrive; False once the peer has closed and none will."""
        if self.ended:
            return False
        self.resume()  # the caller needs more than the buffer holds
        size = len(self.buffer)
        while len(self.buffer) == size and not self.ended:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return len(self.buffer) > size

    @property
    def reusable(self) -> bool:
        """Open, quiet (nothing unasked for arrived) and not idle for too long."""
        return (
            not self.ended
            and not self.buffer
            and self.transport is not None
            and not self.transport.is_closing()
            and time.monotonic() - self.idle_since < KEEPALIVE_EXPIRY
        )

    def close(self) -> None:
        self.ended = True
        if self.transport is not None:
            self.transport.close()


class Http1Response:
    """The status and headers of an answer; its body is read with ``aread`` or
    ``aiter_bytes`` (each once) and the response closed with ``aclose``. ``request`` is what
    the caller gave ``Http1Pool.post`` to stand for the request in its errors."""

    def __init__(
        self,
        pool: Http1Pool,
        connection: _Connection,
        status: int,
        headers: list[tuple[bytes, bytes]],
        request: Any,
        *,
        http10: bool = False,
    ) -> None:
        self.status_code = status
        self.headers = headers
        self.request = request
        self._pool = pool
        self._connection: _Connection | None = connection
        self._complete = False
        self._keep = not http10  # HTTP/1.0 closes unless it says keep-alive
        length: int | None = None
        chunked = False
        encoding = b""
        for name, value in headers:
            name = name.lower()
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise Http1Error(f"bad Content-Length {value[:40]!r}") from None
            elif name == b"transfer-encoding":
                chunked = value.lower().rsplit(b",", 1)[-1].strip() == b"chunked"
            elif name == b"connection":
                value = value.lower()
                self._keep = b"close" not in value and (not http10 or b"keep-alive" in value)
            elif name == b"content-encoding":
                encoding = value.strip().lower()
        if status in _NO_BODY or 100 <= status < 200:
            length, chunked = 0, False
        self._chunked = chunked
        self._left = length  # bytes of a Content-Length body still to come; None: to the close
        self._chunk_left = 0  # of a chunked body: bytes of the current chunk still to come
        if not chunked and length is None:
            self._keep = False
        self._decoder: Any = None
        if encoding in (b"gzip", b"x-gzip"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif encoding == b"deflate":
            self._decoder = zlib.decompressobj()
        elif encoding not in (b"", b"identity"):
            raise Http1Error(f"unsupported Content-Encoding {encoding[:40]!r}")

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body, as whatever arrived together at each read.

        Raises ``Http1Error`` if the body is cut or badly framed.
        """
        while not self._complete:
            data = await self._next()
            if data:
                yield data

    async def aread(self, *, max_bytes: int | None = None) -> bytes:
        """The whole body (at most ``max_bytes`` of it; None: no limit).

        Raises ``Http1TooLarge`` as soon as the body passes ``max_bytes`` (the rest is never
        read: close the response), ``Http1Error`` if the body is cut or badly framed.
        """
        parts = []
        size = 0
        limit = self._pool.read_timeout
        try:
            with anyio.fail_after(limit) as scope:
                while not self._complete:
                    data = await self._next()
                    if data:
                        parts.append(data)
                        size += len(data)
                        if max_bytes is not None and size > max_bytes:
                            raise Http1TooLarge(size, max_bytes)
                        scope.deadline = anyio.current_time() + limit
        except TimeoutError:
            raise Http1Timeout(f"the body went {limit:g} s without a byte") from None
        return b"".join(parts)

    async def aclose(self) -> None:
        """Give the connection back for reuse when the body was read to its end and the server
        keeps it open; close it otherwise."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._complete and self._keep and not connection.ended and not connection.buffer:
            self._pool._release(connection)
        else:
            connection.close()

    async def _next(self) -> bytes:
        """The body bytes available now (waiting for some when there are none), decoded."""
        connection = self._connection
        if connection is None:
            raise Http1Error("the response is closed")
        data = self._take(connection)
        while not data and not self._complete:
            if not await connection.more():
                if self._left is None and not self._chunked:
                    self._complete = True  # a body that ends with the connection
                    break
                raise Http1Error("the server closed the connection before the body ended")
            data = self._take(connection)
        if self._decoder is not None:
            data = self._decoder.decompress(data)
            if self._complete:
                data += self._decoder.flush()
        return data

    def _take(self, connection: _Connection) -> bytes:
        """The body bytes in the buffer, consumed from it; marks the body complete at its
        end."""
        buffer = connection.buffer
        if not self._chunked:
            if self._left is None:
                data = bytes(buffer)
                buffer.clear()
                return data
            data = bytes(buffer[: self._left])
            del buffer[: len(data)]
            self._left -= len(data)
            if self._left == 0:
                self._complete = True
            return data
        parts = []
        while True:
            if self._chunk_left > 0:
                piece = bytes(buffer[: self._chunk_left])
                if not piece:
                    break
                del buffer[: len(piece)]
                self._chunk_left -= len(piece)
                parts.append(piece)
                if self._chunk_left:
                    break
                self._chunk_left = -1  # the CRLF after the chunk is next
            if self._chunk_left == -1:
                if len(buffer) < 2:
                    break
                if buffer[:2] != b"\r\n":
                    raise Http1Error("bad chunked body: no CRLF after a chunk")
                del buffer[:2]
                self._chunk_left = 0
            end = buffer.find(b"\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    raise Http1Error("bad chunked body: a chunk size line too long")
                break
            line = bytes(buffer[:end]).split(b";", 1)[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise Http1Error(f"bad chunked body: chunk size {line[:40]!r}") from None
            if size == 0:
                trailer = buffer.find(b"\r\n\r\n", end)
                if buffer[end : end + 4] == b"\r\n\r\n" or trailer >= 0:
                    stop = end + 4 if buffer[end : end + 4] == b"\r\n\r\n" else trailer + 4
                    del buffer[:stop]
                    self._complete = True
                break
            del buffer[: end + 2]
            self._chunk_left = size
        return b"".join(parts)


class Http1Pool:
    """Keep-alive connections to one origin (``scheme://host:port``), reused most recent
    first; any number may be in use at once."""

    def __init__(
        self,
        *,
        scheme: str,
        host: str,
        port: int | None,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float = 30.0,
        read_timeout: float = 120.0,
    ) -> None:
        """``read_timeout``: seconds an answer's head may take, and a non-streamed body may
        go without a byte.

        Raises ``ValueError`` for a scheme other than http or https.
        """
        if scheme not in ("http", "https"):
            raise ValueError(f"the lean HTTP client speaks http and https, not {scheme!r}")
        self._tls = scheme == "https"
        self._host = host
        self._port = port or (443 if self._tls else 80)
        self._ssl = (ssl_context or ssl.create_default_context()) if self._tls else None
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: list[_Connection] = []

    async def post(self, head: bytes, body: bytes, request: Any) -> Http1Response:
        """POST ``body`` with ``head`` (``request_head``: the request line and headers; its
        Content-Length is added); returns the answer with its body unread.

        Raises ``Http1Timeout`` or ``Http1Error``.
        """
        head += b"Content-Length: %d\r\n\r\n" % len(body)
        while True:
            connection, reused = await self._connection()
            try:
                return await self._exchange(connection, head, body, request)
            except _Stale:
                connection.close()
                if not reused:
                    raise Http1Error("the server closed the connection without answering") from None
            except BaseException:
                connection.close()
                raise

    async def _exchange(
        self, connection: _Connection, head: bytes, body: bytes, request: Any
    ) -> Http1Response:
        transport = connection.transport
        assert transport is not None
        transport.write(head + body if len(body) < 16384 else head)
        if len(body) >= 16384:
            transport.write(body)
        try:
            with anyio.fail_after(self.read_timeout):
                status, headers, http10 = await _read_head(connection)
                while status < 200:  # 100 Continue and other interim answers
                    status, headers, http10 = await _read_head(connection)
        except TimeoutError:
            raise Http1Timeout(f"no answer within {self.read_timeout:g} s") from None
        return Http1Response(self, connection, status, headers, request, http10=http10)

    async def _connection(self) -> tuple[_Connection, bool]:
        """An idle connection if one is still usable (and reused), else a new one."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            if connection.reusable:
                return connection, True
            connection.close()
        loop = asyncio.get_running_loop()
        try:
            with anyio.fail_after(self.connect_timeout):
                _, connection = await loop.create_connection(
                    _Connection,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._tls else None,
                )
        except TimeoutError:
            raise Http1Timeout(
                f"no connection to {self._host}:{self._port} within {self.connect_timeout:g} s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise Http1Error(f"cannot connect to {self._host}:{self._port}: {exc}") from exc
        return connection, False

    def _release(self, connection: _Connection) -> None:
        """Keep ``connection`` for reuse; close the longest idle ones that expired or ended
        (the most recent are reused first, so the oldest would otherwise stay open)."""
        idle = self._idle
        while idle and not idle[0].reusable:
            idle.pop(0).close()
        connection.resume()  # an idle connection must see the server close it
        connection.idle_since = time.monotonic()
        idle.append(connection)

    async def aclose(self) -> None:
        """Close every idle connection."""
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class _Stale(Exception):
    """The connection ended before a byte of the answer came."""


async def _read_head(connection: _Connection) -> tuple[int, list[tuple[bytes, bytes]], bool]:
    """The status and headers of the next answer on ``connection``, consumed from its buffer,
    and whether it is an HTTP/1.0 answer.

    Raises ``_Stale`` if the connection ends before any of it, ``Http1Error`` if it ends
    within it or it is not an HTTP/1.x answer.
    """
    buffer = connection.buffer
    searched = 0
    while (end := buffer.find(b"\r\n\r\n", searched)) < 0:
        if len(buffer) > MAX_HEAD:
            raise Http1Error(f"the answer's head is over {MAX_HEAD} bytes")
        searched = max(0, len(buffer) - 3)
        if not await connection.more():
            if not buffer:
                if isinstance(connection.lost, OSError) or connection.lost is None:
                    raise _Stale()
                raise Http1Error(f"the connection failed: {connection.lost}")
            raise Http1Error("the server closed the connection within the answer's head")
    lines = bytes(buffer[:end]).split(b"\r\n")
    del buffer[: end + 4]
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
        raise Http1Error(f"not an HTTP/1.x answer: {lines[0][:60]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise Http1Error(f"bad status line {lines[0][:60]!r}") from None
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise Http1Error(f"bad header line {line[:60]!r}")
        headers.append((name, value.strip()))
    return status, headers, status_line[0] == b"HTTP/1.0"
