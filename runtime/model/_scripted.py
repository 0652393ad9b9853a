"""``ScriptedModel``: an offline, deterministic ``ModelGateway``, the embedded default model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace

import anyio
from stowage.core import (
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ResponseDone,
    StreamEvent,
    TextDelta,
)
from stowage.policy import PrefixCache

from ._brain import ScriptedBrain

__all__ = ["Brain", "ScriptedModel"]

Brain = Callable[[ModelRequest], ModelResponse]

_CHUNK_CHARS = 16


class ScriptedModel:
    """A ``ModelGateway`` answering from a brain, without network; ``requests`` keeps each call."""

    def __init__(
        self,
        *,
        tool_rounds: int = 2,
        answer_chars: int = 0,
        latency: float = 0.0,
        report_usage: bool = True,
        brain: Brain | None = None,
        keep_requests: bool = True,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        """``keep_requests=False`` keeps no request in ``requests`` (long runs, memory
        measurements); ``prefix_cache`` simulates a provider's prompt cache in the usage it
        reports (``cached_tokens``), as the fake server does."""
        self.brain: Brain = brain or ScriptedBrain(
            tool_rounds=tool_rounds, answer_chars=answer_chars, report_usage=report_usage
        )
        self.latency = latency
        self.requests: list[ModelRequest] = []
        self.keep_requests = keep_requests
        self.prefix_cache = prefix_cache

    @classmethod
    def from_responses(cls, responses: Sequence[ModelResponse | Exception]) -> ScriptedModel:
        """A model that plays ``responses`` in order, raising those that are exceptions.

        A call after the last one raises ``ModelResponseError``.
        """
        script: Iterator[ModelResponse | Exception] = iter(list(responses))

        def play(request: ModelRequest) -> ModelResponse:
            step = next(script, None)
            if step is None:
                raise ModelResponseError("scripted responses exhausted")
            if isinstance(step, Exception):
                raise step
            return step

        return cls(brain=play)

    async def create(self, request: ModelRequest) -> ModelResponse:
        """The brain's response. Raises whatever the brain raises (``ModelError`` by contract)."""
        if self.keep_requests:
            self.requests.append(request)
        if self.latency > 0:
            await anyio.sleep(self.latency)
        response = self.brain(request)
        if self.prefix_cache is not None and response.usage is not None:
            hit = self.prefix_cache.serve(
                request, cache_key=request.cache_key, input_tokens=response.usage.input_tokens
            )
            response = replace(
                response, usage=replace(response.usage, cached_tokens=hit.cached_tokens)
            )
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The brain's text in chunks of 16 characters, then one ``ResponseDone``.

        Raises what ``create`` raises, before any event.
        """
        response = await self.create(request)
        text = response.text
        for start in range(0, len(text), _CHUNK_CHARS):
            yield TextDelta(text=text[start : start + _CHUNK_CHARS])
        yield ResponseDone(response=response)

    async def aclose(self) -> None:
        """Nothing to release."""
