"""Pure translation between stowage items and Anthropic's Messages API, and where its prompt
cache breakpoints go.

The Messages API differs from the OpenAI wires in three ways that shape this module. System
text is a top-level ``system`` list, not a message. Tool calls and their outputs are content
blocks (``tool_use`` in an assistant message, ``tool_result`` in a user message), and roles
must alternate, so consecutive items of one role share one message. And its prompt cache
serves only what a request marks: a ``cache_control`` breakpoint on a block caches the prefix
up to it (tools, then system, then messages), at most four a request. ``cache_breakpoints``
chooses them where the prefix stays the same from one request to the next (see its doc).

Parsers raise ``ModelResponseError`` on payloads they cannot use and ``IncompleteResponse``
on one that never said why it stopped (no ``stop_reason``), so a cut stream is retried.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    IncompleteResponse,
    Item,
    ModelConnectionError,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    SystemMessage,
    Usage,
    UserMessage,
)
from stowage.policy import lookup_model

from ._openai_wire import SUMMARY_PREFIX, context_error, is_context_length_error

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "MAX_BREAKPOINTS",
    "MessagesStreamAccumulator",
    "anthropic_usage",
    "cache_breakpoints",
    "default_max_tokens",
    "event_error",
    "finish_reason",
    "is_stub",
    "messages_body",
    "parse_message",
]

#: the ``anthropic-version`` header every request carries
ANTHROPIC_VERSION = "2023-06-01"
#: ``max_tokens`` when a request sets no limit and the model is not in the registry: the API
#: requires one, and every Claude model takes at least this many
DEFAULT_MAX_TOKENS = 4096
#: the most ``cache_control`` breakpoints the API takes in one request
MAX_BREAKPOINTS = 4
_EPHEMERAL = {"type": "ephemeral"}
#: stubs between two settled marks (see ``cache_breakpoints``): of 4, 8, 16, 24 and 32, the
#: one that cost the fewest uncached tokens in ``scripts/bench_compaction_policy.py``
STUB_MARK_EVERY = 16
# why the model stopped, as stowage's finish reasons (``ModelResponse.finish_reason``)
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
# stream error types that are the service's trouble, not the request's: retried
_TRANSIENT = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


def default_max_tokens(model: str) -> int:
    """``max_tokens`` when unset: the model's output limit within a quarter of its window."""
    limits = lookup_model(model)
    if limits is None:
        return DEFAULT_MAX_TOKENS
    return min(limits.max_output_tokens, limits.context_window // 4)


# The two shapes of a microcompaction stub (``stowage.core.default_stub``): the artifact
# reference alone, or a huge output's first 1,500 characters, then the reference, then its
# tail. Matched where they must start, never searched for: outputs can be long, and this runs
# on every one of every request. A test pins both to the real renderer.
_STUB = re.compile(r"\[output stored as artifact R\d+, ")
_PREVIEW = re.compile(
    r"\n\[\.\.\. \d+ chars omitted: the whole output of \d+ chars is stored as artifact R\d+;"
)
_PREVIEW_AT = 1_500


def is_stub(item: Item) -> bool:
    """Whether ``item`` is a tool output that microcompaction replaced with its stub."""
    if not isinstance(item, FunctionCallOutput):
        return False
    output = item.output
    return bool(_STUB.match(output) or _PREVIEW.match(output, _PREVIEW_AT))


def _leading_system(items: Sequence[Item]) -> int:
    """How many items at the start are system messages (the instructions and protected state)."""
    n = 0
    while n < len(items) and isinstance(items[n], SystemMessage):
        n += 1
    return n


def _conversation_end(request: ModelRequest) -> int:
    """Index of the last item the next request repeats (a summary's instruction not); -1: none."""
    last = len(request.input) - 1
    if request.purpose == "summary" and last >= 0 and isinstance(request.input[last], UserMessage):
        last -= 1
    return last


def cache_breakpoints(request: ModelRequest) -> tuple[int, ...]:
    """Indices of ``request.input`` to mark with ``cache_control``, newest first; -1: last tool."""
    items = request.input
    chosen: list[int] = []

    def add(index: int | None) -> None:
        if index is not None and index not in chosen and len(chosen) < MAX_BREAKPOINTS:
            chosen.append(index)

    end = _conversation_end(request)
    leading = _leading_system(items)
    if end >= leading:
        add(end)
        answer = end
        while answer >= 0 and not isinstance(items[answer], AssistantMessage | FunctionCall):
            answer -= 1
        while answer > 0 and isinstance(items[answer - 1], AssistantMessage | FunctionCall):
            answer -= 1
        if answer > leading:
            add(answer - 1)
    stubs = [i for i in range(min(end + 1, len(items))) if is_stub(items[i])]
    settled = len(stubs) // STUB_MARK_EVERY * STUB_MARK_EVERY
    for count in (settled, settled - STUB_MARK_EVERY):
        if count > 0:
            add(stubs[count - 1])
    summaries = [
        i for i in range(min(end + 1, len(items))) if isinstance(items[i], CompactionSummary)
    ]
    if summaries:
        add(summaries[-1])
    elif leading:
        add(leading - 1)
    if leading:
        add(0)
    elif request.tools:
        add(-1)
    return tuple(chosen)


def _arguments(text: str) -> dict[str, Any]:
    """A call's ``input`` object: its JSON arguments, or the text under ``arguments``."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": text}


def _block(item: Item) -> tuple[str, dict[str, Any] | None]:
    """The role and content block of a non-leading item (None: nothing to send)."""
    match item:
        case AssistantMessage(text=text):
            return "assistant", {"type": "text", "text": text} if text else None
        case FunctionCall(call_id=call_id, name=name, arguments=arguments):
            block = {
                "type": "tool_use",
                "id": call_id,
                "name": name,
                "input": _arguments(arguments),
            }
            return "assistant", block
        case FunctionCallOutput(call_id=call_id, output=output, is_error=is_error):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
            if output:
                result["content"] = output
            if is_error:
                result["is_error"] = True
            return "user", result
        case CompactionSummary(text=text):
            return "user", {"type": "text", "text": SUMMARY_PREFIX + text}
        case UserMessage(text=text) | SystemMessage(text=text):
            # a system message inside the conversation has no place of its own on this wire
            return "user", {"type": "text", "text": text} if text else None
    raise TypeError(f"not an item: {item!r}")  # pragma: no cover - exhaustive above


def _messages(
    items: Sequence[Item], start: int
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The ``messages`` for ``items[start:]``, one per run of a role, and each item's block."""
    messages: list[dict[str, Any]] = []
    ends: dict[int, dict[str, Any]] = {}
    last: dict[str, Any] | None = None
    for index in range(start, len(items)):
        role, block = _block(items[index])
        if block is not None:
            if not messages or messages[-1]["role"] != role:
                messages.append({"role": role, "content": []})
            messages[-1]["content"].append(block)
            last = block
        if last is not None:
            ends[index] = last
    for message in messages:
        if message["role"] == "user":
            content = message["content"]
            content.sort(key=lambda b: b["type"] != "tool_result")  # stable: order kept within
    if not messages or messages[0]["role"] != "user":
        # the API wants a user message first; history that starts with the model's own turn
        # (a fallback that kept none of the user's words) gets a neutral one
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": "(continued)"}]})
    return messages, ends


def messages_body(request: ModelRequest, *, stream: bool) -> dict[str, Any]:
    """The whole JSON body of a ``POST /v1/messages`` request, breakpoints placed."""
    items = request.input
    leading = _leading_system(items)
    system: list[dict[str, Any]] = [
        {"type": "text", "text": i.text} for i in items[:leading] if isinstance(i, SystemMessage)
    ]
    messages, ends = _messages(items, leading)
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_output_tokens or default_max_tokens(request.model),
    }
    if system:
        body["system"] = system
    body["messages"] = messages
    tools: list[dict[str, Any]] = []
    if request.tools:
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        body["tools"] = tools
        choice: dict[str, Any] = {"type": request.tool_choice}
        if request.tool_choice == "auto" and request.parallel_tool_calls is False:
            choice["disable_parallel_tool_use"] = True
        body["tool_choice"] = choice
    marked: list[dict[str, Any]] = []
    for index in cache_breakpoints(request):
        block = (
            tools[-1]
            if index == -1 and tools
            else system[index]
            if index < leading
            else ends.get(index)
        )
        if block is not None and all(block is not m for m in marked):
            block["cache_control"] = dict(_EPHEMERAL)
            marked.append(block)
    if stream:
        body["stream"] = True
    return body


