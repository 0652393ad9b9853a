"""N sessions x T turns with compaction under concurrency, then proof that nothing was lost.

    python scripts/load_compaction.py --sessions 100 --turns 8 --latency 0.05 --json out.json

The same as ``stowage load`` (the engine is ``runtime._load``); exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys

import anyio
from stowage.core._errors import StowageError
from stowage.core._logging import configure_logging
from stowage.load._engine import add_load_arguments, main_load


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the load, return the exit status."""
    parser = argparse.ArgumentParser(prog="load_compaction.py", description=__doc__)
    add_load_arguments(parser)
    parser.add_argument("--log-level", default="warning", help="debug, info, warning, error")
    args = parser.parse_args(argv)
    configure_logging("console", args.log_level)
    try:
        return int(anyio.run(main_load, args))
    except StowageError as exc:
        print(f"load: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
