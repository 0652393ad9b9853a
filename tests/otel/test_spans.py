"""OpenTelemetry spans of a real offline session (the scripted model, a JSONL store), read back
through the SDK's in-memory exporter."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from stowage.core import RoundCommitted, RoundStarted, Settings, TurnFinished, Usage
from stowage.facade import Runtime
from stowage.otel import TraceSubscriber
from stowage.storage import JsonlStore

pytestmark = pytest.mark.timeout(120)

WORKSPACE = Path(__file__).resolve().parents[2] / "runtime" / "cli"
PROMPTS = [f"Survey step {n}: list the files and read one SECRET-{n}" for n in range(6)]


async def _run(subscriber: TraceSubscriber, store: Path, turns: int = 6) -> list[str]:
    settings = Settings(context_window=6000, workspace=WORKSPACE, store=store)
    answers = []
    with anyio.fail_after(100):
        async with Runtime(settings, store=JsonlStore(store)) as rt:
            rt.subscribe(subscriber)
            session = await rt.create(system="You explore a code base.")
            for prompt in PROMPTS[:turns]:
                answers.append((await session.send(prompt)).text)
    return answers


def _spans(include_text: bool = False) -> tuple[TraceSubscriber, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return (
        TraceSubscriber(
            model="scripted", tracer=provider.get_tracer("test"), include_text=include_text
        ),
        exporter,
    )


def _by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def test_each_turn_is_one_trace_with_rounds_model_calls_tools_and_appends(
    tmp_path: Path,
) -> None:
    subscriber, exporter = _spans()
    await _run(subscriber, tmp_path / "store")
    spans = exporter.get_finished_spans()
    turns = _by_name(spans, "turn")
    assert len(turns) == len(PROMPTS)
    assert all(t.parent is None for t in turns)
    assert len({t.context.trace_id for t in turns}) == len(turns)
    by_id = {s.context.span_id: s for s in spans}
    per_trace: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        per_trace[span.context.trace_id].append(span)
    rounds = _by_name(spans, "round ")
    assert rounds
    for round_span in rounds:
        parent = by_id[round_span.parent.span_id]  # type: ignore[union-attr]
        assert parent.name == "turn"
        assert round_span.start_time >= parent.start_time and round_span.end_time <= parent.end_time  # type: ignore[operator]
    chats = _by_name(spans, "chat ")
    assert len(chats) == len(rounds)
    for chat in chats:
        attrs = chat.attributes or {}
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == "scripted"
        assert attrs["gen_ai.usage.input_tokens"] > 0
        assert attrs["gen_ai.usage.output_tokens"] >= 0
        assert by_id[chat.parent.span_id].name.startswith("round ")  # type: ignore[union-attr]
    tools = _by_name(spans, "execute_tool ")
    assert tools
    for tool in tools:
        assert by_id[tool.parent.span_id].name.startswith("round ")  # type: ignore[union-attr]
        assert (tool.attributes or {})["gen_ai.tool.name"] in (
            "read_file",
            "list_dir",
            "search_text",
            "recall_artifact",
        )
    appends = _by_name(spans, "store.append")
    assert len(appends) == len(rounds)
    for append in appends:
        round_span = by_id[append.parent.span_id]  # type: ignore[union-attr]
        assert round_span.name.startswith("round ")
        assert round_span.start_time <= append.start_time <= append.end_time <= round_span.end_time  # type: ignore[operator]


async def test_compactions_carry_kind_reason_and_tokens_and_no_text_by_default(
    tmp_path: Path,
) -> None:
    subscriber, exporter = _spans()
    await _run(subscriber, tmp_path / "store")
    spans = exporter.get_finished_spans()
    compactions = _by_name(spans, "compaction")
    assert compactions, "a 6000-token window must compact in six turns"
    for span in compactions:
        attrs = span.attributes or {}
        assert attrs["stowage.compaction.kind"] in ("full", "fallback")
        assert attrs["stowage.compaction.reason"]
        assert attrs["stowage.compaction.tokens_before"] > attrs["stowage.compaction.tokens_after"]
        assert "stowage.compaction.summary" not in attrs
    for span in spans:
        for value in (span.attributes or {}).values():
            assert "SECRET-" not in str(value), (span.name, value)


async def test_text_is_on_spans_only_when_allowed(tmp_path: Path) -> None:
    subscriber, exporter = _spans(include_text=True)
    answers = await _run(subscriber, tmp_path / "store", turns=1)
    (turn,) = _by_name(exporter.get_finished_spans(), "turn")
    assert (turn.attributes or {})["stowage.answer"] == answers[0]


async def test_without_an_sdk_nothing_is_recorded_or_sent(tmp_path: Path) -> None:
    """The default tracer is the API's no-op one until the application installs a provider."""
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    subscriber = TraceSubscriber(model="scripted")
    await _run(subscriber, tmp_path / "store", turns=1)
    assert not trace.get_current_span().is_recording()


def test_cached_input_is_on_the_model_call_when_the_endpoint_reported_it() -> None:
    subscriber, exporter = _spans()
    usage = Usage(input_tokens=900, output_tokens=40, total_tokens=940, cached_tokens=512)
    subscriber(RoundStarted(session_id="s", round=1, items=3, tokens=900, estimated=False))
    subscriber(RoundCommitted(session_id="s", round=1, usage=usage, calls=0))
    subscriber(TurnFinished(session_id="s", turn=1, text="done"))
    (chat,) = _by_name(exporter.get_finished_spans(), "chat ")
    attrs = chat.attributes or {}
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 512
    assert attrs["gen_ai.usage.input_tokens"] == 900
    uncached = Usage(input_tokens=900, output_tokens=40, total_tokens=940)
    subscriber(RoundStarted(session_id="s", round=2, items=3, tokens=900, estimated=False))
    subscriber(RoundCommitted(session_id="s", round=2, usage=uncached, calls=0))
    second = _by_name(exporter.get_finished_spans(), "chat ")[1]
    assert "gen_ai.usage.cache_read.input_tokens" not in (second.attributes or {})
