"""``stowage compact ID``: compact a session now, with the model and endpoint it runs with."""

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
    LogStore,
    SettingsChanged,
)
from stowage.facade import Runtime

from ._run_options import continued_settings, settings_notice

__all__ = ["add_compact_arguments", "compact_main"]


def add_compact_arguments(parser: argparse.ArgumentParser) -> None:
    """``stowage compact ID [--focus TEXT]``."""
    parser.add_argument("session")
    parser.add_argument("--focus", default=None, help="what the summary must cover in full detail")


def _report(event: Event) -> None:
    if isinstance(event, CompactionFailed):
        fallback = "; falling back to the no-model digest" if event.fallback else ""
        print(f"[summary attempt {event.attempt} failed: {event.error}{fallback}]", file=sys.stderr)
    elif isinstance(event, SettingsChanged):
        print(settings_notice(event), file=sys.stderr)
    elif isinstance(event, CompactionWaited):
        print(f"[waited {event.seconds:.2f}s for compaction: {event.reason}]", file=sys.stderr)


async def compact_main(
    args: argparse.Namespace, store: LogStore, *, store_dir: Path, durability: str | None
) -> int:
    """Compact session ``args.session`` of ``store`` now, with the session's own model and
    endpoint (typed options override them, recorded); prints the figures.

    A compaction that would not make history smaller is not written: that is said, and the
    status is still 0. Returns the exit status; raises what ``Runtime.resume`` raises
    (``SessionBusy`` among them) and ``ConfigError``.
    """
    extra: dict[str, object] = {"store": store_dir, "compact_only_if_smaller": True}
    if durability is not None:
        extra["durability"] = durability
    try:
        settings, overrides, _ = await continued_settings(args, store, args.session, **extra)
    except BaseException:
        await store.aclose()
        raise
    compacted: list[HistoryCompacted] = []
    skipped: list[CompactionSkipped] = []
    async with Runtime(settings, store=store, overrides=overrides) as rt:
        rt.subscribe(_report)
        rt.subscribe(lambda e: compacted.append(e) if isinstance(e, HistoryCompacted) else None)
        rt.subscribe(lambda e: skipped.append(e) if isinstance(e, CompactionSkipped) else None)
        session = await rt.resume(args.session)
        done = await session.compact(args.focus)
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
