"""``stowage console``: the read-only web console over a store (the ``[server]`` extra)."""

from __future__ import annotations

import argparse
import os

__all__ = ["console_main"]

_SERVER_EXTRA = ("jinja2", "starlette", "uvicorn")


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
