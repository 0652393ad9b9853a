"""Pure translation between stowage items and the two OpenAI wire formats."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    ContextLengthExceeded,
    FunctionCall,
    FunctionCallOutput,
    IncompleteResponse,
    Item,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ProviderCompaction,
    SystemMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from stowage.policy import answer_chars

__all__ = [
    "COMPACTION_ITEM_TYPE",
    "PURPOSE_HEADER",
    "SUMMARY_PREFIX",
    "ChatStreamAccumulator",
    "ResponsesStreamAccumulator",
    "chat_body",
    "chat_messages",
    "chat_tools",
    "compact_body",
    "context_error",
    "context_error_figures",
    "is_context_length_error",
    "parse_chat_completion",
    "parse_compaction",
    "parse_responses_response",
    "responses_body",
    "responses_input",
    "responses_tools",
]

# Tells a test server whether a request is a summary; real providers ignore unknown headers.
PURPOSE_HEADER = "x-stowage-purpose"
#: the ``type`` of the item ``/responses/compact`` answers with
COMPACTION_ITEM_TYPE = "compaction"

SUMMARY_PREFIX = "Summary of the conversation so far:\n"


def chat_messages(items: Iterable[Item]) -> list[dict[str, Any]]:
    """Chat Completions ``messages`` for ``items``.

    Consecutive function calls become one assistant message with ``tool_calls``, merged into the
    assistant text message right before them, as the API expects one message per turn.
    """
    # Every call encodes the whole history again: plain ``isinstance`` tests, the commonest
    # item first, take half the time of a ``match`` on class patterns.
    messages: list[dict[str, Any]] = []
    append = messages.append
    # The assistant message that calls may still join: set by an assistant text or a call.
    open_assistant: dict[str, Any] | None = None
    for item in items:
        if isinstance(item, FunctionCallOutput):
            append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
        elif isinstance(item, FunctionCall):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if open_assistant is None:
                open_assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
                append(open_assistant)
            elif "tool_calls" in open_assistant:
                open_assistant["tool_calls"].append(call)
            else:
                open_assistant["tool_calls"] = [call]
            continue
        elif isinstance(item, AssistantMessage):
            open_assistant = {"role": "assistant", "content": item.text}
            append(open_assistant)
            continue
        elif isinstance(item, UserMessage):
            append({"role": "user", "content": item.text})
        elif isinstance(item, SystemMessage):
            append({"role": "system", "content": item.text})
        elif isinstance(item, CompactionSummary):
            append({"role": "user", "content": SUMMARY_PREFIX + item.text})
        open_assistant = None
    return messages


def responses_input(items: Iterable[Item]) -> list[dict[str, Any]]:
    """Responses API ``input`` for ``items``: messages, function calls and their outputs."""
    # ``isinstance`` tests, the commonest item first, as in ``chat_messages``
    out: list[dict[str, Any]] = []
    append = out.append
    for item in items:
        if isinstance(item, FunctionCallOutput):
            append({"type": "function_call_output", "call_id": item.call_id, "output": item.output})
        elif isinstance(item, FunctionCall):
            append(
                {
                    "type": "function_call",
                    "call_id": item.call_id,
                    "name": item.name,
                    "arguments": item.arguments,
                }
            )
        elif isinstance(item, UserMessage):
            append({"role": "user", "content": item.text})
        elif isinstance(item, AssistantMessage):
            append({"role": "assistant", "content": item.text})
        elif isinstance(item, SystemMessage):
            append({"role": "system", "content": item.text})
        elif isinstance(item, CompactionSummary):
            provider = item.provider
            # the endpoint's own compaction item goes back exactly as it came
            if isinstance(provider, dict):
                append(provider)
            else:
                append({"role": "user", "content": SUMMARY_PREFIX + item.text})
    return out


def chat_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """Chat Completions ``tools``."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def responses_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """Responses API ``tools``; ``strict`` is off because our schemas are not strict-mode ones."""
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
            "strict": False,
        }
        for t in tools
    ]


def chat_body(request: ModelRequest, *, stream: bool) -> dict[str, Any]:
    """The whole JSON body of a Chat Completions request."""
    body: dict[str, Any] = {"model": request.model, "messages": chat_messages(request.input)}
    body.update(_request_options(request, chat_tools(request.tools), "max_tokens"))
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _request_options(
    request: ModelRequest, tools: list[dict[str, Any]], max_tokens_field: str
) -> dict[str, Any]:
    """The fields both wire APIs take alike: tools and choice, the output limit, the cache key."""
    options: dict[str, Any] = {}
    if request.tools:
        options["tools"] = tools
        options["tool_choice"] = request.tool_choice
        if request.parallel_tool_calls is not None:
            options["parallel_tool_calls"] = request.parallel_tool_calls
    if request.max_output_tokens is not None:
        options[max_tokens_field] = request.max_output_tokens
    if request.cache_key:
        options["prompt_cache_key"] = request.cache_key
    return options


def compact_body(request: ModelRequest) -> dict[str, Any]:
    """The JSON body of ``POST /responses/compact``: model, items to compact, cache key."""
    body: dict[str, Any] = {"model": request.model, "input": responses_input(request.input)}
    if request.cache_key:
        body["prompt_cache_key"] = request.cache_key
    return body


def parse_compaction(data: Any, *, covered: int) -> ProviderCompaction:
    """The compaction a decoded ``response.compaction`` object carries, verbatim."""
    try:
        output = data["output"]
        found = [
            item
            for item in output
            if isinstance(item, dict) and item.get("type") == COMPACTION_ITEM_TYPE
        ]
        usage = _usage(data.get("usage"), "input_tokens", "output_tokens")
    except (KeyError, TypeError, AttributeError) as exc:
        raise ModelResponseError(f"malformed compaction body: {data!r:.200}") from exc
    if not found:
        kinds = sorted({str(i.get("type")) for i in output if isinstance(i, dict)})
        raise ModelResponseError(
            f"the compaction answer has no {COMPACTION_ITEM_TYPE!r} item (output: "
            f"{', '.join(kinds) or 'empty'})"
        )
    text = (
        f"[history compacted by the provider: {covered} items; the content is encrypted, "
        "only the Responses endpoint reads it]"
    )
    return ProviderCompaction(item=dict(found[-1]), text=text, usage=usage)


def responses_body(request: ModelRequest, *, stream: bool) -> dict[str, Any]:
    """The whole JSON body of a Responses API request (tools as in ``chat_body``)."""
    body: dict[str, Any] = {"model": request.model, "input": responses_input(request.input)}
    body.update(_request_options(request, responses_tools(request.tools), "max_output_tokens"))
    if stream:
        body["stream"] = True
    return body


def is_context_length_error(code: object, message: str) -> bool:
    """Whether an error code or message says the input does not fit the context window."""
    if code == "context_length_exceeded":
        return True
    lowered = message.lower()
    if "maximum context length" in lowered or "prompt is too long" in lowered:
        return True
    return "context" in lowered and ("exceed" in lowered or "too long" in lowered)


# The window a context error states: OpenAI and vLLM "maximum context length is 8192 tokens",
# Anthropic (through proxies) "7180 tokens > 4096 maximum", others "context window of 8192".
_LIMIT = (
    re.compile(r"maximum context length (?:is|of) (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"context (?:window|length) (?:is|of) (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"> ?(\d[\d,]*) maximum", re.IGNORECASE),
    re.compile(r"limit (?:is|of) (\d[\d,]*) tokens", re.IGNORECASE),
    # Anthropic, when prompt and max_tokens together pass it: "197000 + 8192 > 200000"
    re.compile(r"\d[\d,]* \+ \d[\d,]* > (\d[\d,]*)"),
)
# The input it counted, most precise first: "(7180 in the messages, ...)", "your messages
# resulted in 7180 tokens", "prompt is too long: 7180 tokens".
_INPUT = (
    re.compile(r"(\d[\d,]*) in the messages", re.IGNORECASE),
    re.compile(r"resulted in (\d[\d,]*) tokens", re.IGNORECASE),
    re.compile(r"prompt is too long: (\d[\d,]*) tokens", re.IGNORECASE),
    re.compile(r"(\d[\d,]*) \+ \d[\d,]* > \d", re.IGNORECASE),
)
_TOKENS = re.compile(r"(\d[\d,]*) tokens", re.IGNORECASE)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def context_error_figures(message: str) -> tuple[int | None, int | None]:
    """The input tokens and the window a context-length error states (None: not said)."""
    limit = next((_number(m.group(1)) for p in _LIMIT if (m := p.search(message))), None)
    tokens = next((_number(m.group(1)) for p in _INPUT if (m := p.search(message))), None)
    if tokens is None:
        counts = [_number(m.group(1)) for m in _TOKENS.finditer(message)]
        others = [n for n in counts if n != limit]
        tokens = max(others) if others else None
    return tokens, limit


def context_error(code: object, message: str) -> ContextLengthExceeded:
    """A ``ContextLengthExceeded`` carrying the figures ``message`` states. Raises nothing."""
    tokens, limit = context_error_figures(message)
    return ContextLengthExceeded(message or str(code), tokens=tokens, limit=limit)


def _usage(data: Any, inp: str, out: str) -> Usage | None:
    if not isinstance(data, dict):
        return None
    try:
        input_tokens = int(data[inp])
        output_tokens = int(data[out])
        total = data.get("total_tokens")
        total_tokens = int(total) if total is not None else input_tokens + output_tokens
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelResponseError(f"malformed usage in model response: {data!r:.200}") from exc
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=total_tokens,
        cached_tokens=_cached(data),
    )


def _cached(data: dict[str, Any]) -> int:
    """Cached input tokens of either wire API's usage; 0 when absent or not a count."""
    for key in ("prompt_tokens_details", "input_tokens_details"):
        details = data.get(key)
        if isinstance(details, dict):
            value = details.get("cached_tokens")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return 0


