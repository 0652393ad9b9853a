"""The compaction promises as checks over requests: what a violation is, and the pure pieces.

A provider rejects a request that carries a tool output without the call it answers, or a call
without its output; compaction must never cut a tool step in half. These checks read only the
request, so they hold whatever the runtime does inside.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, TypeAlias

from stowage.core import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ModelRequest,
    SystemMessage,
    UserMessage,
)

from .members import request_tokens

__all__ = [
    "FINE_STOPS",
    "VIOLATION_KINDS",
    "Violation",
    "ViolationKind",
    "ZooFigures",
    "breaks_prefix",
    "irreducible_tokens",
    "orphan_violations",
    "request_orphan_calls",
    "request_orphan_outputs",
    "turn_text",
]

ViolationKind: TypeAlias = Literal[
    "refused", "stopped", "orphan_call", "orphan_output", "grew", "replay", "prefix_break"
]
VIOLATION_KINDS: tuple[ViolationKind, ...] = (
    "refused",
    "stopped",
    "orphan_call",
    "orphan_output",
    "grew",
    "replay",
    "prefix_break",
)
#: how a turn may end without breaking a promise
FINE_STOPS = frozenset({"answered", "pending_approval", "interrupted"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """A broken promise: its kind, the session, and the figures that show it."""

    kind: ViolationKind
    session_id: str
    detail: str


@dataclass(slots=True)
class ZooFigures:
    """What a harness run did, summed over its sessions."""

    sessions: int = 0
    turns: int = 0
    rounds: int = 0
    full: int = 0
    fallback: int = 0
    micro: int = 0
    prefix_breaks: int = 0
    stopped: int = 0
    #: turns stopped as a real loop: what they read at once could not fit (not violations)
    loops: int = 0


def turn_text(request: ModelRequest) -> str | None:
    """The newest user message of ``request``: the turn it belongs to."""
    users = [i.text for i in request.input if isinstance(i, UserMessage)]
    return users[-1] if users else None


def irreducible_tokens(request: ModelRequest) -> int:
    """Tokens of what no compaction can take out of ``request``: system and protected-state
    messages, the newest user message and the newest round (its calls and outputs), with the
    tool schemas. Raises nothing."""
    items = request.input
    last_user = max((n for n, i in enumerate(items) if isinstance(i, UserMessage)), default=-1)
    keep: list[Item] = [i for i in items if isinstance(i, SystemMessage)]
    if last_user >= 0:
        keep.append(items[last_user])
    start = len(items)
    while start - 1 > last_user and isinstance(items[start - 1], FunctionCallOutput):
        start -= 1
    while start - 1 > last_user and isinstance(items[start - 1], FunctionCall | AssistantMessage):
        start -= 1
    keep.extend(items[start:])
    return request_tokens(replace(request, input=tuple(keep)))


def breaks_prefix(previous: ModelRequest, current: ModelRequest) -> bool:
    """Whether ``current`` changed anything of ``previous`` but its appended tail (a provider's
    prompt cache misses from there on). Raises nothing."""
    head = previous.input
    return current.input[: len(head)] != head or current.tools != previous.tools


def request_orphan_calls(request: ModelRequest) -> list[str]:
    """Ids of tool calls in ``request`` that have no output in it, in call order. Raises
    nothing."""
    answered = {i.call_id for i in request.input if isinstance(i, FunctionCallOutput)}
    return [
        i.call_id
        for i in request.input
        if isinstance(i, FunctionCall) and i.call_id not in answered
    ]


def request_orphan_outputs(request: ModelRequest) -> list[str]:
    """Ids of tool outputs in ``request`` whose call is not in it (or comes after the output),
    in order. Raises nothing."""
    called: set[str] = set()
    orphans: list[str] = []
    for item in request.input:
        if isinstance(item, FunctionCall):
            called.add(item.call_id)
        elif isinstance(item, FunctionCallOutput) and item.call_id not in called:
            orphans.append(item.call_id)
    return orphans


def orphan_violations(session_id: str, where: str, request: ModelRequest) -> list[Violation]:
    """A violation for each call in ``request`` without its output and each output without
    its call; ``where`` names the request in their details. Raises nothing."""
    calls = [
        Violation(kind="orphan_call", session_id=session_id, detail=f"{where}: call {c} unanswered")
        for c in request_orphan_calls(request)
    ]
    outputs = [
        Violation(
            kind="orphan_output", session_id=session_id, detail=f"{where}: output {c} uncalled"
        )
        for c in request_orphan_outputs(request)
    ]
    return calls + outputs
