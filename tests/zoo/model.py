"""The zoo's gateway: one ``ModelGateway`` that plays any member and enforces a real window.

The size of a request is counted as the characters of every input item (text, output, call
name and arguments) plus the JSON of the tool schemas, at 4 characters a token
(``scripted_usage``'s rule); a request above ``window - max_output_tokens`` is refused with
``ContextLengthExceeded`` and counted. Every request is recorded (``ZooRequest``) for the
invariant checks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from stowage.core import (
    AssistantMessage,
    ContextLengthExceeded,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    TextDelta,
    Usage,
)
from stowage.model import is_summary_request, scripted_usage
from stowage.policy import PrefixCache

from .members import (
    UsageMode,
    ZooBehaviour,
    member_answer,
    member_summary,
    request_tokens,
    zoo_behaviour,
)

__all__ = ["ZooModel", "ZooRequest", "zoo_member"]

_CHUNK_CHARS = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class ZooRequest:
    """One request a zoo member received: what the checks need, and the request itself."""

    index: int
    purpose: str
    tokens: int
    limit: int
    refused: bool
    call_ids: tuple[str, ...]
    output_ids: tuple[str, ...]
    request: ModelRequest


class ZooModel:
    """A ``ModelGateway`` playing zoo members; ``requests`` keeps every request received.

    ``behaviour`` is the member it plays; ``assign`` gives the requests of one prompt-cache
    key (one session) another, so one gateway can host a mixed zoo. Both may change between
    turns.
    """

    def __init__(
        self,
        behaviour: ZooBehaviour | None = None,
        *,
        seed: int = 0,
        window: int = 6000,
        max_output_tokens: int = 500,
        keep_requests: bool = True,
    ) -> None:
        self.behaviour = behaviour or ZooBehaviour()
        self.seed = seed
        self.window = window
        self.max_output_tokens = max_output_tokens
        self.keep_requests = keep_requests
        self.requests: list[ZooRequest] = []
        self.count = 0
        self.refused = 0
        self.input_tokens = 0
        self.cached_tokens = 0
        self._cache = PrefixCache()
        self._assigned: dict[str, ZooBehaviour] = {}
        self._by_key: dict[str | None, list[ZooRequest]] = {}

    def assign(self, cache_key: str | None, behaviour: ZooBehaviour) -> None:
        """Play ``behaviour`` for the requests carrying ``cache_key``."""
        if cache_key is None:
            self.behaviour = behaviour
        else:
            self._assigned[cache_key] = behaviour

    def behaviour_for(self, cache_key: str | None) -> ZooBehaviour:
        """The member played for requests carrying ``cache_key``."""
        return self._assigned.get(cache_key or "", self.behaviour)

    def requests_for(self, cache_key: str | None) -> list[ZooRequest]:
        """The recorded requests that carried ``cache_key``, in order."""
        return self._by_key.get(cache_key, [])

    @property
    def limit(self) -> int:
        """The most tokens a request may carry: the window less the output reserve."""
        return self.window - self.max_output_tokens

    async def create(self, request: ModelRequest) -> ModelResponse:
        """The member's answer to ``request``. Raises ``ContextLengthExceeded`` when the
        request is above ``limit`` (stating its tokens and the limit)."""
        tokens = request_tokens(request)
        behaviour = self.behaviour_for(request.cache_key)
        refused = tokens > self.limit
        index = self._record(request, tokens, refused)
        if refused:
            self.refused += 1
            raise ContextLengthExceeded(
                f"This model's maximum context length is {self.window} tokens; the request "
                f"carries {tokens} input tokens, above the {self.limit} left after "
                f"{self.max_output_tokens} reserved for output",
                tokens=tokens,
                limit=self.limit,
            )
        if is_summary_request(request):
            if behaviour.summary_delay > 0:
                await anyio.sleep(behaviour.summary_delay)  # simulated latency of a summary
            items: tuple[AssistantMessage | FunctionCall, ...] = (
                AssistantMessage(text=member_summary(request)),
            )
        else:
            if behaviour.round_delay > 0:
                await anyio.sleep(behaviour.round_delay)  # simulated latency of a round
            items = member_answer(request, behaviour, seed=self.seed, serial=index)
        return ModelResponse(
            items=items,
            usage=self._usage(request, tokens, items, behaviour.usage),
            model=behaviour.name,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The answer's text in chunks, then one ``ResponseDone``; raises as ``create``."""
        response = await self.create(request)
        text = response.text
        for start in range(0, len(text), _CHUNK_CHARS):
            yield TextDelta(text=text[start : start + _CHUNK_CHARS])
        yield ResponseDone(response=response)

    async def aclose(self) -> None:
        """Nothing to release."""

    def _record(self, request: ModelRequest, tokens: int, refused: bool) -> int:
        """Count (and keep) ``request``; returns its index among every request received."""
        index = self.count
        self.count += 1
        if not self.keep_requests:
            return index
        seen = ZooRequest(
            index=index,
            purpose="summary" if is_summary_request(request) else "round",
            tokens=tokens,
            limit=self.limit,
            refused=refused,
            call_ids=tuple(i.call_id for i in request.input if isinstance(i, FunctionCall)),
            output_ids=tuple(i.call_id for i in request.input if isinstance(i, FunctionCallOutput)),
            request=request,
        )
        self.requests.append(seen)
        self._by_key.setdefault(request.cache_key, []).append(seen)
        return index

    def _usage(
        self,
        request: ModelRequest,
        tokens: int,
        items: tuple[AssistantMessage | FunctionCall, ...],
        mode: UsageMode,
    ) -> Usage | None:
        output = scripted_usage(request, items).output_tokens
        hit = self._cache.serve(request, input_tokens=tokens)
        self.input_tokens += tokens
        self.cached_tokens += hit.cached_tokens
        match mode:
            case "none":
                return None
            case "zero":
                return Usage(input_tokens=0, output_tokens=0, total_tokens=0)
            case "half":
                reported = tokens // 2
            case "double":
                reported = tokens * 2
            case _:
                reported = tokens
        cached = min(hit.cached_tokens, reported)
        return Usage(
            input_tokens=reported,
            output_tokens=output,
            total_tokens=reported + output,
            cached_tokens=cached,
        )


def zoo_member(
    name: str,
    *,
    seed: int = 0,
    window: int = 6000,
    max_output_tokens: int = 500,
    keep_requests: bool = True,
) -> ZooModel:
    """A gateway playing the zoo member called ``name`` (see ``zoo_behaviour``) on a window of
    ``window`` tokens. Raises ``ValueError`` for an unknown name."""
    return ZooModel(
        zoo_behaviour(name),
        seed=seed,
        window=window,
        max_output_tokens=max_output_tokens,
        keep_requests=keep_requests,
    )