def _call(call_id: Any, name: Any, arguments: Any) -> FunctionCall:
    if not isinstance(call_id, str) or not isinstance(name, str) or not call_id or not name:
        raise ModelResponseError(f"tool call without id or name: {call_id!r}, {name!r}")
    return FunctionCall(call_id=call_id, name=name, arguments=str(arguments or ""))


def _response(
    text: str,
    calls: Sequence[FunctionCall],
    usage: Usage | None,
    model: Any,
    finish_reason: str | None,
) -> ModelResponse:
    items: list[AssistantMessage | FunctionCall] = []
    if text:
        items.append(AssistantMessage(text=text))
    items.extend(calls)
    return ModelResponse(
        items=tuple(items), usage=usage, model=str(model or ""), finish_reason=finish_reason
    )


def parse_chat_completion(data: Any) -> ModelResponse:
    """A ``ModelResponse`` from a decoded ``chat.completion`` body."""
    try:
        choices = data.get("choices")
        if not choices:
            raise IncompleteResponse("chat completion has no choices")
        choice = choices[0]
        finish_reason = choice.get("finish_reason")
        if not finish_reason:
            raise IncompleteResponse(
                "chat completion has no finish_reason: the response never said it was done"
            )
        message = choice["message"]
        text = message.get("content") or ""
        calls = [
            _call(tc.get("id"), tc["function"].get("name"), tc["function"].get("arguments"))
            for tc in message.get("tool_calls") or ()
        ]
        usage = _usage(data.get("usage"), "prompt_tokens", "completion_tokens")
        model = data.get("model")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelResponseError(f"malformed chat completion: {data!r:.200}") from exc
    if not isinstance(text, str):
        raise ModelResponseError("chat completion content is not text")
    return _response(text, calls, usage, model, str(finish_reason))


