"""The seed's threshold rule and the summary request, pure.

The summary request is the session's own round request with one instruction message after it,
so that a provider's prefix cache serves all of it but that message: a compaction then costs
little more than a round, instead of the whole history at full price. What history becomes
afterwards is ``stowage.core``'s ``apply_compaction``: replay needs the same assembly rule, and
core may not import the policy.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from stowage.core import (
    UPDATES_INSTRUCTIONS,
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    ModelRequest,
    SystemMessage,
    ToolSpec,
    UserMessage,
    default_stub,
    item_chars,
)

__all__ = [
    "FOCUS_MAX_CHARS", "SUMMARY_INSTRUCTIONS", "CompactionDecision", "build_summary_request",
    "clip_to_fit", "decide_compaction", "summary_view",
]  # fmt: skip

#: the most of a focus text (``--focus``, a hook's text, a milestone's name and note) a
#: summary request carries: what a person asks the summary to dwell on is a paragraph, not a
#: document, and the request must fit its window
FOCUS_MAX_CHARS = 2_000

# the least a clipped text keeps at each end
_CLIP_KEEP = 200

# Fewer entries than this cannot hold more than a system message, a user message and one answer:
# nothing worth a model call to summarize.
_MIN_HISTORY_LENGTH = 4

# how core's protected-state message begins (``stowage.core`` renders it)
_PROTECTED_HEADING = "# Protected state"


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
Do not call any tool now: summarize the conversation above. The summary replaces it (the \
system messages and latest user messages stay); what you leave out is lost to the agent.

Keep, densely:
- the user's goal, requirements and constraints;
- decisions made, and why;
- files, paths, commands and other artifacts read, created or changed;
- the reference R<n> of each tool output that still matters, with what it holds \
(recall_artifact reads it back; stubs name theirs, the others are listed below; in the \
updates block too, if asked for one);
- work completed, and work pending;
- errors and failed attempts, so they are not repeated;
- the next step.

Keep exact names, paths, identifiers and numbers; invent nothing. Output only the summary: no \
preamble such as "Here is the summary", no closing remarks."""


def summary_view(
    history: Sequence[HistoryEntry], stubbed: Collection[int]
) -> tuple[HistoryEntry, ...]:
    """``history`` as the model last saw it: the outputs at ``stubbed`` seqs are their stubs
    (each names the artifact reference the summary keeps). What the model no longer reads
    is not summarized again: a summary request costs a fraction of what the whole outputs
    would, and is back sooner. Raises nothing."""
    if not stubbed:
        return tuple(history)
    return tuple(
        HistoryEntry(
            seq=entry.seq,
            item=FunctionCallOutput(
                call_id=entry.item.call_id, output=default_stub(entry), is_error=entry.item.is_error
            ),
        )
        if entry.seq in stubbed and isinstance(entry.item, FunctionCallOutput)
        else entry
        for entry in history
    )