def _count(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelResponseError(f"malformed usage in model response: {data!r:.200}")
    return value


def anthropic_usage(data: Any) -> Usage | None:
    """Usage from a Messages ``usage`` object, the prompt counted whole, cache reads and writes."""
    if not isinstance(data, dict):
        return None
    read = _count(data, "cache_read_input_tokens")
    written = _count(data, "cache_creation_input_tokens")
    prompt = _count(data, "input_tokens") + read + written
    output = _count(data, "output_tokens")
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=prompt + output,
        cached_tokens=read,
        cache_write_tokens=written,
    )


def finish_reason(stop_reason: Any) -> str:
    """stowage's finish reason for a ``stop_reason`` (an unknown one is kept as it is)."""
    if not stop_reason:
        raise IncompleteResponse("the message has no stop_reason: the response never finished")
    reason = str(stop_reason)
    return _FINISH.get(reason, reason)


def _call(block: dict[str, Any], arguments: str) -> FunctionCall:
    call_id, name = block.get("id"), block.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str) or not call_id or not name:
        raise ModelResponseError(f"tool_use block without id or name: {call_id!r}, {name!r}")
    return FunctionCall(call_id=call_id, name=name, arguments=arguments)


def _response(
    texts: list[str], calls: list[FunctionCall], usage: Usage | None, model: Any, stop: Any
) -> ModelResponse:
    items: list[AssistantMessage | FunctionCall] = []
    text = "".join(texts)
    if text:
        items.append(AssistantMessage(text=text))
    items.extend(calls)
    return ModelResponse(
        items=tuple(items), usage=usage, model=str(model or ""), finish_reason=finish_reason(stop)
    )


