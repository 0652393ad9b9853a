"""The model boundary: what a request and a response are, and the gateway Protocol.

The sampler streams (``stream``), the compactor asks once (``create``); both go through the same
gateway so a summary request is subject to the same auth, limits and error mapping as a round.
A gateway whose endpoint compacts history itself (OpenAI's ``/responses/compact``) also offers
``compact``: that is a Protocol of its own (``CompactingGateway``), so every gateway that
cannot (the scripted model, a test double) stays a ``ModelGateway`` without a stub that lies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from ._items import AssistantMessage, FunctionCall, Item
from ._records import Usage

__all__ = [
    "CompactingGateway", "ModelGateway", "ModelRequest", "ModelResponse", "ProviderCompaction",
    "ResponseDone", "StreamEvent", "TextDelta", "ToolSpec",
]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool as the model is told of it: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One model call. ``input`` is a projection of history, never history itself."""

    model: str
    input: tuple[Item, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: Literal["auto", "none"] = "auto"
    max_output_tokens: int | None = None
    purpose: Literal["round", "summary"] = "round"
    #: sent as ``prompt_cache_key`` so that requests of one session reach the same cache
    cache_key: str | None = None
    #: sent as ``parallel_tool_calls`` with the tools (None: not sent)
    parallel_tool_calls: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """What came back: text and tool calls in the order given, and usage if reported.

    ``finish_reason`` is why the model stopped, as the wire said it (``stop``, ``tool_calls``,
    ``length``; a Responses API response stopped by ``max_output_tokens`` says ``length``).
    """

    items: tuple[AssistantMessage | FunctionCall, ...]
    usage: Usage | None = None
    model: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    finish_reason: str | None = field(default=None, compare=False)

    @property
    def truncated(self) -> bool:
        """Whether the output limit cut the response off."""
        return self.finish_reason == "length"

    @property
    def text(self) -> str:
        """All assistant text of the response, joined."""
        return "".join(i.text for i in self.items if isinstance(i, AssistantMessage))

    @property
    def calls(self) -> tuple[FunctionCall, ...]:
        """The tool calls of the response."""
        return tuple(i for i in self.items if isinstance(i, FunctionCall))


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of assistant text, as it streams."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseDone:
    """The stream ended; the whole response."""

    response: ModelResponse


StreamEvent: TypeAlias = TextDelta | ResponseDone


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderCompaction:
    """What a provider-native compaction gave back: its compaction ``item`` exactly as the
    endpoint returned it (opaque: sent back verbatim, never read), a readable ``text`` that
    says what it stands for, and ``usage`` when reported."""

    item: dict[str, Any] = field(hash=False)
    text: str
    usage: Usage | None = None


@runtime_checkable
class ModelGateway(Protocol):
    """A model endpoint. Implementations raise only ``ModelError`` subclasses."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response: zero or more ``TextDelta``, then exactly one ``ResponseDone``."""
        ...

    async def create(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call (summaries use this)."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class CompactingGateway(Protocol):
    """A gateway whose endpoint compacts history itself (``compaction = "provider"``)."""

    async def compact(self, request: ModelRequest) -> ProviderCompaction:
        """Compact ``request.input`` (its model and items; tools and limits are not sent).

        Raises ``ModelError`` subclasses as ``create`` does; ``ModelResponseError`` when the
        answer carries no compaction item.
        """
        ...
