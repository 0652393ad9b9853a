"""The scripted summarizer's protected-state proposals, and its deliberate lossiness."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from typing import Any

from stowage.core import (
    UPDATES_KEY,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ModelRequest,
    SystemMessage,
    UserMessage,
)

__all__ = ["asks_for_updates", "drop_facts", "propose_updates", "protected_section"]

# how core's protected-state message begins (``stowage.core`` renders it)
_PROTECTED_HEADING = "# Protected state\n"
_WHY_CHARS = 160
_LINE = re.compile(r"^\s*(decided|failed|artifact|pending|done):\s*(.+?)\s*$", re.IGNORECASE)
_PENDING = re.compile(r"^- \[(p\d+)\] (.*)$")


def asks_for_updates(request: ModelRequest) -> bool:
    """Whether the summary request asks for the protected-updates block. Raises nothing."""
    last = request.input[-1] if request.input else None
    return isinstance(last, UserMessage) and UPDATES_KEY in last.text


def protected_section(request: ModelRequest) -> str:
    """The text of the request's protected-state system message ('' if none). Raises nothing."""
    for item in request.input:
        if isinstance(item, SystemMessage) and item.text.startswith(_PROTECTED_HEADING):
            return item.text
    return ""


def propose_updates(items: Sequence[Item], protected: str) -> list[dict[str, Any]]:
    """The ops the scripted summarizer proposes for ``items``, new ones only. Raises nothing."""
    pending = _pending(protected)
    calls = {i.call_id: i for i in items if isinstance(i, FunctionCall)}
    ops: list[dict[str, Any]] = []
    for item in items:
        # over the wire a failed output is only its text: the executor's errors start "error"
        if isinstance(item, FunctionCallOutput) and (
            item.is_error or item.output.startswith("error")
        ):
            call = calls.get(item.call_id)
            # an interrupted call may have worked: that is not knowledge of a failure
            if call is not None and not item.output.startswith("interrupted"):
                why = " ".join(item.output.split())[:_WHY_CHARS]
                ops.append(
                    {
                        "op": "add_failed_attempt",
                        "what": f"{call.name}({call.arguments})",
                        "why": why,
                    }
                )
        elif isinstance(item, UserMessage):
            for line in item.text.splitlines():
                match = _LINE.match(line)
                if match:
                    ops.extend(_from_line(match.group(1).lower(), match.group(2), pending))
    unique: list[dict[str, Any]] = []
    for op in ops:
        shown = any(str(v) in protected for k, v in op.items() if k in ("text", "what"))
        if op not in unique and (op["op"] == "complete_pending" or not shown):
            unique.append(op)
    return unique


def _pending(protected: str) -> dict[str, str]:
    """Pending entries by text, from the Pending section only (completed ones keep their id)."""
    section = protected.split("\nPending:\n", 1)[1] if "\nPending:\n" in protected else ""
    lines = section.split("\n\n", 1)[0].splitlines()
    return {m.group(2): m.group(1) for m in map(_PENDING.match, lines) if m}


def _from_line(kind: str, text: str, pending: dict[str, str]) -> list[dict[str, Any]]:
    match kind:
        case "decided":
            return [{"op": "add_decision", "text": text}]
        case "failed":
            what, _, why = text.partition(" because ")
            return [{"op": "add_failed_attempt", "what": what, "why": why or "it failed"}]
        case "artifact":
            ref, _, note = text.partition(" -- ")
            return [{"op": "add_artifact", "ref": ref, "note": note}]
        case "pending":
            return [{"op": "add_pending", "text": text}]
        case _:
            entry = pending.get(text)
            return [{"op": "complete_pending", "id": entry}] if entry else []


def drop_facts(lines: Sequence[str], loss: float, seed: int, context: str) -> list[str]:
    """``lines`` each dropped with probability ``loss``, seeded by ``seed`` and ``context``."""
    if loss <= 0:
        return list(lines)
    digest = hashlib.sha256(f"{seed}|{context}".encode()).hexdigest()
    rng = random.Random(digest)
    return [line for line in lines if rng.random() >= loss]
