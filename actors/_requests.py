"""The sampler's model calls: build a round's request, send it, get one whole response back.

A request is the projection of the session's history as the journal holds it at the moment
of sending. While a round waits for its model-call place a plan may land; it is applied first
and the request built again (only the input changes), so the request sent is never staler
than the history. A request the provider refused as too long is handed to the gate (the
compaction machine decides how far to go, or stops the turn) and sent again from what is
left; nothing of the round is written until a whole response is back.

Each request sent that fails is announced as ``AttemptAbandoned`` (with the text it had
streamed, and what follows), before the wait of a retry or the compaction of a refusal: a
reader that showed the streamed deltas knows they are not the round's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import anyio
import structlog
from stowage.core import (
    AssistantDelta,
    AttemptAbandoned,
    ContextLengthExceeded,
    IncompleteResponse,
    Item,
    LineCache,
    ModelAuthError,
    ModelConnectionError,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ModelRetrying,
    RateLimitError,
    RequestManifest,
    ResponseDone,
    ResponseTooLarge,
    RoundStarted,
    StubCache,
    TextDelta,
    ToolSpec,
    build_projection,
    request_manifest,
)
from stowage.policy import cache_key_for, capabilities_for

from ._context import SessionContext
from ._gate import Gate
from ._interrupt import TurnInterrupt
from ._journal import Journal, SessionPart
from ._responses import answer_too_large
from ._retry import call_with_retries

__all__ = ["Requester", "TurnInterrupted", "abandon_reason"]

#: the ratio of the round's announced estimate (``estimate_tokens``' default)
_ESTIMATE_CHARS_PER_TOKEN = 4.0


class TurnInterrupted(Exception):
    """The turn's interrupt stopped the model stream (nothing of the round is written)."""


@dataclass(eq=False)
class _Attempts:
    """The requests sent for one round: how many so far, and the text the newest streamed."""

    sent: int = 0
    streamed_chars: int = 0

    def start(self) -> None:
        self.sent += 1
        self.streamed_chars = 0


#: the words ``AttemptAbandoned.reason`` has for a failure, the first class that matches
_REASONS: tuple[tuple[type[ModelError], str], ...] = (
    (ResponseTooLarge, "answer past max_answer_chars"),
    (IncompleteResponse, "stream cut"),
    (RateLimitError, "rate limited"),
    (ContextLengthExceeded, "refused as too long"),
    (ModelConnectionError, "connection failed or server error"),
    (ModelAuthError, "refused the key"),
    (ModelResponseError, "unusable response"),
)


def abandon_reason(error: ModelError) -> str:
    """``error`` in the few words an abandoned attempt is announced with. Raises nothing."""
    return next((words for kind, words in _REASONS if isinstance(error, kind)), "model error")


