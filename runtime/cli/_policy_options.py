"""The command line of the compaction policy: its options, and ``stowage compact``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from stowage.core import (
    DEFAULT_COMPACT_THRESHOLD,
    CompactionFailed,
    CompactionWaited,
    Event,
    HistoryCompacted,
    LogStore,
    Settings,
)
from stowage.facade import Runtime

__all__ = ["add_compact_arguments", "add_policy_options", "compact_main", "policy_settings"]


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text}")
    return value


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """The options of the compaction policy, with the defaults of ``Settings``."""
    d = Settings()
    parser.add_argument(
        "--compact-threshold",
        type=int,
        default=None,
        help="the seed's fixed rule: compact when reported usage reaches N tokens; when given it "
        "replaces the watermarks (default: watermarks for a known model or --context-window, "
        f"else {DEFAULT_COMPACT_THRESHOLD})",
    )
    parser.add_argument(
        "--context-window", type=int, default=None, help="model window (default: model registry)"
    )
    parser.add_argument(
        "--max-output-tokens",
        type=int,
        default=None,
        help="output cap per request, reserved from the window (default: registry, <= 1/4 window)",
    )
    parser.add_argument(
        "--compact-model", default=None, help="model for summaries (default: --model)"
    )
    parser.add_argument(
        "--require-reported-usage",
        action="store_true",
        help="never compact on an estimate: no reported usage, no compaction (the seed's rule)",
    )
    for name, default, what in (
        ("--soft-mark", d.soft_mark, "microcompact old tool outputs"),
        ("--compact-mark", d.compact_mark, "compact in the background"),
        ("--hard-mark", d.hard_mark, "block the next request until compacted"),
        ("--target-after", d.target_after, "most a compaction may leave, else fall back"),
    ):
        parser.add_argument(
            name, type=_fraction, default=default, help=f"{what} (default {default})"
        )
    parser.add_argument(
        "--keep-rounds",
        type=int,
        default=d.keep_rounds,
        help=f"tool rounds never microcompacted (default {d.keep_rounds})",
    )


def policy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Settings`` fields the policy options give."""
    return {
        "compact_threshold": args.compact_threshold,
        "context_window": args.context_window,
        "max_output_tokens": args.max_output_tokens,
        "compact_model": args.compact_model,
        "require_reported_usage": args.require_reported_usage,
        "soft_mark": args.soft_mark,
        "compact_mark": args.compact_mark,
        "hard_mark": args.hard_mark,
        "target_after": args.target_after,
        "keep_rounds": args.keep_rounds,
    }


def add_compact_arguments(parser: argparse.ArgumentParser) -> None:
    """``stowage compact ID [--focus TEXT]``."""
    parser.add_argument("session")
    parser.add_argument("--focus", default=None, help="what the summary must cover in full detail")


def _report(event: Event) -> None:
    if isinstance(event, CompactionFailed):
        fallback = "; falling back to the no-model digest" if event.fallback else ""
        print(f"[summary attempt {event.attempt} failed: {event.error}{fallback}]", file=sys.stderr)
    elif isinstance(event, CompactionWaited):
        print(f"[waited {event.seconds:.2f}s for compaction: {event.reason}]", file=sys.stderr)


async def compact_main(args: argparse.Namespace, settings: Settings, store: LogStore) -> int:
    """Compact session ``args.session`` of ``store`` now; prints the figures. Returns the exit
    status; raises what ``Runtime.resume`` raises (``SessionBusy`` among them)."""

    compacted: list[HistoryCompacted] = []
    async with Runtime(settings, store=store) as rt:
        rt.subscribe(_report)
        rt.subscribe(lambda e: compacted.append(e) if isinstance(e, HistoryCompacted) else None)
        session = await rt.resume(args.session)
        done = await session.compact(args.focus)
    if not done or not compacted:
        print(f"{args.session}: nothing compacted")
        return 1
    event = compacted[-1]
    est = " (estimated)" if event.estimated else ""
    print(
        f"{args.session}: compacted ({event.kind}): tokens {event.tokens_before} -> "
        f"{event.tokens_after}{est}, removed {event.removed}, retained {event.retained}"
    )
    return 0
