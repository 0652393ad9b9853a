"""``stowage cost ID``: what a session cost, from its log.

Only reads (no lease, no lock file). Prices: ``[prices."MODEL"]`` in ``stowage.toml`` (or
``STOWAGE_PRICES``), else genai-prices' table (the ``cost`` extra); a model neither knows
costs "unknown", with the reason on stderr. ``--json`` writes one object whose money figures
are decimal strings, exact (``jq '.usd | tonumber'``).
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from stowage.policy import money

from ._store_args import reader_store

if TYPE_CHECKING:
    from stowage.policy import CompactionCost, CostReport, Prices

__all__ = [
    "configured_prices",
    "cost_json",
    "cost_lines",
    "cost_main",
    "exact_usd",
]


def configured_prices() -> Prices:
    """The custom prices of the configuration over genai-prices' table. Raises
    ``ConfigError`` for a bad ``[prices]`` table or ``STOWAGE_PRICES``."""
    from stowage.policy import Prices

    from ._config import load_config

    return Prices(custom=dict(load_config().prices))


def exact_usd(usd: Decimal | None) -> str | None:
    """The exact decimal, without trailing zeros or an exponent."""
    return None if usd is None else format(usd.normalize(), "f")


#: the figures of a compaction in ``--json``, in order; the money ones as exact decimals
_COMPACTION_FIELDS: tuple[str, ...] = ("seq", "round", "kind", "usd", "removed_tokens")
_COMPACTION_FIELDS += ("rounds_after", "input_saved", "uncached_saved", "usd_saved", "net_usd")
_RESUME_FIELDS = ("seq", "round", "ts", "input_tokens", "cached_tokens", "share")


def _compaction_json(c: CompactionCost) -> dict[str, Any]:
    values = {name: getattr(c, name) for name in _COMPACTION_FIELDS}
    return {
        k: exact_usd(v) if k in ("usd", "usd_saved", "net_usd") else v for k, v in values.items()
    }


def cost_json(session_id: str, report: CostReport) -> dict[str, Any]:
    """The ``--json`` object of ``report``."""
    return {
        "session": session_id,
        "usd": exact_usd(report.usd),
        "rounds_usd": exact_usd(report.usd_of("round")),
        "summaries_usd": exact_usd(report.usd_of("summary")),
        "unknown": list(report.unknown),
        "requests": len(report.requests),
        "rounds_without_usage": report.rounds_without_usage,
        "input_tokens": report.tokens.input_tokens,
        "cached_tokens": report.tokens.cached_tokens,
        "cache_write_tokens": report.tokens.cache_write_tokens,
        "output_tokens": report.tokens.output_tokens,
        "cached_share": report.cached_share,
        "sources": sorted({r.source for r in report.requests if r.usd is not None}),
        "compactions": [_compaction_json(c) for c in report.compactions],
        "resumes": [{name: getattr(r, name) for name in _RESUME_FIELDS} for r in report.resumes],
    }


def _share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def cost_lines(session_id: str, report: CostReport) -> list[str]:
    """What ``stowage cost ID`` prints for people."""
    rounds = sum(1 for r in report.requests if r.purpose == "round")
    summaries = len(report.requests) - rounds
    lines = [
        f"session {session_id}: {money(report.usd)} "
        f"(rounds {money(report.usd_of('round'))}, summaries {money(report.usd_of('summary'))}) "
        f"over {rounds} rounds and {summaries} summary requests"
    ]
    if report.rounds_without_usage:
        lines.append(
            f"  {report.rounds_without_usage} rounds reported no usage: not priced, not counted"
        )
    tokens = report.tokens
    lines.append(
        f"tokens: {tokens.input_tokens:,} in ({_share(report.cached_share)} cached: "
        f"{tokens.cached_tokens:,}), {tokens.cache_write_tokens:,} written to the cache, "
        f"{tokens.output_tokens:,} out"
    )
    for c in report.compactions:
        if c.removed_tokens is None:
            saved = "saved unknown (its record has no token figures)"
        else:
            saved = (
                f"took {c.removed_tokens:,} tokens out of {c.rounds_after} later requests: "
                f"saved {money(c.usd_saved)} (net {money(c.net_usd)}), "
                f"{c.uncached_saved:,} uncached tokens fewer"
            )
        lines.append(f"compaction at round {c.round} ({c.kind}): cost {money(c.usd)}; {saved}")
    for r in report.resumes:
        lines.append(
            f"resumed at round {r.round} ({r.ts[:19].replace('T', ' ')}): "
            f"{_share(r.share)} of its first request's input cached"
        )
    return lines


async def cost_main(args: argparse.Namespace) -> int:
    from stowage.core import lineage_store, validate_session_id
    from stowage.policy import session_cost

    prices = configured_prices()
    store = lineage_store(reader_store(args))
    try:
        # a fork's parents are read for its model; their requests are theirs, not counted
        lineage = await store.lineage(validate_session_id(args.session))
    finally:
        await store.aclose()
    report = session_cost(lineage.records, prices, own_from=lineage.own_from)
    if args.json:
        sys.stdout.write(json.dumps(cost_json(args.session, report)) + "\n")
    else:
        sys.stdout.write("\n".join(cost_lines(args.session, report)) + "\n")
    for why in report.unknown:
        print(f"unknown price: {why}", file=sys.stderr)
    return 0
