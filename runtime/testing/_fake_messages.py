"""The fake server's Anthropic Messages side: bodies back into requests, answers into messages
and stream events, the context window's overflow errors, and a prompt cache that serves only
what the request's breakpoints mark.

``BreakpointCache`` simulates Anthropic's cache more strictly than the real one: the prefix up
to a ``cache_control`` breakpoint is a cache read only when a request marked exactly that
prefix before (the API also looks back about twenty blocks for one; this does not), a marked
prefix not seen before is written (``cache_creation_input_tokens``), and a request without
breakpoints is not cached at all. What a request neither read nor wrote is its
``input_tokens``, as the API reports it. Everything here is pure but the cache's memory.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
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
    UserMessage,
)
from stowage.model import SUMMARY_PREFIX, scripted_usage

from ._fake_wire import PIECE_CHARS, answer_id, body_purpose, content_text, finish_reason

__all__ = [
    "BreakpointCache",
    "CacheUse",
    "message_events",
    "message_object",
    "overflow_error",
    "request_from_messages",
]


def _user_block(block: dict[str, Any]) -> Item | None:
    kind = block.get("type")
    if kind == "tool_result":
        return FunctionCallOutput(
            call_id=str(block["tool_use_id"]),
            output=content_text(block.get("content", "")),
            is_error=bool(block.get("is_error")),
        )
    if kind == "text":
        text = str(block.get("text", ""))
        if text.startswith(SUMMARY_PREFIX):
            return CompactionSummary(text=text[len(SUMMARY_PREFIX) :])
        return UserMessage(text=text)
    return None


def _assistant_block(block: dict[str, Any]) -> Item | None:
    kind = block.get("type")
    if kind == "tool_use":
        arguments = json.dumps(block.get("input") or {}, separators=(",", ":"))
        return FunctionCall(call_id=str(block["id"]), name=str(block["name"]), arguments=arguments)
    if kind == "text":
        return AssistantMessage(text=str(block.get("text", "")))
    return None


def request_from_messages(body: dict[str, Any], *, purpose: str | None = None) -> ModelRequest:
    """The ``ModelRequest`` a Messages body stands for."""
    items: list[Item] = []
    system = body.get("system")
    if isinstance(system, str):
        items.append(SystemMessage(text=system))
    else:
        items += [SystemMessage(text=str(b.get("text", ""))) for b in system or ()]
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        read = _assistant_block if message["role"] == "assistant" else _user_block
        items += [item for item in map(read, blocks) if item is not None]
    tools = [
        ToolSpec(
            name=t["name"],
            description=t.get("description") or "",
            parameters=t.get("input_schema") or {},
        )
        for t in body.get("tools") or ()
    ]
    summary = body_purpose(body, purpose) == "summary"
    choice = (body.get("tool_choice") or {}).get("type")
    return ModelRequest(
        model=str(body.get("model", "")),
        input=tuple(items),
        tools=tuple(tools),
        tool_choice="none" if summary or choice == "none" else "auto",
        max_output_tokens=int(body["max_tokens"]) if body.get("max_tokens") else None,
        purpose="summary" if summary else "round",
    )


def overflow_error(request: ModelRequest, window: int) -> dict[str, Any] | None:
    """The 400 body the API answers when ``request`` does not fit a ``window``-token context (its
    prompt counted as the scripted brain counts it: four characters a token), else None."""
    tokens = scripted_usage(request, ()).input_tokens
    reserve = request.max_output_tokens or 0
    if tokens > window:
        message = f"prompt is too long: {tokens} tokens > {window} maximum"
    elif tokens + reserve > window:
        message = (
            f"input length and `max_tokens` exceed context limit: {tokens} + {reserve} > "
            f"{window}, decrease input length or `max_tokens` and try again"
        )
    else:
        return None
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


# -- the cache ------------------------------------------------------------------------------


def _plain(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _chars(block: dict[str, Any]) -> int:
    kind = block.get("type")
    if kind in ("text", None) and "text" in block:
        return len(str(block["text"]))
    if kind == "tool_use":
        return len(str(block.get("name", ""))) + len(json.dumps(block.get("input") or {}))
    if kind == "tool_result":
        return len(content_text(block.get("content", "")))
    return len(orjson.dumps(_plain(block)))  # a tool's definition


def _blocks(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The request in the cache's order, tools then system then messages, with each block's
    place (its section or role)."""
    for tool in body.get("tools") or ():
        yield "tool", tool
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or ():
        yield "system", block
    for message in body.get("messages") or ():
        content = message.get("content")
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            yield str(message.get("role")), block


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheUse:
    """What the cache did for one request, in tokens: the prompt (``total``), read from the
    cache, written to it, neither (``uncached``), and whether it read less than the previous
    request of its key and purpose had marked (a prefix break)."""

    total: int
    read: int
    written: int
    breakpoints: int
    broke: bool

    @property
    def uncached(self) -> int:
        return self.total - self.read - self.written


