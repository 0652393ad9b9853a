"""The fake server's side of the wire: bodies back into requests, responses into real formats."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ModelRequest,
    ModelResponse,
    SystemMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from stowage.model import COMPACTION_ITEM_TYPE, SUMMARY_PREFIX

__all__ = [
    "COMPACT_INSTRUCTION",
    "PIECE_CHARS",
    "answer_id",
    "finish_reason",
    "content_text",
    "body_purpose",
    "compaction_object",
    "read_compaction",
    "chat_completion",
    "chat_chunks",
    "request_from_chat",
    "request_from_responses",
    "responses_events",
    "responses_object",
]

#: characters of text a fake stream sends in one delta
PIECE_CHARS = 16


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or its parts' ``text`` joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _message(role: str, text: str) -> Item:
    if role in ("system", "developer"):
        return SystemMessage(text=text)
    if role == "assistant":
        return AssistantMessage(text=text)
    if text.startswith(SUMMARY_PREFIX):
        return CompactionSummary(text=text[len(SUMMARY_PREFIX) :])
    return UserMessage(text=text)


#: what the fake's ``/responses/compact`` asks its brain, after the items to compact
COMPACT_INSTRUCTION = "Compact the conversation above into a summary that keeps every fact."
# marks the fake's own compaction items, so it reads back only what it wrote
_FAKE_CONTENT = "stowage-fake-compaction"
# characters of each user message a compaction item keeps
_USER_OPENING = 80


def _seal(payload: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode("ascii")


def read_compaction(entry: dict[str, Any]) -> CompactionSummary:
    """The summary a compaction input item stands for, and the item. Raises nothing."""
    text = "[a compaction item this server cannot read]"
    try:
        payload = json.loads(base64.b64decode(str(entry.get("encrypted_content", ""))))
        if isinstance(payload, dict) and payload.get("kind") == _FAKE_CONTENT:
            text = str(payload["summary"])
    except (ValueError, KeyError, TypeError):
        pass  # not one of this server's items: it stays opaque, as said above
    return CompactionSummary(text=text, provider=dict(entry))


def compaction_object(
    summary: str, *, items: int, users: list[str], usage: Usage | None, model: str, serial: int
) -> dict[str, Any]:
    """A ``response.compaction`` object whose item ``read_compaction`` reads back."""
    openings = [text[:_USER_OPENING] for text in users]
    digest = {"kind": _FAKE_CONTENT, "items": items, "users": openings, "summary": summary}
    return {
        "id": answer_id("cmp_", serial, model),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [
            {
                "type": COMPACTION_ITEM_TYPE,
                "id": answer_id("cmpi_", serial, model),
                "encrypted_content": _seal(digest),
            }
        ],
        "usage": None
        if usage is None
        else {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.total_tokens,
        },
    }


def body_purpose(body: dict[str, Any], purpose: str | None = None) -> str:
    """The purpose, "round" or "summary": the purpose header, else what the body shows."""
    if purpose in ("round", "summary"):
        return purpose
    if not body.get("tools"):
        return "summary"
    choice = body.get("tool_choice")
    if (choice.get("type") if isinstance(choice, dict) else choice) != "none":  # Anthropic: dict
        return "round"
    entries = body.get("messages", body.get("input"))
    last = entries[-1] if isinstance(entries, list) and entries else None
    if isinstance(entries, str) or (
        isinstance(last, dict)
        and last.get("role") == "user"
        and last.get("type", "message") == "message"
    ):
        return "summary"
    return "round"


def _request(
    body: dict[str, Any], items: list[Item], tools: list[ToolSpec], purpose: str | None
) -> ModelRequest:
    summary = body_purpose(body, purpose) == "summary"
    max_tokens = body.get("max_tokens", body.get("max_output_tokens"))
    return ModelRequest(
        model=str(body.get("model", "")),
        input=tuple(items),
        tools=tuple(tools),
        tool_choice="none" if summary or body.get("tool_choice") == "none" else "auto",
        max_output_tokens=int(max_tokens) if max_tokens is not None else None,
        purpose="summary" if summary else "round",
    )


def request_from_chat(body: dict[str, Any], *, purpose: str | None = None) -> ModelRequest:
    """The ``ModelRequest`` a Chat Completions body stands for."""
    items: list[Item] = []
    for message in body["messages"]:
        role = message["role"]
        if role == "tool":
            items.append(
                FunctionCallOutput(
                    call_id=message["tool_call_id"], output=content_text(message.get("content"))
                )
            )
            continue
        text = content_text(message.get("content"))
        if text or role != "assistant":
            items.append(_message(role, text))
        for call in message.get("tool_calls") or ():
            function = call["function"]
            items.append(
                FunctionCall(
                    call_id=call["id"], name=function["name"], arguments=function["arguments"]
                )
            )
    tools = [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description", ""),
            parameters=t["function"].get("parameters") or {},
        )
        for t in body.get("tools") or ()
    ]
    return _request(body, items, tools, purpose)


def request_from_responses(body: dict[str, Any], *, purpose: str | None = None) -> ModelRequest:
    """The ``ModelRequest`` a Responses API body stands for (see ``request_from_chat``)."""
    raw = body.get("input", [])
    entries = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    items: list[Item] = []
    if body.get("instructions"):
        items.append(SystemMessage(text=str(body["instructions"])))
    for entry in entries:
        kind = entry.get("type", "message")
        if kind == "function_call":
            items.append(
                FunctionCall(
                    call_id=entry["call_id"], name=entry["name"], arguments=entry["arguments"]
                )
            )
        elif kind == "function_call_output":
            items.append(
                FunctionCallOutput(call_id=entry["call_id"], output=content_text(entry["output"]))
            )
        elif kind == COMPACTION_ITEM_TYPE:
            items.append(read_compaction(entry))
        else:
            items.append(_message(entry["role"], content_text(entry.get("content"))))
    tools = [
        ToolSpec(
            name=t["name"],
            description=t.get("description") or "",
            parameters=t.get("parameters") or {},
        )
        for t in body.get("tools") or ()
        if t.get("type") == "function"
    ]
    return _request(body, items, tools, purpose)


def answer_id(prefix: str, *parts: object) -> str:
    """An id as a provider makes one: ``prefix`` and a digest of ``parts``."""
    return prefix + hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:24]


def _pieces(text: str) -> Iterator[str]:
    for start in range(0, len(text), PIECE_CHARS):
        yield text[start : start + PIECE_CHARS]


def _chat_usage(response: ModelResponse) -> dict[str, Any] | None:
    u = response.usage
    if u is None:
        return None
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def finish_reason(response: ModelResponse) -> str:
    """OpenAI's finish reason of ``response``: its own, else ``tool_calls`` or ``stop``."""
    return response.finish_reason or ("tool_calls" if response.calls else "stop")