class Requester(SessionPart):
    """One session's round requests."""

    __slots__ = (
        "_attempts",
        "_cache_key",
        "_lines",
        "_parallel",
        "_sending",
        "_specs",
        "_stubs",
        "gate",
    )

    def __init__(
        self,
        ctx: SessionContext,
        journal: Journal,
        gate: Gate,
        log: structlog.typing.FilteringBoundLogger,
    ) -> None:
        super().__init__(ctx, journal, log)
        self.gate = gate
        #: the ``prompt_cache_key`` the session's round requests carry
        self._cache_key = cache_key_for(ctx.settings, ctx.session_id)
        #: what the model can take shapes every request (parallel calls or one a round)
        self._parallel = capabilities_for(ctx.settings).parallel_tool_calls
        # the round's request as it is sent (rebuilt if a plan lands while it waits)
        self._sending: ModelRequest | None = None
        # the requests sent for the round, for what ``AttemptAbandoned`` says of each
        self._attempts = _Attempts()
        # the serialized items of the last request, for the next one's manifest
        self._lines = LineCache()
        self._specs: tuple[ToolSpec, ...] = ()
        # the stub items of the last projection: the same objects while the outputs are
        self._stubs: StubCache = {}

    def park(self) -> None:
        """Let go of the last request's lines (a copy of the history's text)."""
        self._lines.forget()

    def projection(self, protected: str | None = None) -> tuple[Item, ...]:
        state = self.journal.state
        if protected is None:
            protected = self.journal.protected_text()
        return build_projection(
            state.history, stubbed=state.stubbed, protected_text=protected, stubs=self._stubs
        )

    def input_chars(self) -> int:
        """Characters of the projection of the history as it stands."""
        protected = self.journal.protected_text()
        return self.journal.state.projected_chars + (len(protected) if protected else 0)

    def build(self, round_: int) -> ModelRequest:
        """The round's request from the history as it stands, announced as ``RoundStarted``."""
        settings = self.ctx.settings
        protected = self.journal.protected_text()
        projection = self.projection(protected)
        chars = self.input_chars()
        self.ctx.publish(
            RoundStarted(
                session_id=self.ctx.session_id,
                round=round_,
                items=len(projection),
                tokens=math.ceil(chars / _ESTIMATE_CHARS_PER_TOKEN),
                estimated=True,
            )
        )
        specs = self.ctx.tools.specs()
        if specs != self._specs:
            self._specs = specs
        return ModelRequest(
            model=settings.model,
            input=projection,
            # the same tuple while the tools are the same: what is computed from it (its
            # characters, its manifest lines) is computed once per session, not per request
            tools=self._specs,
            # the reserve the accounting keeps for output is exactly what is asked for
            max_output_tokens=self.journal.accounting.output_reserve,
            cache_key=self._cache_key,
            parallel_tool_calls=self._parallel,
        )

    async def send(
        self, request: ModelRequest, round_: int, interrupt: TurnInterrupt | None
    ) -> tuple[ModelRequest, ModelResponse, RequestManifest]:
        """The response to ``request``, the request as sent and its manifest."""
        self._attempts = _Attempts()
        try:
            while True:
                try:
                    sent, response = await self._sample_unless_interrupted(
                        request, round_, interrupt
                    )
                    break
                except ContextLengthExceeded as exc:
                    self._abandoned(round_, exc, then="compact")
                    # a refusal is the machine's event like any other: it brings the request
                    # under what the provider takes, or stops the turn (its strikes bound this)
                    await self.gate.refused(exc, self._sending or request)
                    await self.gate.before_request()
                    request = replace(request, input=self.projection())
        finally:
            self._sending = None  # nothing of a round outlives it
        return sent, response, self._manifest(sent)

    def _manifest(self, sent: ModelRequest) -> RequestManifest:
        """What ``sent`` was built from."""
        history = self.journal.state.history
        # the projection adds one item to history, the protected state, when there is one
        return request_manifest(
            sent, history, has_protected=len(sent.input) > len(history), lines=self._lines
        )

    async def _sample_unless_interrupted(
        self, request: ModelRequest, round_: int, interrupt: TurnInterrupt | None
    ) -> tuple[ModelRequest, ModelResponse]:
        if interrupt is None:
            return await self._sample(request, round_)
        sampled: tuple[ModelRequest, ModelResponse] | None = None
        with interrupt.guard():
            sampled = await self._sample(request, round_)
        if sampled is None:
            raise TurnInterrupted
        return sampled

    async def _sample(
        self, request: ModelRequest, round_: int
    ) -> tuple[ModelRequest, ModelResponse]:
        """The response to ``request``, and the request as sent."""
        self._sending = request
        settings = self.ctx.settings

        async def attempt() -> ModelResponse:
            request = self._sending
            assert request is not None
            self._attempts.start()
            if not settings.stream:
                return self._whole(await self.ctx.gateway.create(request))
            done: ModelResponse | None = None
            async for event in self.ctx.gateway.stream(request):
                if isinstance(event, TextDelta):
                    self._attempts.streamed_chars += len(event.text)
                    self.ctx.publish(
                        AssistantDelta(
                            session_id=self.ctx.session_id, round=round_, text=event.text
                        )
                    )
                elif isinstance(event, ResponseDone):
                    done = event.response
            if done is None:
                raise IncompleteResponse("the model stream ended without a final response")
            return self._whole(done)

        async def limited() -> ModelResponse:
            limiter = self.ctx.model_limiter
            if limiter is None:
                return await attempt()
            waited = await limiter.acquire("round")
            try:
                if waited:
                    await self._apply_plan_while_placed()
                return await attempt()
            finally:
                limiter.release()

        def waiting(attempt: int, delay: float, rate_limited: bool, error: ModelError) -> None:
            self._abandoned(round_, error, then="retry")
            self.ctx.publish(
                ModelRetrying(
                    session_id=self.ctx.session_id,
                    purpose="round",
                    attempt=attempt,
                    delay=delay,
                    rate_limited=rate_limited,
                    error=type(error).__name__,
                )
            )

        try:
            response = await call_with_retries(
                limited,
                attempts=settings.max_retries + 1,
                log=self._log,
                what="model_call",
                max_wait=settings.max_retry_wait,
                on_wait=waiting,
            )
        except ModelError as exc:
            if not isinstance(exc, ContextLengthExceeded):  # ``send`` says what follows it
                self._abandoned(round_, exc, then="none")
            raise
        sent = self._sending
        assert sent is not None
        return sent, response

    def _abandoned(self, round_: int, error: ModelError, *, then: str) -> None:
        """Announce that the round's newest request failed with ``error``."""
        self.ctx.publish(
            AttemptAbandoned(
                session_id=self.ctx.session_id,
                round=round_,
                attempt=self._attempts.sent,
                error=type(error).__name__,
                reason=abandon_reason(error),
                streamed_chars=self._attempts.streamed_chars,
                next=then,
            )
        )

    async def _apply_plan_while_placed(self) -> None:
        """Apply a plan that came back while the round waited for its place, and build the
        request again from what it left (only the input changes). Shielded: its writes are
        not abandoned halfway by an interrupt."""
        request = self._sending
        assert request is not None
        last_seq = self.journal.state.last_seq
        with anyio.CancelScope(shield=True):
            await self.gate.apply_ready()
        if self.journal.state.last_seq != last_seq:
            self._sending = replace(request, input=self.projection())

    def _whole(self, response: ModelResponse) -> ModelResponse:
        """``response``, unless its answer is larger than ``max_answer_chars``."""
        too_large = answer_too_large(response, self.ctx.settings.max_answer_chars)
        if too_large is not None:
            raise ResponseTooLarge(too_large)
        return response
