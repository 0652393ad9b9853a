"""Conversation items: what a model sees, one entry at a time.

Items are immutable values. The log stores them inside ``item`` records; history is a list of
``HistoryEntry`` (an item and the log ``seq`` it was written at), so that a compaction can name
exactly which entries it kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

__all__ = [
    "AssistantMessage", "CompactionSummary", "FunctionCall", "FunctionCallOutput", "HistoryEntry",
    "Item", "ItemType", "SystemMessage", "UserMessage", "item_from_dict", "item_to_dict",
]  # fmt: skip

ItemType: TypeAlias = Literal[
    "system", "user", "assistant", "function_call", "function_call_output", "compaction_summary"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemMessage:
    """Instructions for the model; the leading one survives every compaction."""

    type: ClassVar[Literal["system"]] = "system"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage:
    """The user's own words; never rewritten by compaction, only kept or dropped whole."""

    type: ClassVar[Literal["user"]] = "user"
    text: str
    pinned: bool = False
    #: the sender's id for this message (a uuid), when it came through an inbox: a worker
    #: never runs a message whose id is already in the log
    message_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage:
    """Text the model produced."""

    type: ClassVar[Literal["assistant"]] = "assistant"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionCall:
    """A tool call the model asked for; ``arguments`` is the JSON text exactly as sent."""

    type: ClassVar[Literal["function_call"]] = "function_call"
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionCallOutput:
    """The output of one tool call, matched to it by ``call_id``."""

    type: ClassVar[Literal["function_call_output"]] = "function_call_output"
    call_id: str
    output: str
    is_error: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionSummary:
    """A model-written (or mechanical) summary that stands for absorbed history.

    A provider-native compaction (``compaction = "provider"``) also carries ``provider``: the
    compaction item exactly as the endpoint returned it. Its content is opaque (encrypted):
    only the Responses wire sends it, verbatim; ``text`` stays a readable line for people,
    logs and any other wire.
    """

    type: ClassVar[Literal["compaction_summary"]] = "compaction_summary"
    text: str
    provider: dict[str, Any] | None = field(default=None, hash=False)


Item: TypeAlias = (
    SystemMessage
    | UserMessage
    | AssistantMessage
    | FunctionCall
    | FunctionCallOutput
    | CompactionSummary
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryEntry:
    """One history item and the log seq that holds it (a summary's seq is its compaction's)."""

    seq: int
    item: Item


def item_to_dict(item: Item) -> dict[str, Any]:
    """Encode an item as a plain JSON-ready dict with a ``type`` key."""
    match item:
        case CompactionSummary(text=text, provider=provider):
            summary: dict[str, Any] = {"type": item.type, "text": text}
            if provider is not None:
                summary["provider"] = provider
            return summary
        case SystemMessage(text=text) | AssistantMessage(text=text):
            return {"type": item.type, "text": text}
        case UserMessage(text=text, pinned=pinned, message_id=message_id):
            out: dict[str, Any] = {"type": "user", "text": text}
            if pinned:
                out["pinned"] = True
            if message_id is not None:
                out["message_id"] = message_id
            return out
        case FunctionCall(call_id=call_id, name=name, arguments=arguments):
            return {
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
            }
        case FunctionCallOutput(call_id=call_id, output=output, is_error=is_error):
            out = {"type": "function_call_output", "call_id": call_id, "output": output}
            if is_error:
                out["is_error"] = True
            return out
    raise TypeError(f"not an item: {item!r}")  # pragma: no cover - exhaustive above


def item_from_dict(data: dict[str, Any]) -> Item:
    """Decode an item; raises ``ValueError`` naming the bad type or the missing key."""
    kind = data.get("type")
    try:
        match kind:
            case "system":
                return SystemMessage(text=str(data["text"]))
            case "user":
                message_id = data.get("message_id")
                return UserMessage(
                    text=str(data["text"]),
                    pinned=bool(data.get("pinned", False)),
                    message_id=None if message_id is None else str(message_id),
                )
            case "assistant":
                return AssistantMessage(text=str(data["text"]))
            case "function_call":
                return FunctionCall(
                    call_id=str(data["call_id"]),
                    name=str(data["name"]),
                    arguments=str(data["arguments"]),
                )
            case "function_call_output":
                return FunctionCallOutput(
                    call_id=str(data["call_id"]),
                    output=str(data["output"]),
                    is_error=bool(data.get("is_error", False)),
                )
            case "compaction_summary":
                provider = data.get("provider")
                if provider is not None and not isinstance(provider, dict):
                    raise ValueError(f"a summary's provider item must be an object: {provider!r}")
                return CompactionSummary(text=str(data["text"]), provider=provider)
    except KeyError as exc:
        raise ValueError(f"item of type {kind!r} lacks key {exc.args[0]!r}") from exc
    raise ValueError(f"unknown item type {kind!r}")