def parse_message(data: Any) -> ModelResponse:
    """A ``ModelResponse`` from a decoded ``message`` object."""
    try:
        if data.get("type") == "error":
            raise ModelResponseError(f"the endpoint answered an error: {data.get('error')!r:.200}")
        texts: list[str] = []
        calls: list[FunctionCall] = []
        for block in data["content"]:
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text") or ""))
            elif kind == "tool_use":
                arguments = orjson.dumps(block.get("input") or {}).decode()
                calls.append(_call(block, arguments))
        usage = anthropic_usage(data.get("usage"))
        stop = data.get("stop_reason")
        model = data.get("model")
    except (KeyError, TypeError, AttributeError, orjson.JSONEncodeError) as exc:
        raise ModelResponseError(f"malformed message body: {data!r:.200}") from exc
    return _response(texts, calls, usage, model, stop)


def event_error(error: Any) -> ModelError:
    """The ``ModelError`` for a stream's ``error`` event (overloaded: retried). Raises nothing."""
    kind = error.get("type") if isinstance(error, dict) else None
    message = str(error.get("message") or "") if isinstance(error, dict) else ""
    if is_context_length_error(kind, message):
        return context_error(kind, message)
    text = f"error event in the message stream: {kind}: {message}"
    if kind in _TRANSIENT:
        return ModelConnectionError(text)
    return ModelResponseError(text)


@dataclass(eq=False, kw_only=True)
class _Block:
    kind: str
    parts: list[str] = field(default_factory=list)
    head: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class MessagesStreamAccumulator:
    """Folds Messages stream events into text deltas and one final response."""

    _blocks: dict[int, _Block] = field(default_factory=dict)
    _usage: dict[str, Any] = field(default_factory=dict)
    _model: str = ""
    _stop: Any = None
    _events: int = 0
    _started: bool = False
    #: characters of text and call arguments so far (what ``max_answer_chars`` caps)
    answer_chars: int = 0

    def feed(self, event: Any) -> str:
        """Take one event; return its text (may be empty)."""
        self._events += 1
        try:
            kind = event.get("type")
            if kind == "content_block_delta":
                delta = event["delta"]
                block = self._blocks[int(event["index"])]
                piece = str(delta.get("text") or delta.get("partial_json") or "")
                block.parts.append(piece)
                self.answer_chars += len(piece)
                return piece if delta.get("type") == "text_delta" else ""
            if kind == "content_block_start":
                head = dict(event["content_block"])
                block = _Block(kind=str(head.get("type")), head=head)
                if block.kind == "text" and head.get("text"):
                    block.parts.append(str(head["text"]))
                self._blocks[int(event["index"])] = block
                return str(head.get("text") or "") if block.kind == "text" else ""
            if kind == "message_start":
                message = event["message"]
                self._started = True
                self._model = str(message.get("model") or "")
                self._usage.update(message.get("usage") or {})
            elif kind == "message_delta":
                self._stop = (event.get("delta") or {}).get("stop_reason") or self._stop
                # cumulative counts: the input ones come again on newer endpoints
                self._usage.update(
                    {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
                )
            elif kind == "error":
                raise event_error(event.get("error"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelResponseError(f"malformed message stream event: {event!r:.200}") from exc
        return ""

    def finish(self) -> ModelResponse:
        """The whole response."""
        if not self._started:
            raise IncompleteResponse(
                f"message stream ended without message_start (after {self._events} events)"
            )
        texts: list[str] = []
        calls: list[FunctionCall] = []
        for _, block in sorted(self._blocks.items()):
            if block.kind == "text":
                texts.append("".join(block.parts))
            elif block.kind == "tool_use":
                arguments = "".join(block.parts)
                if not arguments.strip():
                    arguments = orjson.dumps(block.head.get("input") or {}).decode()
                calls.append(_call(block.head, arguments))
        if self._stop is None:
            raise IncompleteResponse(
                f"message stream ended after {self._events} events without a stop_reason: "
                "the response was cut off"
            )
        return _response(texts, calls, anthropic_usage(self._usage), self._model, self._stop)
