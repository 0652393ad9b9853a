"""One compaction's summary call, made to survive a summarizer that fails.

Transient errors are retried with jittered backoff; a summary request that overflows the
summary model's window drops the oldest whole rounds of its input (they get a mechanical
digest instead) and is sent again; after ``breaker_failures`` failed compactions in a row the
session's breaker opens and every later compaction uses the no-model fallback. An urgent
compaction (the sampler is blocked at the hard mark) falls back at once on failure: the run
never dies because the summarizer did.

A session that offers ``search_history`` gets a summary request that says so: what the summary
leaves out is still found in the log, but only by its words, so the summary should keep the
words a later search would use.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal, TypeVar

import anyio
from stowage.core import (
    CallLimiter,
    CompactionFailed,
    CompactionSummary,
    ContextLengthExceeded,
    Event,
    HistoryEntry,
    Item,
    ModelError,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ModelRetrying,
    SystemMessage,
    Usage,
    UserMessage,
    estimate_tokens,
    tool_schema_tokens,
)
from stowage.policy import clip_to_fit, digest, drop_oldest_rounds, fallback_summary, round_groups
from stowage.tools import SEARCH_TOOL

from ._retry import call_with_retries

__all__ = [
    "SEARCH_NOTE",
    "Breaker",
    "SummaryOutcome",
    "summarize",
    "under_summary_limits",
    "with_search_note",
]

T = TypeVar("T")

# how many times an overflowing summary request is trimmed and sent again
_MAX_TRIMS = 4
# share of the remaining rounds each trim drops: few requests, little lost per step
_TRIM_SHARE = 0.25

SEARCH_NOTE = (
    f"The agent can search this session's whole log with {SEARCH_TOOL} and read any record "
    "of it whole: what the summary leaves out is not lost, but it is found only by its words. "
    "For each topic you leave out, keep the exact words a search for it would use (names, "
    "identifiers, numbers), and say in one line at the end that earlier details can be found "
    f"with {SEARCH_TOOL}."
)


def with_search_note(request: ModelRequest) -> ModelRequest:
    """``request`` with ``SEARCH_NOTE`` after its closing instruction."""
    if not request.input or all(spec.name != SEARCH_TOOL for spec in request.tools):
        return request
    *before, last = request.input
    if not isinstance(last, UserMessage):
        return request
    noted = replace(last, text=f"{last.text}\n\n{SEARCH_NOTE}")
    return replace(request, input=(*before, noted))


@dataclass(eq=False)
class Breaker:
    """Failed compactions in a row of one live session; open at ``threshold``."""

    threshold: int = 3
    failures: int = 0

    @property
    def open(self) -> bool:
        return self.failures >= self.threshold


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryOutcome:
    """The model's summary text (``full``), a no-model digest (``fallback``), or nothing."""

    kind: Literal["full", "fallback", "failed"]
    text: str
    note: str = ""
    dropped_rounds: int = 0
    #: what the summary requests that got an answer reported, summed (None: none did)
    usage: Usage | None = None


def _trimmed_items(history: Sequence[HistoryEntry], rounds: int) -> tuple[list[Item], int]:
    kept, dropped = drop_oldest_rounds(history, rounds)
    if not dropped:
        return [e.item for e in history], 0
    kept_seqs = {e.seq for e in kept}
    dropped_items = [e.item for e in history if e.seq not in kept_seqs]
    note = digest(dropped_items) or "(nothing notable)"
    preface = CompactionSummary(
        text=f"Digest of the {dropped} oldest rounds, cut to fit the summary request:\n{note}"
    )
    # after a leading system message, so the transcript still opens with it
    items = [e.item for e in kept]
    at = 1 if items and isinstance(items[0], SystemMessage) else 0
    return [*items[:at], preface, *items[at:]], dropped


def _rounds_to_fit(
    history: Sequence[HistoryEntry], build: Callable[[list[Item]], ModelRequest], budget: int
) -> int:
    groups = len(round_groups(history))
    rounds = 0
    while rounds < groups:
        items, _ = _trimmed_items(history, rounds)
        request = build(items)
        if estimate_tokens(request.input) <= budget:
            break
        rounds += max(1, math.ceil((groups - rounds) * _TRIM_SHARE))
    return min(rounds, groups)


async def under_summary_limits(
    call: Callable[[], Awaitable[T]],
    *,
    limiter: anyio.CapacityLimiter | None,
    call_limiter: CallLimiter | None,
) -> T:
    """``call()`` (a summary's model call) holding a ``limiter`` place, then a ``call_limiter``
    one (where a summary goes before waiting rounds)."""
    async with limiter if limiter is not None else nullcontext():
        if call_limiter is None:
            return await call()
        await call_limiter.acquire("summary")
        try:
            return await call()
        finally:
            call_limiter.release()


