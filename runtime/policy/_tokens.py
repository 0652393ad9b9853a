"""Token accounting: how full the context is, from reported usage plus a calibrated estimate.

The figure is the tokens of the next request's history part: system, protected state,
history as projected. Tool schemas are outside it, as they are outside the usable budget
(``usable = window - output reserve - tool schemas``): counting them in both would count them
twice, and with an MCP server's 15,000 tokens of schemas compaction would fire far too early.
So the reported path takes the schemas back out of what the provider counted.

Reported path: the usage the provider reported for the last round (its input and its output,
which is now history) less the tool schemas, plus an estimate of what was added since (tool
outputs, a new user message), less what microcompaction took out since. Estimated path (no
report yet): characters over a chars-per-token ratio calibrated on this session's own
reports, so a denser or looser tokenizer than 4 chars a token is measured, not assumed.

Either way the figure is never below what the characters imply: an endpoint that reports 10
output tokens for a 30 MB answer must not hide it from the policy. Every figure the
calibration needs is folded into ``SessionState`` from the log, so replay reproduces it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from stowage.core import (
    AssistantMessage,
    FunctionCall,
    ModelRequest,
    ModelResponse,
    SessionState,
    ToolSpec,
    Usage,
    entry_chars,
    item_chars,
)

__all__ = [
    "DEFAULT_CHARS_PER_TOKEN", "TokenStatus", "answer_chars", "calibrated_ratio",
    "implausible_usage", "oversized_answer", "ratio_from_stated", "request_chars", "token_status",
]  # fmt: skip

DEFAULT_CHARS_PER_TOKEN = 4.0
# the loosest ratio the floor of a token figure uses, whatever the calibration says
_FLOOR_CHARS_PER_TOKEN = 4.0
# Below this many reported content tokens a ratio is mostly noise (tool schemas, framing).
_MIN_CALIBRATION_TOKENS = 200
# Real tokenizers stay within these; a wild ratio means the report was not about our text.
_RATIO_RANGE = (1.5, 8.0)
# A reported input count below this share of the fewest tokens the request's characters can
# be (at the loosest ratio above) is not a count of this request: a proxy that zeroes or
# invents usage, or one that leaves cached tokens out.
_IMPLAUSIBLE_SHARE = 1 / 8


def request_chars(request: ModelRequest, *, input_chars: int | None = None) -> int:
    """Characters a request sends: its input items and its tool schemas (as JSON).
    ``input_chars``: the input items' characters, when the caller keeps them already. Raises
    nothing."""
    chars = sum(map(item_chars, request.input)) if input_chars is None else input_chars
    if request.tools:
        chars += _tool_chars(request.tools)
    return chars


# the schemas' characters by the identity of the tools tuple: a session sends the same one
# with every request, and serializing it each time cost more than the rest of the count
_TOOL_CHARS: dict[int, tuple[tuple[ToolSpec, ...], int]] = {}
_TOOL_CHARS_MAX = 256


def _tool_chars(tools: tuple[ToolSpec, ...]) -> int:
    hit = _TOOL_CHARS.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    chars = len(
        json.dumps(
            [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in tools
            ],
            sort_keys=True,
        )
    )
    if len(_TOOL_CHARS) >= _TOOL_CHARS_MAX:
        _TOOL_CHARS.clear()
    _TOOL_CHARS[id(tools)] = (tools, chars)
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


def answer_chars(response: ModelResponse) -> int:
    """Characters of ``response``'s answer that ``max_answer_chars`` caps: its assistant text
    and its call arguments. Raises nothing."""
    return sum(
        len(item.text) if isinstance(item, AssistantMessage) else len(item.arguments)
        for item in response.items
        if isinstance(item, AssistantMessage | FunctionCall)
    )


def oversized_answer(chars: int, max_chars: int) -> str | None:
    """Why an answer of ``chars`` characters (text plus call arguments, as ``answer_chars``
    counts them, or as many as were read of it) is refused under a cap of ``max_chars``
    (``max_answer_chars``), or None when it is within it. Raises nothing."""
    if chars <= max_chars:
        return None
    return (
        f"the answer passed max_answer_chars: {chars:,} characters of text and call arguments "
        f"read, more than the {max_chars:,} one response may carry"
    )


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
    round, less its tool schemas, against the characters of the history it was sent), at most
    4 (the default before there is enough to measure). Raises nothing."""
    content_tokens = state.calib_tokens - state.calib_rounds * tool_tokens
    if content_tokens < _MIN_CALIBRATION_TOKENS:
        return DEFAULT_CHARS_PER_TOKEN
    low, _ = _RATIO_RANGE
    # never looser than 4 chars a token: every estimate (what a compaction leaves, what fits
    # a target) uses this ratio, and a report that undercounts (a proxy reporting half) must
    # not make the estimates undercount with it; a denser tokenizer is measured as it is
    return min(_FLOOR_CHARS_PER_TOKEN, max(low, state.calib_chars / content_tokens))


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenStatus:
    """How many tokens of history the next request carries, and how that figure was obtained.

    ``tokens`` counts the history part only (system, protected state, history as projected):
    tool schemas are outside the usable budget and outside this figure; ``tool_tokens`` says
    how many there are, for showing them apart. ``tokens`` is None only when reported usage
    is required and there is none. ``estimated`` is True when no reported usage went into the
    figure at all; ``reported`` is the reported base as the provider counted it (input plus
    output of the last round, tool schemas included; None without one) and
    ``estimated_since`` what was estimated on top of it (less microcompaction's discount), so
    ``tokens == reported - tool_tokens + estimated_since`` unless floored. ``floored`` is True
    when the reported figure was below what the characters of the projected history imply at
    ``chars_per_token`` and that estimate was taken instead (usage that undercounts, such as
    10 output tokens reported for a 30 MB answer).
    """

    tokens: int | None
    estimated: bool
    reported: int | None
    estimated_since: int
    chars_per_token: float
    floored: bool = False
    tool_tokens: int = 0
    #: what the characters of the projected history imply (at most 4 chars a token)
    floor: int = 0

    def fraction(self, usable: int) -> float | None:
        """``tokens`` as a fraction of ``usable``. Raises nothing."""
        return None if self.tokens is None else self.tokens / max(1, usable)

    @property
    def guard(self) -> int:
        """The figure the hard limit is checked on: ``tokens``, or without a reported figure
        (reported usage required and none yet) what the characters imply. Every request is
        held to it, whatever triggers compaction."""
        return self.floor if self.tokens is None else max(self.tokens, self.floor)


