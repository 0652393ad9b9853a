"""One session's token accounting: its budget, marks and the limit no request may cross.

The sampler (to know whether its next request may go), the journal (to put the figure in each
boundary) and the compaction machine (to decide) read the same figures from this one value,
so they can never disagree about how full the context is or where the limit is. It is
immutable: a window learned from a provider's refusal makes a new one (``with_window``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from stowage.core import (
    PREVIEW_MIN_CHARS,
    HistoryEntry,
    OutputBudget,
    SessionState,
    Settings,
    ToolSpec,
    entry_chars,
)

from ._budget import Budget, effective_threshold, known_budget, tool_schema_tokens
from ._tokens import TokenStatus, calibrated_ratio, token_status
from ._watermarks import Watermarks

__all__ = ["MIN_OUTPUT_CHARS", "USER_SHARE", "Accounting", "stub_savings"]

#: share of the usable budget that kept user messages may take after a compaction
USER_SHARE = 0.25

#: the least ``Accounting.output_budget`` gives, however small the window: a page of a file
#: smaller than this is not worth a call
MIN_OUTPUT_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Accounting:
    """Budget, marks and token figures of one session (``of`` builds it from settings).

    ``threshold`` is the seed's fixed threshold when the session runs on it; ``budget`` is
    known when the window is (from the settings, the registry in watermark mode, or a
    provider's refusal): then the hard mark guards every request and tool outputs are capped,
    whatever the trigger."""

    settings: Settings
    marks: Watermarks
    threshold: int | None
    budget: Budget | None
    #: tokens the tool schemas take (outside usable; in the figures only with a budget)
    schemas: int

    @classmethod
    def of(cls, settings: Settings, specs: Sequence[ToolSpec]) -> Accounting:
        """Raises ``ConfigError`` when the settings' window leaves no usable budget."""
        schemas = tool_schema_tokens(specs)
        return cls(
            settings=settings,
            marks=Watermarks.from_settings(settings),
            threshold=effective_threshold(settings),
            budget=known_budget(settings, schemas),
            schemas=schemas,
        )

    def with_window(self, window: int) -> Accounting:
        """This accounting once the window is known to be ``window`` tokens (a provider said
        so): a new budget when it knew none, or when it assumed a larger one (the output
        reserve is then what that window allows); itself otherwise. The trigger stays what
        the session ran on: the guard and the caps are what a known window adds. Raises
        ``ConfigError`` when the window leaves no usable budget."""
        budget = self.budget
        if budget is not None and window >= budget.context_window:
            return self
        settings = self.settings.with_(context_window=window)
        if budget is not None and (self.settings.max_output_tokens or 0) * 4 > window:
            settings = settings.with_(max_output_tokens=None)  # the reserve this window allows
        return replace(self, settings=settings, budget=known_budget(settings, self.schemas))

    @property
    def tool_tokens(self) -> int:
        """Tool schema tokens the figures leave out (those of the budget; 0 without one, where
        reported usage is taken as the provider counted it)."""
        return self.budget.tool_tokens if self.budget is not None else 0

    @property
    def watermarks(self) -> bool:
        """Whether the session runs on the watermarks (no fixed threshold, a known window)."""
        return self.threshold is None and self.budget is not None

    @property
    def active(self) -> bool:
        """Whether the watermark triggers run (the watermarks, with auto compaction on)."""
        return self.watermarks and self.settings.auto_compact

    @property
    def usable(self) -> int:
        return self.budget.usable if self.budget is not None else 0

    @property
    def output_reserve(self) -> int | None:
        """The ``max_tokens`` every request sends: the reserve the budget keeps for output
        (None when no window is known: the setting, or the wire's own default)."""
        if self.budget is not None:
            return self.budget.output_reserve
        return self.settings.max_output_tokens

    def limit(self, fit: int | None = None) -> int | None:
        """Tokens of history the next request may carry at most: the hard mark of usable,
        lower still when a provider refused a request as too long (``fit``); None when no
        window is known and no provider said anything."""
        limits = [] if fit is None else [fit]
        if self.budget is not None:
            limits.append(math.floor(self.marks.hard * self.budget.usable))
        return min(limits) if limits else None

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
        if not self.watermarks:
            return configured
        return min(configured, int(self.usable * USER_SHARE * ratio))

    def reattach_chars(self, ratio: float) -> int:
        """Characters of the turn's recent reads a compaction may re-attach (none on the
        seed's threshold rule, which absorbs every tool step)."""
        if not self.watermarks:
            return 0
        return int(self.usable * self.settings.reattach_share * ratio)

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
        budget or with the cap off."""
        cap = self.output_cap(ratio)
        if cap is None or self.budget is None:
            return None
        chars = self.budget.usable * ratio
        whole = max(MIN_OUTPUT_CHARS, min(cap, int(chars / 2)))
        reattach = self.settings.reattach_share
        page = whole
        if reattach > 0:
            page = min(whole, max(MIN_OUTPUT_CHARS, int(reattach * chars)))
        return OutputBudget(whole=whole, page=page)

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
