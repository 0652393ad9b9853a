"""The gateway's HTTP client: aiohttp, one ``ClientSession`` per gateway.

aiohttp is a well-kept client with a C-accelerated HTTP parser, a pool that takes and gives
back a connection in constant time, proxies from the environment and verified TLS; it spends
little CPU per request, which matters when one process runs hundreds of sessions. Using it
through its public API replaces both stowage's own HTTP/1.1 client and the private parts of
the openai SDK that fed it.

The session is made on the first request, inside the running event loop, and closed with the
gateway: a ``TCPConnector`` of at most ``MAX_CONNECTIONS`` connections, idle ones kept
``KEEPALIVE_EXPIRY`` seconds; TLS verified (OpenSSL's default store, which honours
``SSL_CERT_FILE``); gzip and deflate accepted and decoded by aiohttp. The proxy comes from the
environment as aiohttp's ``trust_env`` would take it (``HTTP_PROXY`` / ``HTTPS_PROXY`` for the
endpoint's scheme unless ``NO_PROXY`` exempts its host; credentials in the proxy's URL go as
proxy auth), but it is looked up once, when the session is made: ``trust_env`` looks the proxy
and ``.netrc`` up again on every request, two trips to a thread each (measured: a third of the
client's CPU per call), and a ``.netrc`` entry for the host would clash with the bearer token.
A socket that does not connect within ``connect_timeout`` seconds fails; one that goes silent
for ``read_timeout`` seconds fails too, both timed by aiohttp; the gateway's own clocks (idle
stream, request deadline) bound the rest. The headers name the ``Content-Type`` (JSON when the caller's do
not), so aiohttp adds none and needs no list of headers to skip; they go with each request,
never as the session's, which aiohttp would send to a proxy too. Failures leave this module
as ``TransportError``, error statuses as ``HttpStatusError`` with their headers and body (the
body read only as far as the cap), never as aiohttp's classes. Nothing here logs the headers:
the key goes only to the endpoint.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from yarl import URL

from ._http_errors import BodyTooLarge, HttpStatusError, TransportError

__all__ = ["KEEPALIVE_EXPIRY", "MAX_CONNECTIONS", "AiohttpTransport"]

#: connections open at once to the endpoint (the openai SDK's own pool allows as many)
MAX_CONNECTIONS = 1000
#: seconds an idle connection is kept for reuse (servers such as uvicorn close them at 5 s)
KEEPALIVE_EXPIRY = 5.0

_log = structlog.get_logger("stowage.gateway")


def env_proxy(
    url: URL, environ: Mapping[str, str] | None = None
) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The environment's proxy for ``url`` and its auth, as ``trust_env`` would find them."""
    if environ is None:
        proxies = urllib.request.getproxies_environment()
    else:
        proxies = {
            k.lower()[:-6]: v for k, v in environ.items() if k.lower().endswith("_proxy") and v
        }
    proxy = proxies.get(url.scheme or "")
    if not proxy or url.host is None:
        return None, None
    # the standard library's reading of no_proxy (hosts, domain suffixes, host:port, or *);
    # urllib's own function, which typeshed does not list
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if bypass(f"{url.host}:{url.port}", proxies):
        return None, None
    found = URL(proxy)
    if found.scheme not in ("http", "https"):
        _log.info("proxy_ignored", scheme=found.scheme, reason="aiohttp speaks to http(s) proxies")
        return None, None
    auth = aiohttp.BasicAuth.from_url(found) if found.user else None
    return found.with_user(None), auth


def _failure(exc: BaseException, *, read_timeout: float | None = None) -> TransportError:
    """The ``TransportError`` for an aiohttp (or socket) failure ``exc``."""
    if isinstance(exc, TimeoutError):  # aiohttp's socket timeouts are TimeoutErrors too
        if read_timeout is not None:
            return TransportError(
                f"timed out: no data from the socket for {read_timeout:g} s (its read timeout)",
                timeout=True,
            )
        return TransportError(f"timed out: {type(exc).__name__}: {exc}", timeout=True)
    text = str(exc) or "connection closed"
    return TransportError(f"{type(exc).__name__}: {text}")


