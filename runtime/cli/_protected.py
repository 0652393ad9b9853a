"""``stowage protect``: change a session's objective and constraints from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stowage.core import Event, LogRepaired, LogStore, SettingsChanged, render

from ._run_options import repair_notice, runtime_as_the_session, settings_notice

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


def _notice(event: Event) -> None:
    """An override typed now, and a torn last line cut on open: one line each on stderr."""
    if isinstance(event, SettingsChanged):
        print(settings_notice(event), file=sys.stderr)
    elif isinstance(event, LogRepaired):
        print(repair_notice(event), file=sys.stderr)


async def protect_main(
    args: argparse.Namespace,
    store: LogStore,
    *,
    store_dir: Path = Path(".stowage"),
    durability: str | None = None,
) -> int:
    """Apply the options to session ``args.session`` of ``store``, as the session (typed model
    options override its identity, recorded), and print its protected state. Raises
    ``SessionNotFound``, ``ProtectedStateViolation`` (nothing changed), ``ConfigError`` and what
    ``Runtime.resume`` raises (``SessionBusy`` among them); the CLI turns them into its exit
    statuses."""
    extra: dict[str, object] = {"store": store_dir}
    if durability is not None:
        extra["durability"] = durability
    async with await runtime_as_the_session(args, store, args.session, **extra) as rt:
        rt.subscribe(_notice)
        session = await rt.resume(args.session)
        state = await session.protect(
            objective=args.objective,
            add_constraints=args.constraint,
            drop_constraints=args.drop_constraint,
        )
    sys.stdout.write((render(state) or "(no protected state)") + "\n")
    return 0
