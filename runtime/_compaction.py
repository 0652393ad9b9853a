"""Compaction policy, pure: when to compact, how to ask for a summary, and what history becomes.

Compaction is full replacement, not trimming: everything the model said and every tool step up
to ``covers_through`` is absorbed into one summary; the leading system message and the user's own
recent words are kept verbatim, because the user's intent must not reach the model only as the
summarizer's paraphrase. Since a tool step is either absorbed whole or kept whole (it lies after
``covers_through``), compaction can never leave a ``function_call`` without its output.

Replay rebuilds history from a compaction record with ``compose_history``, the same function
``apply_compaction`` builds its result with, so live and replayed history cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ._errors import CompactionError, ConfigError
from ._gateway import ModelRequest
from ._items import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    SystemMessage,
    UserMessage,
)
from ._protected_updates import UPDATES_INSTRUCTIONS

__all__ = [
    "SUMMARY_INSTRUCTIONS",
    "CompactionDecision",
    "CompactionResult",
    "apply_compaction",
    "build_summary_request",
    "compose_history",
    "decide_compaction",
    "estimate_tokens",
    "item_chars",
    "serialize_history_for_summary",
]

# Fewer entries than this cannot hold more than a system message, a user message and one answer:
# nothing worth a model call to summarize.
_MIN_HISTORY_LENGTH = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionDecision:
    """Whether to compact now, why (for the audit trail), and the token count it was based on."""

    compact: bool
    reason: str
    tokens: int | None
    #: the threshold was reached but compacting would free nothing (an event says so)
    skipped: bool = False


def decide_compaction(
    *, tokens: int | None, threshold: int, history_length: int
) -> CompactionDecision:
    """Decide from the reported token usage whether history should be compacted.

    No usage means no compaction: a missed chance is cheaper than a decision made on a guess.
    Raises nothing.
    """
    if tokens is None:
        return CompactionDecision(
            compact=False,
            reason="no usage reported by the provider; cannot judge the context size",
            tokens=None,
        )
    if tokens < threshold:
        return CompactionDecision(
            compact=False,
            reason=f"Reported token usage {tokens} is below the compaction threshold {threshold}",
            tokens=tokens,
        )
    if history_length < _MIN_HISTORY_LENGTH:
        return CompactionDecision(
            compact=False,
            reason=(
                f"History has only {history_length} entries "
                f"(fewer than {_MIN_HISTORY_LENGTH}); nothing to compact"
            ),
            tokens=tokens,
        )
    return CompactionDecision(
        compact=True,
        reason=f"Reported token usage {tokens} reached the compaction threshold {threshold}",
        tokens=tokens,
    )


SUMMARY_INSTRUCTIONS = """\
You are compacting the history of a long-running agent session so that the work can continue \
within the model's context window. The transcript below will be replaced by your summary; \
whatever you leave out is lost to the agent.

Write a dense, factual summary that keeps:
- the user's goal and every requirement or constraint the user stated;
- key decisions made, and why;
- files, paths, commands and other artifacts read, created or changed;
- work completed, and work still pending or undone;
- errors met and attempts that failed, so they are not repeated;
- the immediate next step.

