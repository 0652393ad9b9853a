"""Spans from the runtime's events: one trace per turn, a span per round, model call, tool call and
compaction, built by an event subscriber, so no actor knows about tracing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from stowage.core import (
    Event,
    HistoryCompacted,
    Microcompacted,
    RoundCommitted,
    RoundStarted,
    SessionFailedEvent,
    SessionLeaseLostEvent,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)

__all__ = ["TraceSubscriber"]

_SCOPE = "stowage"


def _now() -> int:
    return time.time_ns()


@dataclass(eq=False)
class _SessionSpans:
    turn: Span | None = None
    turns: int = 0
    round: Span | None = None
    model_start: int | None = None
    model_end: int | None = None
    tools: dict[str, Span] = field(default_factory=dict)
    #: when the round's last tool call ended: its committed batch is written from there on
    tools_done: int | None = None


@dataclass(eq=False)
class TraceSubscriber:
    """An event subscriber (``runtime.subscribe(TraceSubscriber(model=...))``) that turns a
    session's events into OpenTelemetry spans through ``tracer`` (the global tracer provider's
    by default: with no SDK configured, spans cost nothing and go nowhere).

    Spans: ``turn`` (the root of one trace), ``round N`` under it, ``chat MODEL`` (the model
    call, GenAI conventions) and ``execute_tool NAME`` under the round, ``compaction`` and
    ``microcompaction`` under the turn, ``store.append`` (the round's committed batch, from
    its last tool's end until it is durable) under the round.
    ``include_text`` adds the final answer to the turn span (off by default).
    """

    model: str = ""
    tracer: Tracer | None = None
    include_text: bool = False
    provider: str = "openai"
    _sessions: dict[str, _SessionSpans] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tracer is None:
            self.tracer = trace.get_tracer(_SCOPE)

    def __call__(self, event: Event) -> None:
        session = self._sessions.setdefault(event.session_id, _SessionSpans())
        match event:
            case RoundStarted():
                self._round_started(event, session)
            case ToolStarted():
                self._model_done(session)
                self._tool_started(event, session)
            case ToolFinished():
                span = session.tools.pop(event.call_id, None)
                if span is not None:
                    span.set_attribute("stowage.tool.output_chars", event.output_chars)
                    if event.is_error:
                        span.set_status(Status(StatusCode.ERROR, "the tool returned an error"))
                    session.tools_done = _now()
                    span.end(session.tools_done)
            case RoundCommitted():
                self._round_committed(event, session)
            case TurnFinished():
                self._turn_finished(event, session)
            case HistoryCompacted():
                self._compaction(event, session)
            case Microcompacted():
                self._microcompaction(event, session)
            case SessionFailedEvent() | SessionLeaseLostEvent():
                self._fail(event.error, session)
                self._sessions.pop(event.session_id, None)
            case _:
                pass

    # -- spans -------------------------------------------------------------------------------

    def _tracer(self) -> Tracer:
        assert self.tracer is not None
        return self.tracer

    def _turn(self, session_id: str, session: _SessionSpans, start: int) -> Span:
        if session.turn is None:
            session.turns += 1
            session.turn = self._tracer().start_span(
                "turn",
                context=trace.set_span_in_context(trace.INVALID_SPAN),
                kind=SpanKind.INTERNAL,
                start_time=start,
                attributes={"stowage.session_id": session_id},
            )
        return session.turn

    def _round_started(self, event: RoundStarted, session: _SessionSpans) -> None:
        now = _now()
        turn = self._turn(event.session_id, session, now)
        if session.round is not None:  # a round that never committed (a retried request)
            session.round.end(now)
        attributes: dict[str, Any] = {
            "stowage.session_id": event.session_id,
            "stowage.round": event.round,
            "stowage.items": event.items,
            "stowage.tokens_estimated": event.estimated,
        }
        if event.tokens is not None:
            attributes["stowage.tokens"] = event.tokens
        session.round = self._tracer().start_span(
            f"round {event.round}",
            context=trace.set_span_in_context(turn),
            start_time=now,
            attributes=attributes,
        )
        session.model_start, session.model_end, session.tools_done = now, None, None

    def _model_done(self, session: _SessionSpans) -> None:
        if session.model_start is not None and session.model_end is None:
            session.model_end = _now()

    def _tool_started(self, event: ToolStarted, session: _SessionSpans) -> None:
        parent = session.round
        context = trace.set_span_in_context(parent) if parent is not None else None
        session.tools[event.call_id] = self._tracer().start_span(
            f"execute_tool {event.name}",
            context=context,
            start_time=_now(),
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": event.name,
                "gen_ai.tool.call.id": event.call_id,
                "stowage.round": event.round,
            },
        )

    def _round_committed(self, event: RoundCommitted, session: _SessionSpans) -> None:
        now = _now()
        self._model_done(session)
        round_span = session.round
        context = trace.set_span_in_context(round_span) if round_span is not None else None
        if session.model_start is not None:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": self.model,
                "gen_ai.system": self.provider,
                "stowage.round": event.round,
            }
            usage = event.usage
            if usage is not None:
                attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
                attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
                if usage.cached_tokens > 0:  # 0: the endpoint did not say
                    attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
                if usage.cache_write_tokens > 0:  # Anthropic's cache writes
                    attributes["gen_ai.usage.cache_creation.input_tokens"] = (
                        usage.cache_write_tokens
                    )
            if event.truncated:
                attributes["gen_ai.response.finish_reasons"] = ("length",)
            span = self._tracer().start_span(
                f"chat {self.model}".strip(),
                context=context,
                kind=SpanKind.CLIENT,
                start_time=session.model_start,
                attributes=attributes,
            )
            span.end(session.model_end or now)
        # the round's committed batch (outputs + round_committed): sent when the last tool
        # ended (or the answer arrived), published as RoundCommitted once durable
        append_start = session.tools_done or session.model_end or now
        self._tracer().start_span(
            "store.append",
            context=context,
            start_time=min(append_start, now),
            attributes={"stowage.round": event.round, "stowage.calls": event.calls},
        ).end(now)
        if round_span is not None:
            round_span.set_attribute("stowage.calls", event.calls)
            round_span.end(now)
        session.round = None
        session.model_start = session.model_end = session.tools_done = None

    def _turn_finished(self, event: TurnFinished, session: _SessionSpans) -> None:
        turn = session.turn
        if turn is None:
            return
        turn.set_attribute("stowage.turn", event.turn)
        if self.include_text:
            turn.set_attribute("stowage.answer", event.text)
        turn.end(_now())
        session.turn = None

    def _compaction_parent(self, session_id: str, session: _SessionSpans) -> Any:
        turn = session.turn
        return trace.set_span_in_context(turn if turn is not None else trace.INVALID_SPAN)

    def _compaction(self, event: HistoryCompacted, session: _SessionSpans) -> None:
        now = _now()
        attributes: dict[str, Any] = {
            "stowage.compaction.kind": event.kind,
            "stowage.compaction.reason": event.reason,
            "stowage.compaction.removed": event.removed,
            "stowage.compaction.retained": event.retained,
            "stowage.compaction.estimated": event.estimated,
            "stowage.round": event.round,
        }
        if self.include_text:
            attributes["stowage.compaction.summary"] = event.summary
        self._compaction_span("compaction", event, session, attributes, now)

    def _microcompaction(self, event: Microcompacted, session: _SessionSpans) -> None:
        now = _now()
        attributes: dict[str, Any] = {
            "stowage.compaction.kind": "micro",
            "stowage.compaction.reason": event.reason,
            "stowage.compaction.stubbed": event.stubbed,
            "stowage.compaction.estimated": event.estimated,
        }
        self._compaction_span("microcompaction", event, session, attributes, now)

    def _compaction_span(
        self,
        name: str,
        event: HistoryCompacted | Microcompacted,
        session: _SessionSpans,
        attributes: dict[str, Any],
        now: int,
    ) -> None:
        """A span of no duration under the turn, with the token figures the event has."""
        if event.tokens_before is not None:
            attributes["stowage.compaction.tokens_before"] = event.tokens_before
        if event.tokens_after is not None:
            attributes["stowage.compaction.tokens_after"] = event.tokens_after
        self._tracer().start_span(
            name,
            context=self._compaction_parent(event.session_id, session),
            start_time=now,
            attributes=attributes,
        ).end(now)

    def _fail(self, error: str, session: _SessionSpans) -> None:
        now = _now()
        for span in (*session.tools.values(), session.round, session.turn):
            if span is not None:
                span.set_status(Status(StatusCode.ERROR, error))
                span.end(now)
