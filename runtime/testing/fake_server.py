"""Run the fake OpenAI server: ``stowage fake-server`` (or ``python -m stowage.testing.fake_server``).

It answers Chat Completions and the Responses API with the offline scripted brain, so that
``stowage run --model any-name --base-url URL`` can be tried, and tested, against a real HTTP
endpoint with no account and no network. The first stdout line is ``listening
http://HOST:PORT/v1``; it serves until SIGTERM or SIGINT (Ctrl-C), then exits 0. It needs the
``server`` extra (starlette, uvicorn).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

import anyio
from stowage.core import ConfigError
from stowage.load import parse_fault_rates
from stowage.model import ScriptedBrain

__all__ = ["add_arguments", "main", "serve"]

#: the modules of the ``server`` extra the fake server needs
_SERVER_EXTRA = ("starlette", "uvicorn")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The fake server's options (``stowage fake-server`` and ``python -m`` share them)."""
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    parser.add_argument("--record", type=Path, default=None, help="append request bodies (JSONL)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added per request")
    parser.add_argument("--tool-rounds", type=int, default=2)
    parser.add_argument(
        "--faults", default="", help="random faults per request, e.g. '429:0.05,500:0.02,slow:0.01'"
    )
    parser.add_argument("--slow-delay", type=float, default=1.0, help="seconds of a 'slow' fault")
    parser.add_argument(
        "--retry-after", type=float, default=0.2, help="Retry-After seconds of a random 429"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the random faults")
    parser.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="window GET /v1/models/ID reports (and /v1/messages enforces)",
    )
    parser.add_argument(
        "--window-field", default="max_model_len", help="field that window is reported in"
    )
    parser.add_argument(
        "--require-key", default=None, metavar="KEY", help="answer 401 to any other API key"
    )
    parser.add_argument(
        "--forget-requests",
        action="store_true",
        help="keep no request bodies in memory (GET /_fake/stats still counts and checks them)",
    )
    parser.add_argument(
        "--no-compact-endpoint",
        action="store_true",
        help="answer 404 to POST /v1/responses/compact (test the local fallback)",
    )


def _ignore(signum: int, frame: FrameType | None) -> None:
    """uvicorn re-raises the signal it shut down on; by then there is nothing left to do."""


async def serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; returns 0. Prints ``listening <url>`` once it answers.

    Raises ``ConfigError`` for a bad option or a missing ``server`` extra.
    """
    if not 0 <= args.port < 65536:
        raise ConfigError(f"--port {args.port} is not a port; use 1-65535 (0: any free port)")
    if args.latency < 0:
        raise ConfigError(f"--latency {args.latency}: seconds cannot be negative")
    if args.context_window is not None and args.context_window <= 0:
        raise ConfigError(f"--context-window {args.context_window}: give a positive token count")
    try:
        fault_rates = parse_fault_rates(args.faults)
    except ValueError as exc:
        raise ConfigError(f"--faults {args.faults!r}: {exc}") from None
    try:
        # the server extra, only when a server is asked for
        from ._fake_server import FakeOpenAIServer
    except ModuleNotFoundError as exc:
        if exc.name not in _SERVER_EXTRA:
            raise
        raise ConfigError(
            f"the fake server needs the [server] extra ({exc.name} is missing): "
            "pip install 'stowage-runtime[server]'"
        ) from exc
    server = FakeOpenAIServer(
        brain=ScriptedBrain(tool_rounds=args.tool_rounds),
        host=args.host,
        port=args.port,
        latency=args.latency,
        record=args.record,
        keep_requests=not args.forget_requests,
        fault_rates=fault_rates,
        slow_delay=args.slow_delay,
        retry_after=args.retry_after,
        seed=args.seed,
        context_window=args.context_window,
        window_field=args.window_field,
        api_key=args.require_key,
        compact_endpoint=not args.no_compact_endpoint,
    )
    # uvicorn restores the handlers it found and re-raises the signal it stopped on: make
    # that a no-op while it serves, so Ctrl-C and SIGTERM end it with status 0
    before = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        await server.serve(lambda line: print(line, flush=True))
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM or SIGINT; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m stowage.testing.fake_server")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return anyio.run(serve, args)
    except ConfigError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
