"""The ``stowage`` command line.

It needs the ``[cli]`` extra (rich for the terminal, psutil for the load report). Without it the
command says so in one line instead of a traceback, which is why ``main`` imports lazily here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

_CLI_EXTRA = ("rich", "psutil")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. Raises nothing a user should see."""
    try:
        from ._main import main as run
    except ModuleNotFoundError as exc:
        if exc.name not in _CLI_EXTRA:
            raise
        print(
            f"stowage: the command line needs {exc.name!r}; "
            "install it with: pip install 'stowage-runtime[cli]'",
            file=sys.stderr,
        )
        return 2
    return run(argv)