def build_summary_request(
    projection: Sequence[Item],
    *,
    model: str,
    tools: Sequence[ToolSpec] = (),
    cache_key: str | None = None,
    focus: str | None = None,
    protected_updates: bool = False,
    refs: Mapping[str, int] | None = None,
    instructions: str | None = None,
    max_output_tokens: int | None = None,
) -> ModelRequest:
    """The request that asks for a summary: the session's own round request, then one
    instruction message.

    ``projection`` is the input a round would send (system message, protected-state message,
    history as the model sees it, stubs included; possibly trimmed of its oldest rounds with a
    digest preface) and ``tools`` the session's tool specs; both go out unchanged, with the
    session's ``cache_key``, so a provider's prefix cache serves everything the last round
    request carried and only the instruction message is new. The projection holds whole
    rounds, so the request never ends with a call missing its output nor carries an output
    without its call; nothing here checks that. ``tool_choice`` is "none": the tools are
    there for the cache, not to be called.

    The instruction message (a user message, valid after tool outputs on both wire APIs) holds
    ``instructions`` (else ``SUMMARY_INSTRUCTIONS``); the artifact references ``R<seq>`` of the
    projection's tool outputs, from ``refs`` (call id -> seq; outputs whose stub already names
    its reference, and call ids not in the projection, are left out); with
    ``protected_updates``, the request for the JSON block of protected-state updates; and
    ``focus``, what the user asked the summary to dwell on. A summary by another model than
    the session's (``model``) gets no cache hit: caches are per model. Raises nothing.
    """
    parts = [instructions or SUMMARY_INSTRUCTIONS]
    listed = _ref_lines(projection, refs or {})
    if listed:
        parts.append("Artifact references of the tool outputs above:\n" + "\n".join(listed))
    if protected_updates:
        parts.append(
            UPDATES_INSTRUCTIONS
            + f'\nThe protected state is the "{_PROTECTED_HEADING}" system message.'
        )
    if focus:
        if len(focus) > FOCUS_MAX_CHARS:
            focus = focus[: FOCUS_MAX_CHARS - 1] + "…"
        parts.append(
            "The user asked this summary to pay particular attention to the following; "
            f"cover it in full detail:\n{focus}"
        )
    return ModelRequest(
        model=model,
        input=(*projection, UserMessage(text="\n\n".join(parts))),
        tools=tuple(tools),
        tool_choice="none",
        max_output_tokens=max_output_tokens,
        purpose="summary",
        cache_key=cache_key,
    )


def _ref_lines(projection: Sequence[Item], refs: Mapping[str, int]) -> list[str]:
    """One line per tool output of ``projection`` with a reference in ``refs``, in order."""
    names = {i.call_id: i.name for i in projection if isinstance(i, FunctionCall)}
    lines = []
    for item in projection:
        if not isinstance(item, FunctionCallOutput) or item.call_id not in refs:
            continue
        ref = f"R{refs[item.call_id]}"
        # a stub already names its reference: listing it again only lengthens the new tail
        if re.search(rf"artifact {ref}\b", item.output):
            continue
        lines.append(f"- {ref}: output of {names.get(item.call_id, 'a tool')} ({item.call_id})")
    return lines


def _clipped(item: Item, keep: int) -> Item:
    """``item`` with its text cut to about ``keep`` characters."""
    text = item.output if isinstance(item, FunctionCallOutput) else getattr(item, "text", "")
    if len(text) <= keep:
        return item
    half = max(_CLIP_KEEP, keep // 2)
    cut = len(text) - 2 * half
    if cut <= 0:
        return item
    clipped = (
        f"{text[:half]}\n[... {cut} characters cut here to fit the summary request; the "
        f"session's log keeps them ...]\n{text[-half:]}"
    )
    if isinstance(item, FunctionCallOutput):
        return replace(item, output=clipped)
    if isinstance(item, UserMessage | AssistantMessage | SystemMessage | CompactionSummary):
        if isinstance(item, CompactionSummary) and item.provider is not None:
            return item  # an opaque item is sent whole or not at all
        return replace(item, text=clipped)
    return item


def clip_to_fit(items: Sequence[Item], budget_tokens: int, chars_per_token: float) -> list[Item]:
    """``items`` cut to fit ``budget_tokens`` at ``chars_per_token``: the largest texts are
    clipped to their head and tail, largest first, each to what the rest leaves it, until the
    whole fits (or nothing is left to clip). The last item (the request's instructions) is
    never clipped. Raises nothing."""
    out = list(items)
    budget_chars = int(budget_tokens * chars_per_token)
    for _ in range(len(out)):
        total = sum(item_chars(item) for item in out)
        if total <= budget_chars:
            break
        candidates = range(len(out) - 1)
        largest = max(candidates, key=lambda i: item_chars(out[i]), default=None)
        if largest is None:
            break
        size = item_chars(out[largest])
        keep = max(2 * _CLIP_KEEP, size - (total - budget_chars) - 200)
        clipped = _clipped(out[largest], keep)
        if item_chars(clipped) >= size:
            break  # nothing more to cut
        out[largest] = clipped
    return out
