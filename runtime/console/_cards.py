"""One card per compaction and microcompaction, with the figures its record holds, and what
the Compactions tile's colour says. Pure, no I/O; every figure is the log's (``stowage show``
prints the same ones), never worked out again here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stowage.core import CompactionRecord, MicrocompactRecord
from stowage.facade import TokenFigure

__all__ = ["CompactionCard", "CompactionTone", "compaction_card", "compaction_tone"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionCard:
    """One compaction or microcompaction, with the figures its record holds."""

    number: int
    seq: int
    ts: str
    kind: str  # full, fallback or micro
    reason: str
    round: int
    turn: int
    tokens_before: int | None
    tokens_after: int | None
    estimated: bool
    removed: int
    retained: int
    covers_through: int | None
    #: tokens in use when it was applied: the figure the chart and ``list`` show for the
    #: session at that moment (a record with ``figures`` says it as its ``tokens_before``;
    #: an older record's ``tokens_before`` is the figure its plan was made on)
    in_use: int | None
    #: whether ``in_use`` had no reported usage in it
    in_use_estimated: bool
    #: ``in_use`` as a fraction of usable: where the compaction was applied
    applied_at: float | None
    #: seconds a request was held back for it (when the record says)
    waited: float | None
    summary: str
    protected: str
    #: the tokens in use the compaction was decided on (its record's figures; None in older logs)
    decided_tokens: int | None = None
    #: the usable budget it was applied against
    usable: int | None = None
    #: how its summary fared against its probes (None: not checked)
    checked: str | None = None

    @property
    def freed(self) -> int | None:
        """Tokens it took out of history: its record's before less its after."""
        if self.tokens_before is None or self.tokens_after is None:
            return None
        return self.tokens_before - self.tokens_after


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionTone:
    """What the Compactions tile's colour says: where the newest full compaction was applied."""

    tone: str
    note: str


def compaction_tone(cards: Sequence[CompactionCard], marks: dict[str, float]) -> CompactionTone:
    """The tone of the newest full compaction among ``cards``."""
    full = [c for c in cards if c.kind != "micro"]
    if not full:
        return CompactionTone(tone="none", note="no compaction yet")
    newest = full[-1]
    if newest.applied_at is None:
        return CompactionTone(tone="at-mark", note="newest: usable not recorded")
    where = f"newest at {newest.applied_at:.0%} of usable"
    if newest.applied_at >= marks["hard_mark"]:
        return CompactionTone(
            tone="forced",
            note=f"{where}: at the hard mark ({marks['hard_mark']:.0%}), a round waited",
        )
    if newest.applied_at >= marks["compact_mark"]:
        return CompactionTone(
            tone="at-mark", note=f"{where}: at the compact mark ({marks['compact_mark']:.0%})"
        )
    return CompactionTone(tone="ahead", note=f"{where}: ahead of the compact mark")


def _snapshot_text(snapshot: dict[str, Any] | None) -> str:
    return json.dumps(snapshot, indent=2, sort_keys=True) if snapshot else "(none)"


def compaction_card(
    record: CompactionRecord | MicrocompactRecord,
    *,
    number: int,
    round_: int,
    turn: int,
    in_use: TokenFigure | None,
) -> CompactionCard:
    """The card of ``record``, the ``number``-th of its kind; ``round_`` and ``turn`` are the
    session's when a microcompaction (whose record does not say) was applied; ``in_use`` is
    ``token_figures``' figure at its seq."""
    tokens = in_use.tokens if in_use is not None else record.tokens_before
    usable = in_use.usable if in_use is not None else None
    common: dict[str, Any] = {
        "number": number,
        "seq": record.seq,
        "ts": record.ts,
        "reason": record.reason,
        "tokens_before": record.tokens_before,
        "tokens_after": record.tokens_after,
        "estimated": record.estimated,
        "in_use": tokens,
        "in_use_estimated": in_use.estimated if in_use is not None else record.estimated,
        "applied_at": in_use.share if in_use is not None else None,
        "usable": usable,
    }
    if isinstance(record, MicrocompactRecord):
        return CompactionCard(
            **common,
            kind="micro",
            round=round_,
            turn=turn,
            removed=len(record.stubbed),
            retained=0,
            covers_through=None,
            waited=None,
            summary="",
            protected="",
        )
    figures = record.figures
    return CompactionCard(
        **common,
        kind=record.kind,
        round=record.round,
        turn=record.turn,
        removed=record.removed,
        retained=len(record.retained),
        covers_through=record.covers_through,
        waited=record.waited,
        summary=record.summary,
        protected=_snapshot_text(record.protected),
        decided_tokens=figures.decided_tokens if figures is not None else None,
        checked=record.check.line if record.check is not None else None,
    )
