"""``stowage compact ID`` and ``stowage milestone ID NAME``: as the session, with the model,
endpoint, settings and tools it recorded (``runtime_as_the_session``); an option typed is an
override, recorded."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stowage.core import (
    CompactionFailed,
    CompactionSkipped,
    CompactionWaited,
    Event,
    HistoryCompacted,
    LogRepaired,
    LogStore,
    MilestoneReached,
    SettingsChanged,
)
from stowage.facade import Runtime

from ._run_options import repair_notice, runtime_as_the_session, settings_notice

__all__ = ["add_compact_arguments", "add_milestone_arguments", "compact_main", "milestone_main"]


def add_compact_arguments(parser: argparse.ArgumentParser) -> None:
    """``stowage compact ID [--focus TEXT] [--reground]``."""
    parser.add_argument("session")
    parser.add_argument("--focus", default=None, help="what the summary must cover in full detail")
    parser.add_argument(
        "--reground",
        action="store_true",
        help="make the summary from the log's original records since the last re-grounded "
        "compaction, not from the summary before it",
    )


async def _as_the_session(
    args: argparse.Namespace,
    store: LogStore,
    store_dir: Path,
    durability: str | None,
    **extra: object,
) -> Runtime:
    """The runtime session ``args.session`` continues in (typed options over its identity,
    recorded); the store is closed on a failure."""
    extra["store"] = store_dir
    if durability is not None:
        extra["durability"] = durability
    return await runtime_as_the_session(args, store, args.session, **extra)


def _report(event: Event) -> None:
    if isinstance(event, CompactionFailed):
        fallback = "; falling back to the no-model digest" if event.fallback else ""
        print(f"[summary attempt {event.attempt} failed: {event.error}{fallback}]", file=sys.stderr)
    elif isinstance(event, SettingsChanged):
        print(settings_notice(event), file=sys.stderr)
    elif isinstance(event, LogRepaired):
        print(repair_notice(event), file=sys.stderr)
    elif isinstance(event, CompactionWaited):
        print(f"[waited {event.seconds:.2f}s for compaction: {event.reason}]", file=sys.stderr)


async def compact_main(
    args: argparse.Namespace, store: LogStore, *, store_dir: Path, durability: str | None
) -> int:
    """Compact session ``args.session`` of ``store`` now, with the session's own model and endpoint
    (typed options override them, recorded); prints the figures. Returns the exit status; raises
    what ``Runtime.resume`` raises (``SessionBusy`` among them) and ``ConfigError``."""
    runtime = await _as_the_session(args, store, store_dir, durability)
    compacted: list[HistoryCompacted] = []
    skipped: list[CompactionSkipped] = []
    async with runtime as rt:
        rt.subscribe(_report)
        rt.subscribe(lambda e: compacted.append(e) if isinstance(e, HistoryCompacted) else None)
        rt.subscribe(lambda e: skipped.append(e) if isinstance(e, CompactionSkipped) else None)
        session = await rt.resume(args.session)
        done = await session.compact(args.focus, reground=args.reground)
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


def add_milestone_arguments(parser: argparse.ArgumentParser) -> None:
    """``stowage milestone ID NAME [--note TEXT]``."""
    parser.add_argument("session")
    parser.add_argument("name", help="the phase of the work that ended")
    parser.add_argument("--note", default=None, help="what it found or left, in a sentence")


async def milestone_main(
    args: argparse.Namespace, store: LogStore, *, store_dir: Path, durability: str | None
) -> int:
    """Record milestone ``args.name`` of session ``args.session``, as the session (its own model and
    endpoint: above the soft mark it compacts there); prints what happened. Returns the exit status;
    raises what ``Runtime.resume`` raises and ``ConfigError``."""
    runtime = await _as_the_session(args, store, store_dir, durability)
    compacted: list[HistoryCompacted] = []
    reached: list[MilestoneReached] = []
    async with runtime as rt:
        rt.subscribe(_report)
        rt.subscribe(lambda e: compacted.append(e) if isinstance(e, HistoryCompacted) else None)
        rt.subscribe(lambda e: reached.append(e) if isinstance(e, MilestoneReached) else None)
        session = await rt.resume(args.session)
        await session.milestone(args.name, args.note)
    where = f" at round {reached[-1].round} of turn {reached[-1].turn}" if reached else ""
    print(f"{args.session}: milestone {args.name!r} recorded{where}")
    for event in compacted:
        print(
            f"{args.session}: compacted at it ({event.kind}): tokens {event.tokens_before} -> "
            f"{event.tokens_after}"
        )
    return 0
