"""Token accounting: how full the context is, from reported usage plus a calibrated estimate.

Tokens in use = the usage the provider reported for the last round (its input and its output,
which is now history) + an estimate of what was added since (tool outputs, a new user
message), less what microcompaction took out since. The estimate divides characters by a
chars-per-token ratio calibrated on this session's own reports, so a model with a denser or
looser tokenizer than 4 chars a token is measured, not assumed. Every figure the calibration
needs is folded into ``SessionState`` from the log, so replay reproduces it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stowage.core import SessionState, entry_chars

__all__ = [
    "DEFAULT_CHARS_PER_TOKEN",
    "TokenStatus",
    "calibrated_ratio",
    "token_status",
]

DEFAULT_CHARS_PER_TOKEN = 4.0
# Below this many reported content tokens a ratio is mostly noise (tool schemas, framing).
_MIN_CALIBRATION_TOKENS = 200
# Real tokenizers stay within these; a wild ratio means the report was not about our text.
_RATIO_RANGE = (1.5, 8.0)


def calibrated_ratio(state: SessionState, tool_tokens: int = 0) -> float:
    """Chars per token measured on the session's reported usage (input tokens of each reported
    round, less its tool schemas, against the characters of the history it was sent), or 4
    before there is enough to measure. Raises nothing."""
    content_tokens = state.calib_tokens - state.calib_rounds * tool_tokens
    if content_tokens < _MIN_CALIBRATION_TOKENS:
        return DEFAULT_CHARS_PER_TOKEN
    low, high = _RATIO_RANGE
    return min(high, max(low, state.calib_chars / content_tokens))


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenStatus:
    """How many tokens the next request carries, and how that figure was obtained.

    ``tokens`` is None only when reported usage is required and there is none. ``estimated``
    is True when no reported usage went into the figure at all; ``reported`` is the reported
    base (None without one) and ``estimated_since`` what was estimated on top of it.
    """

    tokens: int | None
    estimated: bool
    reported: int | None
    estimated_since: int
    chars_per_token: float

    def fraction(self, usable: int) -> float | None:
        """``tokens`` as a fraction of ``usable``. Raises nothing."""
        return None if self.tokens is None else self.tokens / max(1, usable)


def token_status(
    state: SessionState,
    *,
    tool_tokens: int = 0,
    extra_chars: int = 0,
    require_reported: bool = False,
) -> TokenStatus:
    """Tokens of the next request built from ``state`` (``extra_chars``: text the projection
    adds to history, such as protected state). Raises nothing."""
    ratio = calibrated_ratio(state, tool_tokens)
    usage = state.last_usage
    if usage is None:
        if require_reported:
            return TokenStatus(
                tokens=None, estimated=True, reported=None, estimated_since=0, chars_per_token=ratio
            )
        chars = state.projected_chars + extra_chars
        tokens = tool_tokens + math.ceil(chars / ratio)
        return TokenStatus(
            tokens=tokens, estimated=True, reported=None, estimated_since=tokens,
            chars_per_token=ratio,
        )  # fmt: skip
    since = 0
    for entry in reversed(state.history):
        if entry.seq <= state.usage_covers_seq:
            break
        since += entry_chars(entry, state.stubbed)
    since_tokens = math.ceil(since / ratio)
    discount = math.floor(state.usage_discount_chars / ratio)
    return TokenStatus(
        tokens=max(0, usage.total_tokens - discount) + since_tokens,
        estimated=False,
        reported=usage.total_tokens,
        estimated_since=since_tokens - discount,
        chars_per_token=ratio,
    )
