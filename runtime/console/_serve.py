"""Serve the console with uvicorn on one store until interrupted."""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Sequence

import uvicorn
from stowage.core import ConfigError, redact_url
from stowage.policy import PriceBook
from stowage.storage import PostgresStore, open_store

from ._app import LOOPBACK_HOSTS, create_app
from ._source import StoreReader

__all__ = ["is_loopback", "serve_console"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1 or localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_names(host: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The ``Host`` names a console listening on ``host`` answers: that address (bracketed too,
    for IPv6), the loopback names, and ``extra``. Never every name."""
    names = [*LOOPBACK_HOSTS, "[::1]", host, *extra]
    if ":" in host:
        names.append(f"[{host}]")
    return tuple(dict.fromkeys(n for n in names if n and n != "*"))


async def serve_console(
    spec: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8377,
    allow_remote: bool = False,
    schema: str | None = None,
    allowed_hosts: Sequence[str] = (),
    prices: PriceBook | None = None,
) -> int:
    """Serve the console for the store ``spec`` names on ``host:port``; returns 0 when stopped.
    ``prices``: session pages show what each session cost.

    Raises ``ConfigError`` for a non-loopback ``host`` without ``allow_remote`` (the console
    shows every message and tool output of every session) and for a bad store spec.
    ``schema`` names the tables' schema of a PostgreSQL store (default ``public``).

    Whatever the address, the console answers only requests whose ``Host`` names it: the
    address it listens on, the loopback names, and ``allowed_hosts`` (so a page of another site
    that resolves its own name to this address, DNS rebinding, is refused with 400).
    """
    if not is_loopback(host) and not allow_remote:
        raise ConfigError(
            f"--host {host} would show every session to the network; add --allow-remote to mean it"
        )
    if not is_loopback(host):
        print(
            f"warning: the console listens on {host}: anyone who can reach it reads every "
            "session of this store (there is no login)",
            file=sys.stderr,
        )
    sock = _bind(host, port)
    store = PostgresStore(spec, schema=schema) if schema and "://" in spec else open_store(spec)
    label = (redact_url(spec) or "") if "://" in spec else spec
    sqlite_path = spec.partition("://")[2][1:] if spec.startswith("sqlite://") else None
    reader = StoreReader(store, sqlite_path=sqlite_path)
    app = create_app(
        reader, store_label=label, allowed_hosts=host_names(host, allowed_hosts), prices=prices
    )
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"stowage console: http://{shown}:{bound}/  (store {label}; Ctrl-C stops)", flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        await store.aclose()
    return 0


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(
            f"--host {host}: {exc.strerror or exc}; use an address of this machine"
        ) from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port"
        ) from exc
    sock.set_inheritable(False)
    return sock
