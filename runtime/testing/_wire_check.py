"""Checks over recorded wire requests, as an independent server would make them."""

from __future__ import annotations

from typing import Any

__all__ = ["call_ids", "orphan_calls"]


def _chat_pairs(body: dict[str, Any]) -> tuple[list[str], set[str]]:
    calls: list[str] = []
    outputs: set[str] = set()
    for message in body.get("messages", []):
        for call in message.get("tool_calls") or []:
            calls.append(str(call.get("id")))
        if message.get("role") == "tool":
            outputs.add(str(message.get("tool_call_id")))
    return calls, outputs


def _responses_pairs(body: dict[str, Any]) -> tuple[list[str], set[str]]:
    calls: list[str] = []
    outputs: set[str] = set()
    entries = body.get("input", [])
    for entry in entries if isinstance(entries, list) else []:
        if entry.get("type") == "function_call":
            calls.append(str(entry.get("call_id")))
        elif entry.get("type") == "function_call_output":
            outputs.add(str(entry.get("call_id")))
    return calls, outputs


def _pairs(body: dict[str, Any]) -> tuple[list[str], set[str]]:
    return _chat_pairs(body) if "messages" in body else _responses_pairs(body)


def orphan_calls(body: dict[str, Any]) -> list[str]:
    """Ids of tool calls in a Chat Completions or Responses request body that have no output
    in the same request (an orphan a provider would reject), in order."""
    calls, outputs = _pairs(body)
    return [call_id for call_id in calls if call_id not in outputs]


def call_ids(body: dict[str, Any]) -> set[str]:
    """Ids of every tool call a request body carries."""
    return set(_pairs(body)[0])
