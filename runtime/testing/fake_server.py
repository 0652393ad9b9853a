"""Run the fake OpenAI server: ``python -m runtime.testing.fake_server --port 0``.

The first stdout line is ``listening http://HOST:PORT/v1``; it serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

import anyio
from stowage.load import parse_fault_rates
from stowage.model import ScriptedBrain

from ._fake_server import FakeOpenAIServer

__all__ = ["main"]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m runtime.testing.fake_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", type=Path, default=None, help="append request bodies (JSONL)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added per request")
    parser.add_argument("--tool-rounds", type=int, default=2)
    parser.add_argument(
        "--faults",
        default="",
        help="random faults per request, e.g. '429:0.05,500:0.02,slow:0.01'",
    )
    parser.add_argument("--slow-delay", type=float, default=1.0, help="seconds of a 'slow' fault")
    parser.add_argument(
        "--retry-after", type=float, default=0.2, help="Retry-After seconds of a random 429"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the random faults")
    parser.add_argument(
        "--context-window", type=int, default=None, help="window GET /v1/models/ID reports"
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
    args = parser.parse_args(argv)
    try:
        args.fault_rates = parse_fault_rates(args.faults)
    except ValueError as exc:
        parser.error(str(exc))
    return args


async def _serve(args: argparse.Namespace) -> None:
    server = FakeOpenAIServer(
        brain=ScriptedBrain(tool_rounds=args.tool_rounds),
        host=args.host,
        port=args.port,
        latency=args.latency,
        record=args.record,
        keep_requests=not args.forget_requests,
        fault_rates=args.fault_rates,
        slow_delay=args.slow_delay,
        retry_after=args.retry_after,
        seed=args.seed,
        context_window=args.context_window,
        window_field=args.window_field,
        api_key=args.require_key,
    )
    await server.serve(lambda line: print(line, flush=True))


def _ignore(signum: int, frame: FrameType | None) -> None:
    """uvicorn re-raises the signal it shut down on; by then there is nothing left to do."""


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM or SIGINT; returns the exit status."""
    args = _parse(argv)
    # uvicorn restores the handlers it found and re-raises the signal: make that a no-op.
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(signal.SIGINT, _ignore)
    anyio.run(_serve, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
