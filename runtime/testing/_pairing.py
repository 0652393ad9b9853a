"""Call/output pairing checks over ``ModelRequest`` items, as a provider would make them.

A provider rejects a request that carries a tool output without the call it answers, or a call
without its output; compaction must never cut a tool step in half. These checks read only the
request, so they hold whatever the runtime does inside.
"""

from __future__ import annotations

from stowage.core import FunctionCall, FunctionCallOutput, ModelRequest

__all__ = ["request_orphan_calls", "request_orphan_outputs"]


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
