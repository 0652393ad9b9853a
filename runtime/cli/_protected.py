"""``stowage protect``: change a session's objective and constraints from the command line.

The change goes through a resumed session, like any other user input, so it is checked,
logged as a ``protected`` record and serialized with turns; nothing here writes the log itself.
"""

from __future__ import annotations

import argparse
import sys

from stowage.core import LogStore, Settings, render
from stowage.facade import Runtime

__all__ = ["add_protect_options", "protect_main"]


def add_protect_options(parser: argparse.ArgumentParser, *, drop: bool = False) -> None:
    """``--objective TEXT`` and ``--constraint TEXT`` (repeatable); with ``drop`` also
    ``--drop-constraint ENTRY_ID`` (repeatable)."""
    parser.add_argument(
        "--objective", default=None, help="the session's objective (protected: never summarized)"
    )
    parser.add_argument(
        "--constraint",
        action="append",
        default=[],
        metavar="TEXT",
        help="a constraint that must hold through every compaction (repeatable)",
    )
    if drop:
        parser.add_argument(
            "--drop-constraint",
            action="append",
            default=[],
            metavar="ENTRY_ID",
            help="drop the constraint with this id, e.g. c2 (repeatable)",
        )


async def protect_main(args: argparse.Namespace, store: LogStore) -> int:
    """Apply the options to session ``args.session`` of ``store`` and print its protected state.

    Raises ``SessionNotFound``, ``ProtectedStateViolation`` (nothing changed) and what
    ``Runtime.resume`` raises (``SessionBusy`` among them); the CLI turns them into its exit
    statuses.
    """

    # the model is never called: a protect changes state between turns, it runs none
    settings = Settings(tools="none", model="scripted")
    async with Runtime(settings, store=store) as rt:
        session = await rt.resume(args.session)
        state = await session.protect(
            objective=args.objective,
            add_constraints=args.constraint,
            drop_constraints=args.drop_constraint,
        )
    sys.stdout.write((render(state) or "(no protected state)") + "\n")
    return 0