Keep exact names, paths, identifiers and numbers. Do not invent anything that is not in the \
transcript. Output only the summary itself: no preamble such as "Here is the summary", no \
closing remarks."""


def serialize_history_for_summary(items: Sequence[Item]) -> str:
    """Render items as a readable transcript, one block per item, each type marked distinctly.

    Raises nothing.
    """
    return "\n\n".join(_render_item(item) for item in items)


def _render_item(item: Item) -> str:
    match item:
        case SystemMessage(text=text):
            return f"[system] {text}"
        case UserMessage(text=text, pinned=pinned):
            return f"[user] [pinned] {text}" if pinned else f"[user] {text}"
        case AssistantMessage(text=text):
            return f"[assistant] {text}"
        case FunctionCall(call_id=call_id, name=name, arguments=arguments):
            return f"[tool call] {name}({arguments}) {call_id}"
        case FunctionCallOutput(call_id=call_id, output=output, is_error=is_error):
            # Executor errors already start with "error:"; mark any other failure so the
            # summarizer can tell failed attempts from results.
            if is_error and not output.startswith("error"):
                output = f"error: {output}"
            return f"[tool output {call_id}] {output}"
        case CompactionSummary(text=text):
            return f"[summary] {text}"
    raise TypeError(f"not an item: {item!r}")  # pragma: no cover - exhaustive above


def build_summary_request(
    history: Sequence[Item],
    *,
    model: str,
    focus: str | None = None,
    protected_text: str | None = None,
    max_output_tokens: int | None = None,
    protected_updates: bool = False,
) -> ModelRequest:
    """Build the one non-streaming, tool-less request that asks the model for a summary.

    ``focus`` is what the user asked the summary to dwell on; ``protected_text`` is protected
    state the summary must agree with; ``protected_updates`` asks, after the summary, for the
    JSON block of protected-state updates (``runtime._protected_updates``). Raises nothing.
    """
    instructions = SUMMARY_INSTRUCTIONS
    if protected_updates:
        instructions += "\n\n" + UPDATES_INSTRUCTIONS
    if focus:
        instructions += (
            "\n\nThe user asked this summary to pay particular attention to the following; "
            f"cover it in full detail:\n{focus}"
        )
    transcript = serialize_history_for_summary(history)
    if protected_text:
        transcript += (
            "\n\n## Protected state\n"
            "These facts are kept verbatim outside the summary; do not contradict them:\n"
            f"{protected_text}"
        )
    return ModelRequest(
        model=model,
        input=(SystemMessage(text=instructions), UserMessage(text=transcript)),
        tools=(),
        tool_choice="none",
        max_output_tokens=max_output_tokens,
        purpose="summary",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionResult:
    """The new history, the entries kept from the compacted part, and how many were dropped."""

    history: tuple[HistoryEntry, ...]
    retained: tuple[HistoryEntry, ...]
    removed: int


def apply_compaction(
    history: Sequence[HistoryEntry],
    *,
    summary: str,
    summary_seq: int,
    covers_through: int,
    user_budget_chars: int = 20_000,
) -> CompactionResult:
    """Replace the entries with ``seq <= covers_through`` by a summary; keep later ones verbatim.

    From the compacted part the leading system message (if ``history[0]`` is one) and the most
    recent user messages within ``user_budget_chars`` (the newest always, pinned ones always)
    are retained; everything else is absorbed by the summary.

    Raises ``CompactionError`` if ``covers_through`` is negative, if the seqs of the non-summary
    entries are not strictly increasing, if ``covers_through`` falls before an older summary
    that precedes kept entries, or if it splits a function call from its output.
    """
    compacted, tail = _split(history, covers_through)
    retained = _retain(compacted, history, user_budget_chars)
    summary_entry = HistoryEntry(seq=summary_seq, item=CompactionSummary(text=summary))
    return CompactionResult(
        history=compose_history(retained, summary_entry, tail),
        retained=retained,
        removed=len(compacted) - len(retained),
    )


def compose_history(
    retained: Sequence[HistoryEntry], summary: HistoryEntry, tail: Sequence[HistoryEntry]
) -> tuple[HistoryEntry, ...]:
    """Assemble compacted history: leading system entries, the summary, the other retained
    entries, then the tail. Replay uses this too, so it must stay the only assembly rule.

    Raises nothing.
    """
    lead = 0
    while lead < len(retained) and isinstance(retained[lead].item, SystemMessage):
        lead += 1
    return (*retained[:lead], summary, *retained[lead:], *tail)


def _split(
    history: Sequence[HistoryEntry], covers_through: int
) -> tuple[tuple[HistoryEntry, ...], tuple[HistoryEntry, ...]]:
    if covers_through < 0:
        raise CompactionError(f"covers_through must be >= 0, got {covers_through}")
    # A summary's seq is its compaction record's, newer than the entries retained after it,
    # so only the other entries must be in seq order.
    previous: int | None = None
    for entry in history:
        if isinstance(entry.item, CompactionSummary):
            continue
        if previous is not None and entry.seq <= previous:
            raise CompactionError(
                f"history seqs must increase: seq {entry.seq} follows seq {previous}"
            )
        previous = entry.seq
    cut = 0
    while cut < len(history) and history[cut].seq <= covers_through:
        cut += 1
    compacted, tail = tuple(history[:cut]), tuple(history[cut:])
    for entry in tail:
        if entry.seq <= covers_through:
            raise CompactionError(
                f"covers_through {covers_through} is older than seq {history[cut].seq}, "
                f"which precedes seq {entry.seq} in history; a compaction must cover a prefix"
            )
    compacted_calls = {e.item.call_id for e in compacted if isinstance(e.item, FunctionCall)}
    for entry in tail:
        if isinstance(entry.item, FunctionCallOutput) and entry.item.call_id in compacted_calls:
            raise CompactionError(
                f"covers_through {covers_through} splits tool call {entry.item.call_id!r} "
                f"from its output at seq {entry.seq}; compact only at a round boundary"
            )
    return compacted, tail


def _retain(
    compacted: Sequence[HistoryEntry], history: Sequence[HistoryEntry], user_budget_chars: int
) -> tuple[HistoryEntry, ...]:
    keep: set[int] = set()
    if compacted and isinstance(history[0].item, SystemMessage):
        keep.add(0)
    used = 0
    budget_open = True
    newest = True
    for index in range(len(compacted) - 1, -1, -1):
        item = compacted[index].item
        if not isinstance(item, UserMessage):
            continue
        if item.pinned:
            # Pinned words are the user's "must hold"; they do not spend the recency budget.
            keep.add(index)
        elif newest or (budget_open and used + len(item.text) <= user_budget_chars):
            keep.add(index)
            used += len(item.text)
        else:
            budget_open = False
        newest = False
    return tuple(compacted[i] for i in sorted(keep))


def item_chars(item: Item) -> int:
    """The number of characters of ``item`` a model reads (text, or name, arguments and id).

    Raises nothing.
    """
    match item:
        case SystemMessage(text=text) | UserMessage(text=text) | AssistantMessage(text=text):
            return len(text)
        case CompactionSummary(text=text):
            return len(text)
        case FunctionCall(call_id=call_id, name=name, arguments=arguments):
            return len(call_id) + len(name) + len(arguments)
        case FunctionCallOutput(call_id=call_id, output=output):
            return len(call_id) + len(output)
    raise TypeError(f"not an item: {item!r}")  # pragma: no cover - exhaustive above


def estimate_tokens(items: Sequence[Item], chars_per_token: float = 4.0) -> int:
    """Estimate the tokens ``items`` cost from their characters, rounding up.

    Raises ``ConfigError`` if ``chars_per_token`` is not positive.
    """
    if not chars_per_token > 0:
        raise ConfigError(f"chars_per_token must be > 0, got {chars_per_token}")
    return math.ceil(sum(item_chars(item) for item in items) / chars_per_token)
