"""One session's token accounting: its budget, watermarks and the figure of its next request.

The sampler (to know whether its next request may go), the journal (to put the figure in each
committed snapshot) and the compactor (to decide) read the same figures from the same pure
functions of ``stowage.policy``, so they can never disagree about how full the context is.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from stowage.core import (
    PREVIEW_MIN_CHARS,
    HistoryEntry,
    OutputBudget,
    SessionState,
    Settings,
    ToolSpec,
    entry_chars,
)
from stowage.policy import (
    Budget,
    TokenStatus,
    Watermarks,
    calibrated_ratio,
    effective_threshold,
    resolve_budget,
    token_status,
)

__all__ = ["MIN_OUTPUT_CHARS", "Accounting", "USER_SHARE"]

#: share of the usable budget that kept user messages may take after a compaction
USER_SHARE = 0.25


#: the least ``Accounting.output_budget`` gives, however small the window: a page of a file
#: smaller than this is not worth a call
MIN_OUTPUT_CHARS = 1_000


class Accounting:
    """Budget, watermarks and token figures of one session. Raises ``ConfigError`` when the
    settings' window leaves no usable budget."""

    __slots__ = ("_output", "budget", "marks", "settings", "threshold", "tool_tokens")

    def __init__(self, settings: Settings, specs: Sequence[ToolSpec]) -> None:
        self.settings = settings
        self.marks = Watermarks.from_settings(settings)
        #: the seed's fixed threshold, when it applies (then the watermarks do not)
        self.threshold = effective_threshold(settings)
        self.budget: Budget | None = resolve_budget(settings, specs)
        self.tool_tokens = self.budget.tool_tokens if self.budget is not None else 0
        # the last ratio ``output_budget`` was asked at, and its answer (asked every tool round)
        self._output: tuple[float, OutputBudget | None] | None = None

    @property
    def active(self) -> bool:
        """Whether the watermark policy runs (a budget is known and auto compaction is on)."""
        return self.budget is not None and self.settings.auto_compact

    @property
    def usable(self) -> int:
        return self.budget.usable if self.budget is not None else 0

    def ratio(self, state: SessionState) -> float:
        """The session's calibrated chars per token."""
        return calibrated_ratio(state, self.tool_tokens)

    def status(self, state: SessionState, protected: str | None) -> TokenStatus:
        """Tokens of the history part of the next request (tool schemas are outside usable)."""
        return token_status(
            state,
            tool_tokens=self.tool_tokens,
            extra_chars=len(protected) if protected else 0,
            require_reported=self.settings.require_reported_usage,
        )

    def user_budget(self, ratio: float) -> int:
        """Characters of recent user messages a compaction keeps: the setting, capped in
        watermark mode at a quarter of the usable budget, so that on a small window the kept
        words alone cannot fill what the compaction is meant to free."""
        configured = self.settings.user_budget_chars
        if self.budget is None:
            return configured
        return min(configured, int(self.budget.usable * USER_SHARE * ratio))

    def reattach_chars(self, ratio: float) -> int:
        """Characters of the turn's recent reads a compaction may re-attach."""
        if self.budget is None:
            return 0
        return int(self.budget.usable * self.settings.reattach_share * ratio)

    def output_cap(self, ratio: float) -> int | None:
        """Characters above which a tool output is shown by its reference (and, from
        ``PREVIEW_MIN_CHARS``, its head and tail), at ``ratio`` chars a token:
        ``tool_output_cap`` of usable, and at least ``PREVIEW_MIN_CHARS``, but on a window too
        small for that half of usable. None without a budget or with the cap off."""
        share = self.settings.tool_output_cap
        if self.budget is None or not share:
            return None
        chars = self.budget.usable * ratio
        return max(min(PREVIEW_MIN_CHARS, int(chars / 2)), int(share * chars))

    def output_budget(self, ratio: float) -> OutputBudget | None:
        """How much of one tool output the window takes (``ToolContext.output``), at
        ``ratio`` chars a token. Whole: up to half the usable budget, and never above the cap
        (``output_cap``). A page of a longer output: no more than a mid-turn compaction
        re-attaches (``reattach_share``). Both at least ``MIN_OUTPUT_CHARS``. None without a
        budget (the seed's threshold mode) or with the cap off."""
        if self._output is not None and self._output[0] == ratio:
            return self._output[1]
        cap = self.output_cap(ratio)
        budget: OutputBudget | None = None
        if cap is not None:
            assert self.budget is not None  # a cap has a budget
            chars = self.budget.usable * ratio
            whole = max(MIN_OUTPUT_CHARS, min(cap, int(chars / 2)))
            reattach = self.settings.reattach_share
            page = whole
            if reattach > 0:
                page = min(whole, max(MIN_OUTPUT_CHARS, int(reattach * chars)))
            budget = OutputBudget(whole=whole, page=page)
        self._output = (ratio, budget)
        return budget

    def fraction(self, tokens: int | None) -> float | None:
        if tokens is None or self.budget is None:
            return None
        return tokens / max(1, self.budget.usable)


def stub_savings(
    history: Sequence[HistoryEntry], seqs: Collection[int], chars_per_token: float
) -> int:
    """Tokens that showing the outputs at ``seqs`` as stubs frees. Raises nothing."""
    chosen = set(seqs)
    if not chosen:
        return 0
    saved = sum(entry_chars(e) - entry_chars(e, chosen) for e in history if e.seq in chosen)
    return math.floor(saved / chars_per_token)