class AiohttpTransport:
    """POSTs JSON bodies to one URL with fixed headers, on a session made in the sending loop."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        purpose_header: str,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        """``url``: where to POST (no credentials in it: they go in ``headers``)."""
        self.url = url
        self._headers = dict(headers)
        if not any(name.lower() == "content-type" for name in self._headers):
            self._headers["Content-Type"] = "application/json"
        self._purpose_header = purpose_header
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=read_timeout
        )
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._target = URL(url, encoded=True)
        self._proxy: URL | None = None
        self._proxy_headers: dict[str, str] | None = None
        #: the request headers of each purpose, built once
        self._purpose_headers: dict[str, dict[str, str]] = {}

    def _open(self) -> aiohttp.ClientSession:
        """The session of the running loop, made on first use."""
        loop = asyncio.get_running_loop()
        session = self._session
        if session is not None and self._loop is loop and not session.closed:
            return session
        if session is not None and not session.closed:
            session.detach()  # a session of a loop that is gone: its connections went with it
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, keepalive_timeout=KEEPALIVE_EXPIRY
        )
        session = aiohttp.ClientSession(
            connector=connector,
            # no session-wide headers: aiohttp merges those into a proxy's headers too
            timeout=self._timeout,
            # the environment's proxy is looked up here, once: trust_env would look it (and .netrc)
            # up on every request, a thread trip each
            trust_env=False,
        )
        self._proxy, auth = env_proxy(self._target)
        self._proxy_headers = None
        if auth is not None:
            credentials = {"Proxy-Authorization": auth.encode()}
            if self._target.scheme == "https":  # on the CONNECT request to the proxy
                self._proxy_headers = credentials
            else:  # a plain request goes to the proxy whole, its credentials among its headers
                self._headers.update(credentials)
                self._purpose_headers.clear()
        self._session, self._loop = session, loop
        return session

    def _headers_for(self, purpose: str) -> dict[str, str]:
        headers = self._purpose_headers.get(purpose)
        if headers is None:
            headers = {**self._headers, self._purpose_header: purpose}
            self._purpose_headers[purpose] = headers
        return headers

    async def post(self, body: bytes, purpose: str, *, max_error_bytes: int) -> Any:
        """POST ``body``; the response, its body unread (read it, then ``finish``)."""
        session = self._open()
        try:
            response = await session.post(
                self._target,
                data=body,
                headers=self._headers_for(purpose),
                proxy=self._proxy,
                proxy_headers=self._proxy_headers,
                timeout=self._timeout,
                # as the SDK's client: a redirect is an answer, never a second POST (or a GET)
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError) as exc:
            raise _failure(exc) from exc
        if response.status >= 400:
            # read (as far as the cap) and released: a connection read to its end is kept
            content = await self.read(response, max_bytes=max_error_bytes, capped=False)
            raise HttpStatusError(response.status, response.headers, content)
        return response

    async def read(self, response: Any, *, max_bytes: int, capped: bool = True) -> bytes:
        """The body of ``response``, released after (its connection kept when read whole)."""
        parts: list[bytes] = []
        size = 0
        content = response.content
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    if capped:
                        raise BodyTooLarge(size)
                    break
        except (aiohttp.ClientError, OSError) as exc:
            response.close()
            raise _failure(exc, read_timeout=self.read_timeout) from exc
        except BaseException:
            response.close()
            raise
        self.finish(response, ended=content.at_eof())
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def read_chunk(self, response: Any) -> bytes:
        """What has arrived of the body of ``response`` (``b""`` at its end)."""
        try:
            chunk: bytes = await response.content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            raise _failure(exc, read_timeout=self.read_timeout) from exc
        return chunk

    @staticmethod
    def finish(response: Any, *, ended: bool) -> None:
        """Done with ``response``: its connection pooled if its body was read to the end."""
        if ended:
            response.release()
        else:
            response.close()

    async def aclose(self) -> None:
        """Close the session (one of another, finished loop is dropped with that loop)."""
        session, self._session = self._session, None
        loop, self._loop = self._loop, None
        if session is None or session.closed:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            await session.close()
        else:  # its loop is gone, and its connections with it: only mark it closed
            session.detach()