def _responses_finish(data: dict[str, Any], has_calls: bool) -> str:
    """The finish reason a Responses API ``response`` object stands for."""
    status = data.get("status")
    if status == "failed" or data.get("error"):
        raise ModelResponseError(f"response failed: {data.get('error')!r:.200}")
    if status == "incomplete":
        reason = str((data.get("incomplete_details") or {}).get("reason") or "incomplete")
        return "length" if reason == "max_output_tokens" else reason
    if status not in ("completed", None):
        raise IncompleteResponse(f"response is {status!r}, not completed")
    return "tool_calls" if has_calls else "stop"


def parse_responses_response(data: Any) -> ModelResponse:
    """A ``ModelResponse`` from a decoded Responses API ``response`` object."""
    try:
        texts: list[str] = []
        calls: list[FunctionCall] = []
        output = data["output"]
        for item in output:
            kind = item.get("type")
            if kind == "message":
                texts.extend(
                    part.get("text") or ""
                    for part in item.get("content") or ()
                    if part.get("type") == "output_text"
                )
            elif kind == "function_call":
                calls.append(_call(item.get("call_id"), item.get("name"), item.get("arguments")))
        finish_reason = _responses_finish(data, bool(calls))
        usage = _usage(data.get("usage"), "input_tokens", "output_tokens")
        model = data.get("model")
    except (KeyError, TypeError, AttributeError) as exc:
        raise ModelResponseError(f"malformed responses body: {data!r:.200}") from exc
    if not output and finish_reason != "length":
        raise IncompleteResponse("response has no output")
    return _response("".join(texts), calls, usage, model, finish_reason)