async def summarize(
    history: Sequence[HistoryEntry],
    *,
    build: Callable[[list[Item]], ModelRequest],
    gateway: ModelGateway,
    breaker: Breaker,
    urgent: bool,
    attempts: int,
    input_budget: int | None,
    publish: Callable[[Event], None],
    session_id: str,
    log: Any,
    limiter: anyio.CapacityLimiter | None = None,
    call_limiter: CallLimiter | None = None,
    max_wait: float = 60.0,
    chars_per_token: float = 4.0,
) -> SummaryOutcome:
    """Ask for a summary of ``history`` (``build`` makes the request from items); never raises a
    ``ModelError``: failures become a fallback or a ``failed`` outcome."""
    items = [e.item for e in history]
    if breaker.open:
        reason = f"summarizer breaker open after {breaker.failures} failures in a row"
        log.warning("compaction_fallback", reason=reason)
        return SummaryOutcome(kind="fallback", text=fallback_summary(items, reason=reason))

    async def create(request: ModelRequest) -> ModelResponse:
        return await under_summary_limits(
            partial(gateway.create, request), limiter=limiter, call_limiter=call_limiter
        )

    groups = len(round_groups(history))
    ratio = min(chars_per_token, 4.0)
    dropped = _rounds_to_fit(history, build, input_budget) if input_budget else 0
    if dropped:
        log.info("compaction_input_trimmed", dropped_rounds=dropped, budget=input_budget)
    error = ""
    trim = 0
    # the tools left out: the server called one although the request said tool_choice="none"
    bare = False
    # every answered request is paid for, the one that called a tool too
    spent: Usage | None = None
    while True:
        trimmed, dropped = _trimmed_items(history, dropped)
        request = with_search_note(build(trimmed))
        if input_budget:
            fitted = clip_to_fit(request.input, input_budget, ratio)
            if fitted != list(request.input):
                log.info("compaction_input_clipped", budget=input_budget)
                request = replace(request, input=tuple(fitted))
        if bare:
            request = replace(request, tools=())
        try:
            response = await call_with_retries(
                partial(create, request),
                attempts=attempts,
                log=log,
                what="summary_call",
                max_wait=max_wait,
                on_wait=lambda attempt, delay, limited, error: publish(
                    ModelRetrying(
                        session_id=session_id,
                        purpose="summary",
                        attempt=attempt,
                        delay=delay,
                        rate_limited=limited,
                        error=type(error).__name__,
                    )
                ),
            )
        except ContextLengthExceeded as exc:
            if trim == _MAX_TRIMS:
                error = f"summary request overflows even with {dropped} rounds dropped: {exc}"
                break
            more = max(1, math.ceil((groups - dropped) * _TRIM_SHARE))
            dropped = min(groups, dropped + more)
            # and whatever still does not fit is clipped to a smaller budget than before: what
            # the provider said it takes, when it said, else a quarter less than was sent
            sent = estimate_tokens(request.input, ratio)
            smaller = int(min(input_budget or sent, sent) * (1 - _TRIM_SHARE))
            if exc.limit is not None:
                reserve = request.max_output_tokens or 0
                stated = int((exc.limit - reserve - tool_schema_tokens(request.tools)) * 0.95)
                smaller = min(smaller, stated)
            input_budget = max(1, smaller)
            log.warning("compaction_input_overflow", dropped_rounds=dropped, error=str(exc))
            publish(
                CompactionFailed(
                    session_id=session_id,
                    error=f"summary request overflowed; retrying with the {dropped} oldest "
                    "rounds dropped",
                    attempt=trim + 1,
                    fallback=False,
                )
            )
            trim += 1
            continue
        except ModelError as exc:
            error = f"{type(exc).__name__}: {exc}"
            break
        if response.usage is not None:
            spent = response.usage if spent is None else spent + response.usage
        text = response.text.strip()
        if not text and response.calls and request.tools:
            # Some OpenAI-compatible servers ignore tool_choice="none" and, seeing tools and a
            # user message last, call one. The tools ride along for the prompt cache only: ask
            # once more without them (this one request misses the cache; the summary does not).
            bare = True
            log.warning(
                "summary_called_tools",
                calls=[call.name for call in response.calls],
                retry="without tools",
            )
            continue
        if not text:
            error = (
                "the summarizer answered with tool calls and no summary, even without tools"
                if response.calls
                else "the summarizer answered with an empty summary"
            )
            break
        breaker.failures = 0
        note = f"; summary input trimmed: {dropped} oldest rounds dropped" if dropped else ""
        return SummaryOutcome(
            kind="full", text=text, note=note, dropped_rounds=dropped, usage=spent
        )
    breaker.failures += 1
    fall_back = urgent or breaker.open
    log.warning(
        "compaction_failed",
        error=error,
        failures=breaker.failures,
        breaker_open=breaker.open,
        fallback=fall_back,
    )
    publish(
        CompactionFailed(
            session_id=session_id, error=error, attempt=breaker.failures, fallback=fall_back
        )
    )
    if not fall_back:
        return SummaryOutcome(kind="failed", text="", note=error)
    why = "summarizer breaker open" if breaker.open else "summary failed while blocked"
    reason = f"{why}: {error}"
    return SummaryOutcome(
        kind="fallback", text=fallback_summary(items, reason=reason), note=reason, usage=spent
    )