def token_status(
    state: SessionState,
    *,
    tool_tokens: int = 0,
    extra_chars: int = 0,
    require_reported: bool = False,
) -> TokenStatus:
    """Tokens of the history part of the next request built from ``state`` (``extra_chars``:
    text the projection adds to history, such as protected state). ``tool_tokens``: the tool
    schemas the provider counted in its reported usage; they are taken out of it, never added.
    The figure is at least ``ceil((projected chars + extra_chars) / ratio)``. Raises nothing.
    """
    ratio = calibrated_ratio(state, tool_tokens)
    usage = state.last_usage
    # never looser than 4 chars a token: a calibration from usage that undercounts (a proxy
    # reporting half) must not make the floor undercount with it
    floor = math.ceil((state.projected_chars + extra_chars) / min(ratio, _FLOOR_CHARS_PER_TOKEN))
    if usage is None:
        if require_reported:
            return TokenStatus(
                tokens=None, estimated=True, reported=None, estimated_since=0,
                chars_per_token=ratio, tool_tokens=tool_tokens, floor=floor,
            )  # fmt: skip
        return TokenStatus(
            tokens=floor, estimated=True, reported=None, estimated_since=floor,
            chars_per_token=ratio, tool_tokens=tool_tokens, floor=floor,
        )  # fmt: skip
    since = 0
    for entry in reversed(state.history):
        if entry.seq <= state.usage_covers_seq:
            break
        since += entry_chars(entry, state.stubbed)
    since_tokens = math.ceil(since / ratio)
    discount = math.floor(state.usage_discount_chars / ratio)
    tokens = max(0, usage.total_tokens - tool_tokens - discount) + since_tokens
    return TokenStatus(
        tokens=max(tokens, floor),
        estimated=False,
        reported=usage.total_tokens,
        estimated_since=since_tokens - discount,
        chars_per_token=ratio,
        floored=tokens < floor,
        tool_tokens=tool_tokens,
        floor=floor,
    )
