"""The command line of the compaction policy: its options."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stowage.core import DEFAULT_COMPACT_THRESHOLD, Settings

__all__ = ["add_policy_options", "policy_settings"]


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text}")
    return value


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """The options of the compaction policy. Each defaults to None ("not typed"): the value
    then comes from the configuration, or from the session's identity when it continues."""
    d = Settings()
    parser.add_argument(
        "--compact-threshold",
        type=int,
        default=None,
        help="a fixed threshold: compact when reported usage reaches N tokens; when given it "
        "replaces the watermarks (default: watermarks for a known model or --context-window, "
        f"else {DEFAULT_COMPACT_THRESHOLD})",
    )
    parser.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="model window (default: the model's profile, the registry, or the endpoint's answer)",
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
        default=None,
        help="never compact on an estimate: without reported usage, no compaction",
    )
    for name, default, what in (
        ("--soft-mark", d.soft_mark, "microcompact old tool outputs"),
        ("--compact-mark", d.compact_mark, "compact in the background"),
        ("--hard-mark", d.hard_mark, "block the next request until compacted"),
        ("--target-after", d.target_after, "most a compaction may leave, else fall back"),
    ):
        parser.add_argument(name, type=_fraction, default=None, help=f"{what} (default {default})")
    parser.add_argument(
        "--keep-rounds",
        type=int,
        default=None,
        help=f"tool rounds never microcompacted (default {d.keep_rounds})",
    )
    parser.add_argument(
        "--micro-min-free",
        type=_share,
        default=None,
        help="a compaction must free at least this share of the usable budget: "
        "microcompaction stubs old outputs only in batches that free that much, once per "
        "crossing of the soft mark, and below the hard mark a compaction that would free less "
        f"is not applied (default {d.micro_min_free})",
    )
    parser.add_argument(
        "--reattach-share",
        type=_share,
        default=None,
        help="share of the usable budget the outputs the current turn read most recently may "
        f"take when re-attached after a compaction (default {d.reattach_share})",
    )
    parser.add_argument(
        "--max-answer-chars",
        type=_positive,
        default=None,
        metavar="N",
        help="the most characters of one answer (text plus call arguments); a response past "
        f"it is not read further and is refused, then retried (default {d.max_answer_chars:,})",
    )
    parser.add_argument(
        "--compact-prompt-file",
        type=_readable_file,
        default=None,
        metavar="PATH",
        help="a file whose text replaces the built-in instructions of the summary request",
    )
    parser.add_argument(
        "--prompt-cache-key",
        default=None,
        metavar="KEY",
        help="prompt_cache_key sent with each request: 'session' derives one from the session "
        "id, '' sends none, anything else is sent as is (default 'session')",
    )


def _readable_file(text: str) -> Path:
    path = Path(text).expanduser()
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {exc}") from None
    if not content.strip():
        raise argparse.ArgumentTypeError(f"{text} is empty: write the compaction prompt in it")
    return path.resolve()


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1), got {text}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1), got {text}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text}")
    return value


def policy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Settings`` fields the policy options give (None: not typed)."""
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
        "micro_min_free": args.micro_min_free,
        "reattach_share": args.reattach_share,
        "max_answer_chars": args.max_answer_chars,
        "prompt_cache_key": args.prompt_cache_key,
        "compact_prompt_file": args.compact_prompt_file,
    }
