"""``stowage compact``, ``milestone`` and ``protect``: one change to a session, made as the session
(the model, endpoint, settings and tools it recorded); a typed option is an override, recorded.

A protect goes through a resumed session, like any other user input, so it is checked,
logged as a ``protected`` record and serialized with turns; nothing here writes the log itself.
It resumes the session as itself (its model, endpoint, window and tools, as recorded): a
protect calls no model, but resuming checks that the session's window still holds what every
request carries, and that is the session's own window and tools, not the offline model's.
"""

from __future__ import annotations

import argparse
import sys

from stowage.core import (
    CompactionFailed,
    CompactionSkipped,
    CompactionWaited,
    Event,
    HistoryCompacted,
    MilestoneReached,
    render,
)
from stowage.facade import Runtime

from ._run_options import runtime_as_the_session, say_opening
from ._store_args import open_cli_store, store_fields

__all__ = [
    "compact_main",
    "milestone_main",
    "protect_main",
]


async def _as_the_session(args: argparse.Namespace) -> Runtime:
    """The runtime session ``args.session`` continues in; the store is closed on a failure."""
    return await runtime_as_the_session(
        args, open_cli_store(args), args.session, **store_fields(args)
    )


def _report(event: Event) -> None:
    if isinstance(event, CompactionFailed):
        fallback = "; falling back to the no-model digest" if event.fallback else ""
        print(f"[summary attempt {event.attempt} failed: {event.error}{fallback}]", file=sys.stderr)
    elif isinstance(event, CompactionWaited):
        print(f"[waited {event.seconds:.2f}s for compaction: {event.reason}]", file=sys.stderr)
    else:
        say_opening(event)


async def protect_main(args: argparse.Namespace) -> int:
    """Apply the options to session ``args.session``, as the session (typed model
    options override its identity, recorded), and print its protected state. Raises
    ``SessionNotFound``, ``ProtectedStateViolation`` (nothing changed), ``ConfigError`` and what
    ``Runtime.resume`` raises (``SessionBusy`` among them); the CLI turns them into its exit
    statuses."""
    async with await _as_the_session(args) as rt:
        rt.subscribe(say_opening)
        session = await rt.resume(args.session)
        state = await session.protect(
            objective=args.objective,
            add_constraints=args.constraint,
            drop_constraints=args.drop_constraint,
        )
    sys.stdout.write((render(state) or "(no protected state)") + "\n")
    return 0


async def compact_main(args: argparse.Namespace) -> int:
    """Compact session ``args.session`` now, with the session's own model and endpoint
    (typed options override them, recorded); prints the figures. Returns the exit status; raises
    what ``Runtime.resume`` raises (``SessionBusy`` among them) and ``ConfigError``."""
    events: list[Event] = []
    async with await _as_the_session(args) as rt:
        rt.subscribe(_report)
        rt.subscribe(events.append)
        session = await rt.resume(args.session)
        done = await session.compact(args.focus, reground=args.reground)
    compacted = [e for e in events if isinstance(e, HistoryCompacted)]
    skipped = [e for e in events if isinstance(e, CompactionSkipped)]
    if not done or not compacted:
        why = f": {skipped[-1].reason}" if skipped else ""
        print(f"{args.session}: nothing compacted{why}")
        return 0
    event = compacted[-1]
    est = " (estimated)" if event.estimated else ""
    print(
        f"{args.session}: compacted ({event.kind}): tokens {event.tokens_before} -> "
        f"{event.tokens_after}{est}, removed {event.removed}, retained {event.retained}"
    )
    return 0


async def milestone_main(args: argparse.Namespace) -> int:
    """Record milestone ``args.name`` of session ``args.session``, as the session (its own model and
    endpoint: above the soft mark it compacts there); prints what happened. Returns the exit status;
    raises what ``Runtime.resume`` raises and ``ConfigError``."""
    events: list[Event] = []
    async with await _as_the_session(args) as rt:
        rt.subscribe(_report)
        rt.subscribe(events.append)
        session = await rt.resume(args.session)
        await session.milestone(args.name, args.note)
    compacted = [e for e in events if isinstance(e, HistoryCompacted)]
    reached = [e for e in events if isinstance(e, MilestoneReached)]
    where = f" at round {reached[-1].round} of turn {reached[-1].turn}" if reached else ""
    print(f"{args.session}: milestone {args.name!r} recorded{where}")
    for event in compacted:
        print(
            f"{args.session}: compacted at it ({event.kind}): tokens {event.tokens_before} -> "
            f"{event.tokens_after}"
        )
    return 0
