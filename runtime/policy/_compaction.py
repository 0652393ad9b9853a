"""The seed's threshold rule and the summary request, pure.

What history becomes afterwards is ``stowage.core``'s ``apply_compaction``: replay needs the same
assembly rule, and core may not import the policy.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

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
    UserMessage,
    default_stub,
)

__all__ = [
    "SUMMARY_INSTRUCTIONS",
    "CompactionDecision",
    "build_summary_request",
    "decide_compaction",
    "serialize_history_for_summary",
    "summary_view",
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
- the artifact reference (R<n>) of every tool output whose content still matters, next to \
what it holds: the agent reads it back with the recall_artifact tool (list them among the \
artifacts of the updates block too, when one is asked for);
- work completed, and work still pending or undone;
- errors met and attempts that failed, so they are not repeated;
- the immediate next step.

Keep exact names, paths, identifiers and numbers. Do not invent anything that is not in the \
transcript. Output only the summary itself: no preamble such as "Here is the summary", no \
closing remarks."""


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


def serialize_history_for_summary(
    items: Sequence[Item], refs: Mapping[str, int] | None = None
) -> str:
    """Render items as a readable transcript, one block per item, each type marked distinctly;
    a tool output whose call id ``refs`` maps to a seq names its artifact reference R<seq>.

    Raises nothing.
    """
    return "\n\n".join(_render_item(item, refs or {}) for item in items)


def _render_item(item: Item, refs: Mapping[str, int]) -> str:
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
            if call_id in refs:
                return f"[tool output {call_id}, artifact R{refs[call_id]}] {output}"
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
    refs: Mapping[str, int] | None = None,
    instructions: str | None = None,
) -> ModelRequest:
    """Build the one non-streaming, tool-less request that asks the model for a summary.

    ``focus`` is what the user asked the summary to dwell on; ``protected_text`` is protected
    state the summary must agree with; ``protected_updates`` asks, after the summary, for the
    JSON block of protected-state updates (``runtime._protected_updates``); ``refs`` maps the
    call ids of tool outputs to their artifact seqs (the transcript names them);
    ``instructions`` replace ``SUMMARY_INSTRUCTIONS`` (a user's compaction prompt). Raises
    nothing.
    """
    instructions = instructions or SUMMARY_INSTRUCTIONS
    if protected_updates:
        instructions += "\n\n" + UPDATES_INSTRUCTIONS
    if focus:
        instructions += (
            "\n\nThe user asked this summary to pay particular attention to the following; "
            f"cover it in full detail:\n{focus}"
        )
    transcript = serialize_history_for_summary(history, refs)
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
