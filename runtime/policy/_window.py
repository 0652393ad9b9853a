"""Two refusals that keep a session out of a compaction loop.

A window too small for what every request must carry (system prompt, protected state, tool
schemas, output reserve) can never be compacted into: each retry adds a "compaction" that makes
history larger. It is refused before any model call, with the figures. And a compaction whose
summary is no smaller than what it replaces is skipped, never written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stowage.core import (
    ConfigError,
    HistoryEntry,
    ProtectedState,
    Settings,
    SystemMessage,
    ToolSpec,
    render,
)

from ._budget import Budget, resolve_budget, tool_schema_tokens

__all__ = ["MIN_HISTORY_TOKENS", "check_window", "compaction_shrinks", "fixed_request_tokens"]

#: tokens a window must leave for the conversation itself once everything fixed is paid
MIN_HISTORY_TOKENS = 1024

_CHARS_PER_TOKEN = 4.0


def fixed_request_tokens(
    history: Sequence[HistoryEntry], protected: ProtectedState
) -> tuple[int, int]:
    """Estimated tokens of the system messages in ``history`` and of rendered ``protected``
    state: what every request carries whatever is compacted. Raises nothing."""
    system = sum(len(entry.item.text) for entry in history if isinstance(entry.item, SystemMessage))
    protected_chars = len(render(protected)) if protected else 0
    return (math.ceil(system / _CHARS_PER_TOKEN), math.ceil(protected_chars / _CHARS_PER_TOKEN))


def check_window(
    settings: Settings, specs: Sequence[ToolSpec], *, system_tokens: int, protected_tokens: int
) -> Budget | None:
    """The session's budget (None in threshold mode), once its window is known to leave at
    least ``MIN_HISTORY_TOKENS`` for history after the system prompt, protected state, tool
    schemas and output reserve.

    Raises ``ConfigError`` with the figures and the fix when it does not.
    """
    tools = tool_schema_tokens(specs)
    try:
        budget = resolve_budget(settings, specs)
    except ConfigError:
        budget = None
        if settings.context_window is None:
            raise
        reserve = settings.max_output_tokens or 0
        window = settings.context_window
    else:
        if budget is None:
            return None
        reserve = budget.output_reserve
        window = budget.context_window
    left = window - system_tokens - protected_tokens - tools - reserve
    if left >= MIN_HISTORY_TOKENS:
        return budget
    fix = "raise --context-window (or context_window in the model's profile)"
    if tools:
        fix += " or use --tools none"
    if settings.max_output_tokens is not None:
        fix += " or lower --max-output-tokens"
    raise ConfigError(
        f"context window {window} tokens is too small: system {system_tokens} + protected "
        f"state {protected_tokens} + tool schemas {tools} + output reserve {reserve} leave "
        f"{max(left, 0)} for history, at least {MIN_HISTORY_TOKENS} needed; {fix}"
    )


def compaction_shrinks(
    *, replaced_chars: int, summary_chars: int, chars_per_token: float = _CHARS_PER_TOKEN
) -> str | None:
    """None when a summary is smaller than the history entries it replaces, else the reason
    to skip the compaction (it would make history larger or leave it as it is). Raises
    nothing."""
    if summary_chars < replaced_chars:
        return None
    summary = math.ceil(summary_chars / chars_per_token)
    replaced = math.ceil(replaced_chars / chars_per_token)
    return (
        f"skipped: the summary (~{summary} tokens) would be no smaller than the history it "
        f"replaces (~{replaced} tokens)"
    )