@dataclass(eq=False, kw_only=True)
class _PartialCall:
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(eq=False)
class ChatStreamAccumulator:
    """Folds ``chat.completion.chunk`` dicts into text deltas and one final response."""

    _text: list[str] = field(default_factory=list)
    _calls: dict[int, _PartialCall] = field(default_factory=dict)
    _usage: Usage | None = None
    _model: str = ""
    _chunks: int = 0
    _finish_reason: str | None = None
    #: characters of text and call arguments so far (what ``max_answer_chars`` caps)
    answer_chars: int = 0

    def feed(self, chunk: Any) -> str:
        """Take one chunk; return its text (may be empty). Raises ``ModelResponseError``."""
        try:
            self._chunks += 1
            self._model = chunk.get("model") or self._model
            if chunk.get("usage"):
                self._usage = _usage(chunk["usage"], "prompt_tokens", "completion_tokens")
            text = ""
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                text += delta.get("content") or ""
                for tc in delta.get("tool_calls") or ():
                    partial = self._calls.setdefault(int(tc.get("index", 0)), _PartialCall())
                    partial.call_id = tc.get("id") or partial.call_id
                    function = tc.get("function") or {}
                    partial.name = function.get("name") or partial.name
                    piece = function.get("arguments") or ""
                    partial.arguments.append(piece)
                    self.answer_chars += len(piece)
                self._finish_reason = choice.get("finish_reason") or self._finish_reason
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelResponseError(f"malformed chat stream chunk: {chunk!r:.200}") from exc
        if text:
            self._text.append(text)
            self.answer_chars += len(text)
        return text

    def finish(self) -> ModelResponse:
        """The whole response."""
        if not self._chunks:
            raise IncompleteResponse("chat stream ended without a single chunk")
        if self._finish_reason is None:
            raise IncompleteResponse(
                f"chat stream ended after {self._chunks} chunks without a finish_reason: "
                "the response was cut off"
            )
        calls = [
            _call(p.call_id, p.name, "".join(p.arguments)) for _, p in sorted(self._calls.items())
        ]
        return _response(
            "".join(self._text), calls, self._usage, self._model, str(self._finish_reason)
        )


@dataclass(eq=False)
class ResponsesStreamAccumulator:
    """Folds Responses API stream events into text deltas and the final response."""

    _final: ModelResponse | None = None
    _events: int = 0
    #: characters of text and call arguments so far (what ``max_answer_chars`` caps): the
    #: deltas as they come, then the final response's own count if larger
    answer_chars: int = 0

    def feed(self, event: Any) -> str:
        """Take one event; return its text delta (may be empty)."""
        self._events += 1
        try:
            kind = event.get("type")
            if kind == "response.output_text.delta":
                delta = str(event.get("delta") or "")
                self.answer_chars += len(delta)
                return delta
            if kind == "response.function_call_arguments.delta":
                self.answer_chars += len(str(event.get("delta") or ""))
            elif kind in ("response.completed", "response.incomplete"):
                # incomplete: stopped by the output limit (or a filter); it says so itself
                self._final = parse_responses_response(event["response"])
                self.answer_chars = max(self.answer_chars, answer_chars(self._final))
            elif kind in ("error", "response.failed"):
                error = event.get("error") or (event.get("response") or {}).get("error") or event
                code, message = error.get("code"), str(error.get("message") or "")
                if is_context_length_error(code, message):
                    raise context_error(code, message)
                raise ModelResponseError(f"response stream reported {kind}: {event!r:.300}")
        except (KeyError, TypeError, AttributeError) as exc:
            raise ModelResponseError(f"malformed responses stream event: {event!r:.200}") from exc
        return ""

    def finish(self) -> ModelResponse:
        """The final response."""
        if self._final is None:
            raise IncompleteResponse(
                f"responses stream ended before response.completed (after {self._events} "
                "events): the response was cut off"
            )
        return self._final
