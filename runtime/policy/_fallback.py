"""The no-model compaction: a mechanical digest of what is dropped, when the summarizer is
down, its breaker is open, or its summary left the context too full.

It keeps the run alive, not the nuance: the tools called, the errors seen, the arguments
(paths, patterns) the work touched, the last thing the assistant said, and the start of any
earlier summary. System, pinned and recent user messages are kept verbatim by
``apply_compaction`` itself, exactly as for a model summary.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from stowage.core import AssistantMessage, CompactionSummary, FunctionCall, FunctionCallOutput, Item

__all__ = ["digest", "fallback_summary"]

_ERRORS = 8
_TOUCHED = 20
_CLIP = 160


def _clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _touched(arguments: str) -> list[str]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return []
    if not isinstance(value, dict):
        return []
    return [_clip(f"{k}={v}", 80) for k, v in value.items() if isinstance(v, str | int | float)]


def digest(items: Sequence[Item]) -> str:
    """A deterministic digest of ``items``: tools called with counts, errors seen, arguments
    touched, the last assistant message. Empty when ``items`` hold none of these. Raises
    nothing."""
    tools: Counter[str] = Counter()
    errors: list[str] = []
    touched: list[str] = []
    last_answer = ""
    for item in items:
        match item:
            case FunctionCall(name=name, arguments=arguments):
                tools[name] += 1
                for entry in _touched(arguments):
                    if entry not in touched:
                        touched.append(entry)
            case FunctionCallOutput(output=output, is_error=is_error):
                if is_error or output.lower().startswith("error"):
                    errors.append(_clip(output))
            case AssistantMessage(text=text) if text.strip():
                last_answer = _clip(text, 400)
    lines = []
    if tools:
        lines.append("Tools called: " + ", ".join(f"{n} x{c}" for n, c in sorted(tools.items())))
    if touched:
        lines.append("Arguments used: " + "; ".join(touched[-_TOUCHED:]))
    if errors:
        lines.append(f"Errors seen ({len(errors)}):")
        lines.extend(f"- {e}" for e in errors[-_ERRORS:])
    if last_answer:
        lines.append(f"Last assistant message: {last_answer}")
    return "\n".join(lines)


def fallback_summary(items: Sequence[Item], *, reason: str, max_chars: int = 4000) -> str:
    """The summary of a no-model compaction of ``items``, at most about ``max_chars`` long:
    why it was made, the digest, and the head of any earlier summary. Raises nothing."""
    rounds = sum(isinstance(i, FunctionCall) for i in items)
    head = (
        f"[mechanical digest, no model: {reason}] {len(items)} items were compacted "
        f"({rounds} tool calls)."
    )
    body = digest(items)
    text = head + ("\n" + body if body else "")
    earlier = [i.text for i in items if isinstance(i, CompactionSummary)]
    room = max_chars - len(text) - 40
    if earlier and room > 200:
        text += "\nEarlier summary (start): " + _clip(earlier[-1], room)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
