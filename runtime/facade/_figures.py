"""Tokens in use along a log, and in the next request: the figures every reader shows.

The console's chart and cards, ``stowage show``, ``list`` and ``context`` all say how full a
session was at some record. They read it here, from the fold the runtime itself runs and the
function the sampler decides with (``policy.token_status``), so one round never shows three
figures: after a round commits, the figure of its next request's history; at a compaction or
microcompaction, the figure when it was applied (its record's ``tokens_before`` is the figure
its plan was made on, which a plan made in the background can be rounds older than). What
the next request carries now (``session_figures``) is the same status, worked out once for
``list``, ``context`` and the console's sessions page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stowage.core import (
    CompactionRecord,
    ConfigError,
    CorruptLogError,
    MicrocompactRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SessionState,
    Settings,
    SettingsChangedRecord,
    render,
)
from stowage.policy import TokenStatus, known_budget, token_status

from ._identity import RecordedBudget, recorded_budget

__all__ = ["SessionFigures", "TokenFigure", "session_figures", "token_figures"]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFigures:
    """How full a session's next request is: what ``stowage list`` and ``context`` and the
    console's sessions page say of it."""

    #: the budget the log records (None: the reader could not work it out)
    recorded: RecordedBudget | None
    #: the next request's history; its ``tool_tokens`` are the tool schemas, outside usable
    status: TokenStatus

    @property
    def tokens(self) -> int | None:
        """Tokens of history in the next request (the tool schemas are not in it)."""
        return self.status.tokens

    @property
    def usable(self) -> int | None:
        """The usable budget (None when the log cannot say)."""
        return None if self.recorded is None else self.recorded.usable

    @property
    def tool_schemas(self) -> int:
        """Tokens of the tool schemas every request carries, outside usable (0 when unknown)."""
        return self.status.tool_tokens

    @property
    def percent_of_usable(self) -> float | None:
        """``tokens`` as a percentage of ``usable`` (None when either is unknown)."""
        tokens, usable = self.tokens, self.usable
        return 100 * tokens / usable if tokens is not None and usable else None


def session_figures(state: SessionState, recorded: RecordedBudget | None) -> SessionFigures:
    """The figures of the session folded into ``state``, whose log records the budget
    ``recorded`` (``recorded_budget``; None when a reader that shows damaged logs could not
    work it out: no usable budget, no tool schemas). Raises nothing."""
    budget = recorded.budget if recorded is not None else None
    status = _history_status(state, budget.tool_tokens if budget is not None else 0)
    return SessionFigures(recorded=recorded, status=status)


def _history_status(folded: SessionState, tool_tokens: int) -> TokenStatus:
    """The next request's history status (no protected message where its ops do not apply)."""
    try:
        protected = len(render(folded.protected))
    except CorruptLogError:
        protected = 0
    return token_status(folded, tool_tokens=tool_tokens, extra_chars=protected)


def token_figures(session_id: str, records: Sequence[Record]) -> dict[int, TokenFigure]:
    """The figure at each round commit (after it) and each compaction and microcompaction
    (when it was applied), by seq. A compaction's figures are its record's own (the tokens in
    use when it was applied, the usable budget then): what the machine recorded, never
    recomputed; a round's is the fold's status with the tool schemas its request's manifest
    recorded. Records that do not fold are skipped, as the console shows a damaged log rather
    than failing. Raises nothing."""
    has_stubs = any(isinstance(r, MicrocompactRecord) for r in records)
    folded = SessionState(session_id=session_id)
    settings: Settings | None = None
    usable: int | None = None
    tool_tokens = 0
    figures: dict[int, TokenFigure] = {}

    def figure() -> TokenFigure | None:
        status = _history_status(folded, tool_tokens)
        if status.tokens is None:
            return None
        # a reported figure the characters' floor replaced is an estimate, and says so
        estimated = status.estimated or status.floored
        return TokenFigure(tokens=status.tokens, estimated=estimated, usable=usable)

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
                settings, usable, tool_tokens = None, None, 0
            else:
                settings, usable = recorded.settings, recorded.usable
                tool_tokens = recorded.budget.tool_tokens if recorded.budget is not None else 0
        if isinstance(record, RoundCommittedRecord):
            schemas = _manifest_tools(record)
            if schemas is not None and settings is not None and schemas != tool_tokens:
                try:
                    budget = known_budget(settings, schemas)
                except ConfigError:
                    budget = None
                if budget is not None:
                    usable, tool_tokens = budget.usable, budget.tool_tokens
            after = figure()
            if after is not None:
                figures[record.seq] = after
        elif isinstance(record, CompactionRecord) and record.figures is not None:
            if record.tokens_before is not None:
                figures[record.seq] = TokenFigure(
                    tokens=record.tokens_before,
                    estimated=record.estimated,
                    usable=record.figures.usable,
                )
        elif before is not None:
            figures[record.seq] = before
    return figures


def _manifest_tools(record: RoundCommittedRecord) -> int | None:
    """The tool schema tokens the round's request carried, as its manifest recorded them."""
    if record.manifest is None:
        return None
    return next((s.tokens for s in record.manifest.sections if s.name == "tools"), 0)