@dataclass(kw_only=True)
class BreakpointCache:
    """Anthropic's prompt cache as the fake server keeps it (``FakeOpenAIServer``'s
    ``breakpoint_cache``): prefixes marked by ``cache_control`` breakpoints, ``capacity`` of them
    remembered (oldest forgotten first); a marked prefix under ``minimum`` tokens is not cached,
    as the API ignores such breakpoints. ``figures`` holds what each session read and wrote."""

    minimum: int = 0
    capacity: int = 100_000
    _entries: OrderedDict[str, int] = field(default_factory=OrderedDict)
    _last: dict[tuple[str, str], int] = field(default_factory=dict)
    figures: dict[str, dict[str, int]] = field(default_factory=dict)

    @staticmethod
    def key_for(body: dict[str, Any]) -> str:
        """A session's key, as near as the wire shows one: the model and the instructions."""
        system = body.get("system")
        first = system if isinstance(system, str) else content_text((system or [{}])[:1])
        digest = hashlib.sha1(f"{body.get('model')}|{first}".encode()).hexdigest()[:16]
        return "anthropic:" + digest

    def serve(self, body: dict[str, Any], *, total: int | None, purpose: str) -> CacheUse:
        """Serve the request ``body``; ``total``: the prompt's tokens as the brain counts them
        (None: the cache's own estimate, four characters a token); remembers its marks."""
        running = hashlib.sha1()
        tokens = 0.0
        marks: list[tuple[str, int]] = []
        for place, block in _blocks(body):
            running.update(
                place.encode() + b"\0" + orjson.dumps(_plain(block), option=orjson.OPT_SORT_KEYS)
            )
            tokens += _chars(block) / 4
            if "cache_control" in block:
                marks.append((running.hexdigest(), round(tokens)))
        whole = round(tokens) if total is None else total
        read = written = 0
        for digest, upto in marks:
            if upto < self.minimum:
                continue
            if digest in self._entries:
                self._entries.move_to_end(digest)
                read = max(read, upto)
            else:
                self._entries[digest] = upto
        if marks:
            last = max(upto for _, upto in marks)
            if last >= self.minimum:
                written = max(0, last - read)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        read, written = min(read, whole), min(written, max(0, whole - read))
        key = self.key_for(body)
        previous = self._last.get((key, purpose))
        broke = purpose == "round" and previous is not None and read < previous
        if marks:
            self._last[(key, purpose)] = min(max(upto for _, upto in marks), whole)
        counts = self.figures.setdefault(
            key,
            {"requests": 0, "input_tokens": 0, "cached_tokens": 0, "cache_write_tokens": 0,
             "prefix_breaks": 0},
        )  # fmt: skip
        counts["requests"] += 1
        counts["input_tokens"] += whole
        counts["cached_tokens"] += read
        counts["cache_write_tokens"] += written
        counts["prefix_breaks"] += broke
        for what, value in (("requests", 1), ("input_tokens", whole), ("cached_tokens", read)):
            counts[f"{purpose}_{what}"] = counts.get(f"{purpose}_{what}", 0) + value
        return CacheUse(
            total=whole, read=read, written=written, breakpoints=len(marks), broke=broke
        )


# -- answers --------------------------------------------------------------------------------


def _stop_reason(response: ModelResponse) -> str:
    reason = finish_reason(response)
    return {"tool_calls": "tool_use", "length": "max_tokens"}.get(reason, "end_turn")


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def _content(response: ModelResponse, serial: int) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for item in response.items:
        if isinstance(item, AssistantMessage):
            content.append({"type": "text", "text": item.text})
        else:
            content.append(
                {
                    "type": "tool_use",
                    "id": item.call_id,
                    "name": item.name,
                    "input": _input(item.arguments),
                }
            )
    return content


def _usage(response: ModelResponse, use: CacheUse | None) -> dict[str, Any]:
    u = response.usage
    prompt = u.input_tokens if u is not None else 0
    read = use.read if use is not None else 0
    written = use.written if use is not None else 0
    return {
        "input_tokens": max(0, prompt - read - written),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": u.output_tokens if u is not None else 0,
    }


def message_object(
    response: ModelResponse, *, model: str, serial: int, use: CacheUse | None
) -> dict[str, Any]:
    """A ``message`` body for ``response``, its usage split by what the cache did."""
    return {
        "id": answer_id("msg_", serial, model),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _content(response, serial),
        "stop_reason": _stop_reason(response),
        "stop_sequence": None,
        "usage": _usage(response, use),
    }


def message_events(
    response: ModelResponse, *, model: str, serial: int, use: CacheUse | None, cut: bool = False
) -> Iterator[dict[str, Any]]:
    """The stream events of ``response``, ``message_start`` to ``message_stop`` (``cut``:
    the stream ends before ``message_delta``, as a dropped connection leaves it)."""
    whole = message_object(response, model=model, serial=serial, use=use)
    usage = whole["usage"]
    start = {**whole, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield {"type": "message_start", "message": start}
    yield {"type": "ping"}
    for index, block in enumerate(whole["content"]):
        if block["type"] == "text":
            yield {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
            for at in range(0, len(block["text"]), PIECE_CHARS):
                piece = block["text"][at : at + PIECE_CHARS]
                yield {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                }
        else:
            head = {**block, "input": {}}
            yield {"type": "content_block_start", "index": index, "content_block": head}
            arguments = json.dumps(block["input"], separators=(",", ":"))
            for at in range(0, len(arguments), PIECE_CHARS):
                piece = arguments[at : at + PIECE_CHARS]
                yield {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                }
        yield {"type": "content_block_stop", "index": index}
    if cut:
        return
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    yield {"type": "message_stop"}
