"""Token accounting: how full the context is, from reported usage plus a calibrated estimate.

Tokens in use = the usage the provider reported for the last round (its input and its output,
which is now history) + an estimate of what was added since (tool outputs, a new user
message), less what microcompaction took out since. The estimate divides characters by a
chars-per-token ratio calibrated on this session's own reports, so a model with a denser or
looser tokenizer than 4 chars a token is measured, not assumed. Every figure the calibration
needs is folded into ``SessionState`` from the log, so replay reproduces it exactly.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from stowage.core import ModelRequest, SessionState, Usage, entry_chars, item_chars

__all__ = [
    "DEFAULT_CHARS_PER_TOKEN",
    "TokenStatus",
    "calibrated_ratio",
    "implausible_usage",
    "ratio_from_stated",
    "request_chars",
    "token_status",
]

DEFAULT_CHARS_PER_TOKEN = 4.0
# Below this many reported content tokens a ratio is mostly noise (tool schemas, framing).
_MIN_CALIBRATION_TOKENS = 200
# Real tokenizers stay within these; a wild ratio means the report was not about our text.
_RATIO_RANGE = (1.5, 8.0)
# A reported input count below this share of the fewest tokens the request's characters can
# be (at the loosest ratio above) is not a count of this request: a proxy that zeroes or
# invents usage, or one that leaves cached tokens out.
_IMPLAUSIBLE_SHARE = 1 / 8


def request_chars(request: ModelRequest) -> int:
    """Characters a request sends: its input items and its tool schemas (as JSON). Raises
    nothing."""
    chars = sum(item_chars(item) for item in request.input)
    if request.tools:
        chars += len(
            json.dumps(
                [
                    {"name": t.name, "description": t.description, "parameters": t.parameters}
                    for t in request.tools
                ],
                sort_keys=True,
            )
        )
    return chars


def implausible_usage(usage: Usage, *, chars: int) -> str | None:
    """Why ``usage`` reported for a request of ``chars`` characters cannot be true (an input
    count of 0, or far below what that many characters allow), or None if it can. Raises
    nothing."""
    if usage.input_tokens <= 0:
        return f"the provider reported {usage.input_tokens} input tokens"
    fewest = chars / _RATIO_RANGE[1]
    if usage.input_tokens < fewest * _IMPLAUSIBLE_SHARE:
        return (
            f"the provider reported {usage.input_tokens} input tokens for a request of {chars} "
            f"characters, which cannot be fewer than {math.floor(fewest)} tokens"
        )
    return None


def ratio_from_stated(chars: int, stated_tokens: int, tool_tokens: int = 0) -> float | None:
    """Chars per token of a request of ``chars`` content characters that the provider said
    counted ``stated_tokens`` (``tool_tokens`` of them tool schemas), within the range real
    tokenizers keep; None when the figures leave no content tokens. Raises nothing."""
    content_tokens = stated_tokens - tool_tokens
    if content_tokens <= 0 or chars <= 0:
        return None
    low, high = _RATIO_RANGE
    return min(high, max(low, chars / content_tokens))


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
