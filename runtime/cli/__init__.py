"""The ``stowage`` command line.

It needs the ``[cli]`` extra (rich for the terminal, psutil for the load report). Without it the
command says so in one line instead of a traceback. Each command imports its own code when it
runs (``--version`` and ``--help`` import none of the runtime), so the missing extra shows up
when a command that needs it runs, and is caught here.
"""

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