def chat_completion(response: ModelResponse, *, model: str, serial: int) -> dict[str, Any]:
    """A ``chat.completion`` body for ``response``."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": response.text or None,
        "refusal": None,
    }
    if response.calls:
        message["tool_calls"] = [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in response.calls
        ]
    return {
        "id": answer_id("chatcmpl-", serial, model),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(response),
            }
        ],
        "usage": _chat_usage(response),
    }


def chat_chunks(
    response: ModelResponse, *, model: str, serial: int, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` dicts that stream ``response``."""
    base = {
        "id": answer_id("chatcmpl-", serial, model),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    extra = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice], **extra}

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in _pieces(response.text):
        yield chunk({"content": piece})
    for index, call in enumerate(response.calls):
        head = {"index": index, "id": call.call_id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for piece in _pieces(call.arguments):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, finish_reason(response))
    if include_usage:
        yield {**base, "choices": [], "usage": _chat_usage(response)}


def _output_items(response: ModelResponse, serial: int) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    for index, item in enumerate(response.items):
        if isinstance(item, AssistantMessage):
            output.append(
                {
                    "type": "message",
                    "id": answer_id("msg_", serial, index),
                    "status": "completed",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "output_text",
                            "text": item.text,
                            "annotations": [],
                            "logprobs": [],
                        }
                    ],
                }
            )
        else:
            output.append(
                {
                    "type": "function_call",
                    "id": answer_id("fc_", serial, index),
                    "call_id": item.call_id,
                    "name": item.name,
                    "arguments": item.arguments,
                    "status": "completed",
                }
            )
    return output


def responses_object(
    response: ModelResponse, *, model: str, serial: int, status: str = "completed"
) -> dict[str, Any]:
    """A Responses API ``response`` object for ``response``."""
    incomplete = status == "completed" and response.truncated
    if incomplete:
        status = "incomplete"
    done = status in ("completed", "incomplete")
    u = response.usage
    usage = (
        {
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total_tokens,
        }
        if u is not None and done
        else None
    )
    return {
        "id": answer_id("resp_", serial, model),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "model": model,
        "output": _output_items(response, serial) if done else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def responses_events(
    response: ModelResponse, *, model: str, serial: int
) -> Iterator[dict[str, Any]]:
    """The Responses API stream events for ``response``, ``response.created`` to ``completed``."""
    sequence = 0

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        nonlocal sequence
        sequence += 1
        return {"type": kind, "sequence_number": sequence - 1, **fields}

    yield event(
        "response.created",
        response=responses_object(response, model=model, serial=serial, status="in_progress"),
    )
    for index, item in enumerate(_output_items(response, serial)):
        at = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event("response.content_part.added", **at, content_index=0, part=part)
            for piece in _pieces(text):
                yield event(
                    "response.output_text.delta", **at, content_index=0, delta=piece, logprobs=[]
                )
            yield event("response.output_text.done", **at, content_index=0, text=text, logprobs=[])
            yield event(
                "response.content_part.done", **at, content_index=0, part=item["content"][0]
            )
        else:
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in _pieces(item["arguments"]):
                yield event("response.function_call_arguments.delta", **at, delta=piece)
            yield event("response.function_call_arguments.done", **at, arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    final = responses_object(response, model=model, serial=serial)
    yield event(f"response.{final['status']}", response=final)
