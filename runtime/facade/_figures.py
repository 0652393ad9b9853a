"""Tokens in use along a log: one figure per round and per compaction, for every reader.

The console's chart and cards, ``stowage show``, ``list`` and ``context`` all say how full a
session was at some record. They read it here, from the fold the runtime itself runs and the
function the sampler decides with (``policy.token_status``), so one round never shows three
figures: after a round commits, the figure of its next request's history; at a compaction or
microcompaction, the figure when it was applied (its record's ``tokens_before`` is the figure
its plan was made on, which a plan made in the background can be rounds older than).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stowage.core import (
    CompactionRecord,
    CorruptLogError,
    MicrocompactRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SessionState,
    SettingsChangedRecord,
    render,
)
from stowage.policy import token_status

from ._identity import recorded_budget

__all__ = ["TokenFigure", "token_figures"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenFigure:
    """How full the session was at one record."""

    #: tokens of history in the next request (tool schemas are outside usable and not in it)
    tokens: int
    #: no reported usage went into it (characters at the calibrated ratio only)
    estimated: bool
    #: the usable budget at that point (None when the log cannot say)
    usable: int | None

    @property
    def how(self) -> str:
        return "estimated" if self.estimated else "reported"

    @property
    def share(self) -> float | None:
        """``tokens`` as a fraction of ``usable``."""
        return self.tokens / self.usable if self.usable else None


def token_figures(session_id: str, records: Sequence[Record]) -> dict[int, TokenFigure]:
    """The figure at each round commit (after it) and each compaction and microcompaction
    (before it), by seq. Records that do not fold are skipped, as the console shows a damaged
    log rather than failing. Raises nothing."""
    has_stubs = any(isinstance(r, MicrocompactRecord) for r in records)
    folded = SessionState(session_id=session_id)
    usable: int | None = None
    tool_tokens = 0
    figures: dict[int, TokenFigure] = {}

    def figure() -> TokenFigure | None:
        try:
            protected = len(render(folded.protected))
        except CorruptLogError:
            protected = 0
        status = token_status(folded, tool_tokens=tool_tokens, extra_chars=protected)
        if status.tokens is None:
            return None
        return TokenFigure(tokens=status.tokens, estimated=status.estimated, usable=usable)

    for index, record in enumerate(records):
        before = figure() if isinstance(record, CompactionRecord | MicrocompactRecord) else None
        try:
            folded.apply(record)
        except CorruptLogError:
            continue
        if isinstance(record, SessionRecord | SettingsChangedRecord):
            # the budget from here on: a window or model override changes it
            try:
                recorded = recorded_budget(records[: index + 1], has_stubs=has_stubs)
            except Exception:  # a log another version wrote, or no session record first
                usable, tool_tokens = None, 0
            else:
                usable = recorded.usable
                tool_tokens = recorded.budget.tool_tokens if recorded.budget is not None else 0
        if isinstance(record, RoundCommittedRecord):
            after = figure()
            if after is not None:
                figures[record.seq] = after
        elif before is not None:
            figures[record.seq] = before
    return figures
