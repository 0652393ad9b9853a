"""What a summary cost reaches the log: ``summarize`` sums the usage of every request it made,
and the applied plan's compaction record carries it (the cost ledger's input)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import structlog
from stowage.actors._plans import PlanApplier
from stowage.actors._summarizer import Breaker, summarize
from stowage.core import (
    AssistantMessage,
    CompactionRecord,
    FunctionCall,
    HistoryEntry,
    Item,
    ModelRequest,
    ModelResponse,
    Record,
    Settings,
    ToolSpec,
    Usage,
    UserMessage,
)
from stowage.model import ScriptedModel
from stowage.policy import Accounting, Plan

JournalOn = Callable[[Settings, Sequence[Record]], AbstractAsyncContextManager[Any]]
RoundsLog = Callable[[Sequence[str]], list[Record]]
SETTINGS = Settings(model="mystery", compact_threshold=1000, tools="none")
TOOL = ToolSpec(name="read_file", description="read", parameters={"type": "object"})


def usage(input_tokens: int, output: int, cached: int = 0) -> Usage:
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        total_tokens=input_tokens + output,
        cached_tokens=cached,
    )


def build(items: list[Item]) -> ModelRequest:
    return ModelRequest(
        model="mystery", input=tuple(items), tools=(TOOL,), tool_choice="none", purpose="summary"
    )


async def summary_of(responses: list[ModelResponse]) -> Any:
    history = [HistoryEntry(seq=2, item=UserMessage(text="read every file"))]
    return await summarize(
        history,
        build=build,
        gateway=ScriptedModel.from_responses(responses),
        breaker=Breaker(),
        urgent=False,
        attempts=1,
        input_budget=None,
        publish=lambda event: None,
        session_id="s",
        log=structlog.get_logger("test"),
    )


async def test_a_summary_that_took_two_requests_reports_both_usages() -> None:
    """The first answer called a tool (tool_choice ignored): asked again without tools, and
    both requests were paid for."""
    with anyio.fail_after(5):
        called = ModelResponse(
            items=(FunctionCall(call_id="c", name="read_file", arguments="{}"),),
            usage=usage(1000, 10, cached=800),
        )
        answered = ModelResponse(items=(AssistantMessage(text="goal: x"),), usage=usage(900, 50))
        outcome = await summary_of([called, answered])
    assert outcome.kind == "full" and outcome.text == "goal: x"
    assert outcome.usage == usage(1900, 60, cached=800)


async def test_a_summary_without_reported_usage_has_none() -> None:
    with anyio.fail_after(5):
        outcome = await summary_of([ModelResponse(items=(AssistantMessage(text="goal: x"),))])
    assert outcome.kind == "full" and outcome.usage is None


async def test_the_compaction_record_carries_the_plans_usage(
    journal_on: JournalOn, rounds_log: RoundsLog
) -> None:
    spent = usage(4000, 300, cached=3500)
    with anyio.fail_after(5):
        async with journal_on(SETTINGS, rounds_log(["z" * 800] * 3)) as rig:
            state = rig.journal.state
            plan = Plan(
                round=state.round,
                summary="read three files",
                covers_through=state.last_seq,
                reason="test",
                tokens_before=None,
                estimated=True,
                based_on_compaction_seq=state.last_compaction_seq,
                usage=spent,
            )
            applier = PlanApplier(rig.journal.ctx, rig.journal)
            assert await applier.apply(
                plan, accounting=Accounting.of(SETTINGS, ()), chars_per_token=4.0
            )
    [record] = rig.written
    assert isinstance(record, CompactionRecord) and record.usage == spent
