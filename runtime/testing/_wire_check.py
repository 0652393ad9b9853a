"""Checks over recorded wire requests, as an independent server would make them."""

from __future__ import annotations

from typing import Any

__all__ = ["call_ids", "orphan_calls", "orphan_outputs"]


def _chat_pairs(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    calls: list[str] = []
    outputs: list[str] = []
    for message in body.get("messages", []):
        for call in message.get("tool_calls") or []:
            calls.append(str(call.get("id")))
        if message.get("role") == "tool":
            outputs.append(str(message.get("tool_call_id")))
        content = message.get("content")
        for block in content if isinstance(content, list) else ():  # Anthropic's blocks
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                calls.append(str(block.get("id")))
            elif block.get("type") == "tool_result":
                outputs.append(str(block.get("tool_use_id")))
    return calls, outputs


def _responses_pairs(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    entries = body.get("input", [])
    entries = entries if isinstance(entries, list) else []
    calls = [str(e.get("call_id")) for e in entries if e.get("type") == "function_call"]
    outputs = [str(e.get("call_id")) for e in entries if e.get("type") == "function_call_output"]
    return calls, outputs


def _pairs(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    return _chat_pairs(body) if "messages" in body else _responses_pairs(body)


def orphan_calls(body: dict[str, Any]) -> list[str]:
    """Ids of tool calls in a Chat Completions or Responses request body that have no output
    in the same request (an orphan a provider would reject), in order."""
    calls, outputs = _pairs(body)
    answered = set(outputs)
    return [call_id for call_id in calls if call_id not in answered]


def orphan_outputs(body: dict[str, Any]) -> list[str]:
    """Ids of tool outputs in a Chat Completions or Responses request body whose call is not
    in the same request (an output without its call, which a provider rejects too), in order."""
    calls, outputs = _pairs(body)
    made = set(calls)
    return [call_id for call_id in outputs if call_id not in made]


def call_ids(body: dict[str, Any]) -> set[str]:
    """Ids of every tool call a request body carries."""
    return set(_pairs(body)[0])
