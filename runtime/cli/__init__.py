"""The ``stowage`` command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

_CLI_EXTRA = ("rich", "psutil", "prompt_toolkit")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. Raises nothing a user should see."""
    try:
        from ._main import main as run

        return run(argv)
    except ModuleNotFoundError as exc:
        if exc.name not in _CLI_EXTRA:
            raise
        print(
            f"stowage: the command line needs {exc.name!r}; "
            "install it with: pip install 'stowage-runtime[cli]'",
            file=sys.stderr,
        )
        return 2
