"""The context budget: how many tokens of history a request may carry for a given model.

usable = context window - output reserve - tool schema tokens. The window and the largest
output come from a small registry of common models, or from settings; an unknown model with
no window configured cannot be budgeted, and then the seed's fixed threshold applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stowage.core import (
    DEFAULT_COMPACT_THRESHOLD,
    ConfigError,
    Settings,
    ToolSpec,
    tool_schema_tokens,
)

__all__ = [
    "MODEL_REGISTRY", "Budget", "ModelLimits", "effective_threshold", "known_budget",
    "window_budget", "lookup_model", "resolve_budget", "summary_input_budget", "tool_schema_tokens",
]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelLimits:
    """What a model can read (``context_window``) and write (``max_output_tokens``) at most."""

    context_window: int
    max_output_tokens: int


#: Published limits of common OpenAI and Anthropic models. Dated snapshots ("gpt-4o-2024-08-06") match by
#: prefix. ``scripted`` is the offline model: a small window so that demos compact.
MODEL_REGISTRY: Mapping[str, ModelLimits] = {
    "gpt-5": ModelLimits(context_window=400_000, max_output_tokens=128_000),
    "gpt-5-mini": ModelLimits(context_window=400_000, max_output_tokens=128_000),
    "gpt-5-nano": ModelLimits(context_window=400_000, max_output_tokens=128_000),
    "gpt-4.1": ModelLimits(context_window=1_047_576, max_output_tokens=32_768),
    "gpt-4.1-mini": ModelLimits(context_window=1_047_576, max_output_tokens=32_768),
    "gpt-4.1-nano": ModelLimits(context_window=1_047_576, max_output_tokens=32_768),
    "gpt-4o": ModelLimits(context_window=128_000, max_output_tokens=16_384),
    "gpt-4o-mini": ModelLimits(context_window=128_000, max_output_tokens=16_384),
    "gpt-4-turbo": ModelLimits(context_window=128_000, max_output_tokens=4_096),
    "gpt-4": ModelLimits(context_window=8_192, max_output_tokens=8_192),
    "gpt-3.5-turbo": ModelLimits(context_window=16_385, max_output_tokens=4_096),
    "o1": ModelLimits(context_window=200_000, max_output_tokens=100_000),
    "o3": ModelLimits(context_window=200_000, max_output_tokens=100_000),
    "o3-mini": ModelLimits(context_window=200_000, max_output_tokens=100_000),
    "o4-mini": ModelLimits(context_window=200_000, max_output_tokens=100_000),
    # Anthropic's Claude models (wire_api "anthropic"): 200k windows
    "claude-opus-4-5": ModelLimits(context_window=200_000, max_output_tokens=64_000),
    "claude-opus-4-1": ModelLimits(context_window=200_000, max_output_tokens=32_000),
    "claude-opus-4": ModelLimits(context_window=200_000, max_output_tokens=32_000),
    "claude-sonnet-4-5": ModelLimits(context_window=200_000, max_output_tokens=64_000),
    "claude-sonnet-4": ModelLimits(context_window=200_000, max_output_tokens=64_000),
    "claude-haiku-4-5": ModelLimits(context_window=200_000, max_output_tokens=64_000),
    "claude-3-7-sonnet": ModelLimits(context_window=200_000, max_output_tokens=64_000),
    "claude-3-5-sonnet": ModelLimits(context_window=200_000, max_output_tokens=8_192),
    "claude-3-5-haiku": ModelLimits(context_window=200_000, max_output_tokens=8_192),
    "claude-3-opus": ModelLimits(context_window=200_000, max_output_tokens=4_096),
    "claude-3-haiku": ModelLimits(context_window=200_000, max_output_tokens=4_096),
    "scripted": ModelLimits(context_window=10_000, max_output_tokens=1_000),
}

# A long-running agent's round rarely writes more than a quarter of the window; reserving a
# reasoning model's full 100k of output would halve the history it can keep.
_MAX_RESERVE_FRACTION = 0.25


def lookup_model(name: str) -> ModelLimits | None:
    """The registry entry for ``name`` (exact, else the longest registered prefix followed by
    ``-``, so dated snapshots match; a ``provider/`` prefix is ignored), or None. Raises nothing.
    """
    name = name.rsplit("/", 1)[-1].lower()
    if name in MODEL_REGISTRY:
        return MODEL_REGISTRY[name]
    prefixes = [key for key in MODEL_REGISTRY if name.startswith(key + "-")]
    return MODEL_REGISTRY[max(prefixes, key=len)] if prefixes else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """The token budget of one session's requests; ``usable`` is what history may fill.

    ``tool_tokens`` (the tool schemas every request carries) are taken out of the window here,
    so they are outside ``usable`` and must not be counted in the tokens in use of it as well
    (``token_status`` takes them out of reported usage)."""

    context_window: int
    output_reserve: int
    tool_tokens: int

    @property
    def usable(self) -> int:
        return self.context_window - self.output_reserve - self.tool_tokens


def effective_threshold(settings: Settings) -> int | None:
    """The fixed threshold the session runs with, or None for the watermark policy.

    An explicit ``compact_threshold`` wins; else a known model or a configured window gives
    watermarks; else (an unknown model, no window) the seed's threshold. Raises nothing.
    """
    if settings.compact_threshold is not None:
        return settings.compact_threshold
    if settings.context_window is not None or lookup_model(settings.model) is not None:
        return None
    return DEFAULT_COMPACT_THRESHOLD


def resolve_budget(settings: Settings, specs: Sequence[ToolSpec]) -> Budget | None:
    """The budget of a session in watermark mode, or None in threshold mode.

    Raises ``ConfigError`` when the window leaves nothing usable after the output reserve
    and the tool schemas.
    """
    if effective_threshold(settings) is not None:
        return None
    return window_budget(settings, tool_schema_tokens(specs))


def window_budget(settings: Settings, tool_tokens: int) -> Budget:
    """The budget of the window ``settings`` name (``context_window``, else the registry's),
    with ``tool_tokens`` of tool schemas.

    Raises ``ConfigError`` when the window leaves nothing usable after the output reserve
    and the tool schemas.
    """
    limits = lookup_model(settings.model)
    window = settings.context_window or (limits.context_window if limits else 0)
    if settings.max_output_tokens is not None:
        reserve = settings.max_output_tokens
    else:
        largest = limits.max_output_tokens if limits else window
        reserve = min(largest, int(window * _MAX_RESERVE_FRACTION))
    budget = Budget(context_window=window, output_reserve=reserve, tool_tokens=tool_tokens)
    if budget.usable <= 0:
        raise ConfigError(
            f"context window {window} leaves no room for history after an output reserve of "
            f"{reserve} and {budget.tool_tokens} tokens of tool schemas: raise --context-window "
            "or lower --max-output-tokens"
        )
    return budget


def known_budget(settings: Settings, tool_tokens: int) -> Budget | None:
    """The budget of a session whose window is known, whatever triggers its compactions: the
    watermark policy's, or on a fixed threshold the budget of a window the settings name
    (the registry's figure is not taken there: the user chose a threshold over it). None
    when no window is known.

    Raises ``ConfigError`` as ``window_budget`` does.
    """
    if effective_threshold(settings) is None or settings.context_window is not None:
        return window_budget(settings, tool_tokens)
    return None


def summary_input_budget(settings: Settings) -> int | None:
    """Tokens a summary request may carry for the summary model (``compact_model`` or
    ``model``): its window less its output reserve (the session's own, ``max_output_tokens``,
    when the session's model summarizes: what a round may carry, a summary may too); None
    when its window is unknown. Raises nothing."""
    name = settings.compact_model or settings.model
    limits = lookup_model(name)
    if settings.compact_model is None or limits is None:
        window = settings.context_window or (limits.context_window if limits else None)
    else:
        window = limits.context_window
    if window is None:
        return None
    if settings.compact_model is None and settings.max_output_tokens is not None:
        return max(1, window - settings.max_output_tokens)
    largest = limits.max_output_tokens if limits else window
    return max(1, window - min(largest, int(window * _MAX_RESERVE_FRACTION)))
