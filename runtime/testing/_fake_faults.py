"""The fake server's faults that answer 200: a response as a proxy or a broken provider would send
it, pure, so the server only picks one and streams what this module built."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from stowage.core import AssistantMessage, FunctionCall, ModelResponse, Usage

__all__ = [
    "MUTATIONS",
    "WIRE_FAULTS",
    "chat_answer",
    "chat_stream",
    "mutate",
    "responses_answer",
    "responses_stream",
]

#: the fault kinds ``mutate`` handles; the response is then sent normally
MUTATIONS = frozenset(
    {"zero_usage", "invented_usage", "truncated", "bad_arguments", "duplicate_ids", "unknown_tool"}
)
#: the fault kinds that change only the wire form of a normal response
WIRE_FAULTS = frozenset({"no_finish", "empty_choices", "cut_stream"})

_INVENTED = Usage(input_tokens=3, output_tokens=1, total_tokens=4)


def _cut(text: str) -> str:
    return text[: max(1, len(text) // 2)] if text else ""


def _truncated(response: ModelResponse) -> ModelResponse:
    """The output limit struck: the last call's arguments (or the text) end half way."""
    items = list(response.items)
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, FunctionCall):
            items[index] = replace(item, arguments=_cut(item.arguments or "{}"))
            break
        if isinstance(item, AssistantMessage):
            items[index] = replace(item, text=_cut(item.text))
            break
    return replace(response, items=tuple(items), finish_reason="length")


def _calls(
    response: ModelResponse, change: Callable[[FunctionCall], FunctionCall]
) -> ModelResponse:
    items = tuple(change(i) if isinstance(i, FunctionCall) else i for i in response.items)
    return replace(response, items=items)


def mutate(response: ModelResponse, kind: str) -> ModelResponse:
    """``response`` as the fault ``kind`` (one of ``MUTATIONS``) makes it."""
    if kind == "zero_usage":
        return replace(response, usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))
    if kind == "invented_usage":
        return replace(response, usage=_INVENTED)
    if kind == "truncated":
        return _truncated(response)
    if kind == "bad_arguments":
        return _calls(response, lambda c: replace(c, arguments="{'path': oops"))
    if kind == "unknown_tool":
        return _calls(response, lambda c: replace(c, name="no_such_tool"))
    if kind == "duplicate_ids":
        calls = response.calls
        if not calls:
            return response
        items = tuple(
            replace(i, call_id=calls[0].call_id) if isinstance(i, FunctionCall) else i
            for i in response.items
        )
        return replace(response, items=(*items, calls[0]))
    raise ValueError(f"not a response mutation: {kind!r}")


def chat_answer(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """A ``chat.completion`` body with the wire fault ``kind``."""
    if kind == "no_finish":
        return {**body, "choices": [{**c, "finish_reason": None} for c in body["choices"]]}
    if kind == "empty_choices":
        return {**body, "choices": []}
    return body


def chat_stream(chunks: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    """The chunks of a streamed chat answer with the wire fault ``kind``."""
    if kind == "no_finish":
        return (c for c in chunks if not any(ch.get("finish_reason") for ch in c["choices"]))
    if kind == "empty_choices":
        return (c for c in chunks if not c["choices"])
    if kind == "cut_stream":
        return iter(chunks[: max(1, len(chunks) // 2)])
    return iter(chunks)


def responses_answer(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """A Responses API ``response`` body with the wire fault ``kind``."""
    if kind == "no_finish":
        return {**body, "status": "in_progress"}
    if kind == "empty_choices":
        return {**body, "output": []}
    return body


def responses_stream(events: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    """The events of a streamed Responses answer with the wire fault ``kind``."""
    final = ("response.completed", "response.incomplete")
    if kind == "no_finish":
        return (e for e in events if e["type"] not in final)
    if kind == "empty_choices":
        last = events[-1]
        emptied = {**last, "response": {**last["response"], "output": []}}
        return iter([events[0], emptied])
    if kind == "cut_stream":
        return iter(events[: max(1, len(events) // 2)])
    return iter(events)
