"""``stowage console``: the read-only web console over a store (the ``[server]`` extra)."""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = ["add_console_command", "console_main"]

_SERVER_EXTRA = ("jinja2", "starlette", "uvicorn")


def add_console_command(subparsers: Any) -> None:
    """Add ``console`` to the subparsers of ``stowage``."""
    console = subparsers.add_parser(
        "console", help="a read-only web console over the store, live (127.0.0.1:8377)"
    )
    console.add_argument(
        "--store",
        default=None,
        metavar="DIR|sqlite:///PATH|postgresql://...",
        help="where the logs are (default $STOWAGE_STORE, else ./.stowage)",
    )
    console.add_argument(
        "--schema",
        default=None,
        help="schema of a PostgreSQL store's tables (default: the URL's ?schema=, else public)",
    )
    console.add_argument(
        "--port", type=int, default=8377, help="port (default 8377; 0 picks a free one)"
    )
    console.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    console.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback (the console has no login)",
    )
    console.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name the console answers besides the address it listens on and the "
        "loopback names (repeatable; a remote console reached by its DNS name needs it)",
    )
    console.add_argument("--log-format", choices=["console", "json"], default="console")
    console.add_argument("--log-level", default="warning", help="debug, info, warning, error")


async def console_main(args: argparse.Namespace) -> int:
    """Run the console until interrupted. Raises ``ConfigError`` for a bad option, a missing
    ``[server]`` extra or a bad store spec."""
    from stowage.core import ConfigError

    from ._cost import configured_prices

    try:
        from stowage.console import serve_console
    except ModuleNotFoundError as exc:
        if exc.name not in _SERVER_EXTRA:
            raise
        raise ConfigError(
            f"the console needs the [server] extra ({exc.name} is missing): "
            "pip install 'stowage-runtime[server]'"
        ) from exc
    if not 0 <= args.port < 65536:
        raise ConfigError(f"--port {args.port} is not a port; use 1-65535 (0: any free port)")
    spec = args.store or os.environ.get("STOWAGE_STORE") or ".stowage"
    return await serve_console(
        spec,
        host=args.host,
        port=args.port,
        allow_remote=args.allow_remote,
        schema=args.schema,
        allowed_hosts=tuple(args.allowed_host),
        prices=configured_prices(),
    )
