"""A server that ignores ``tool_choice="none"`` (some OpenAI-compatible servers do): handed
the session's tools with a summary request, it calls one instead of summarizing. The summary
is asked for once more without the tools, and the compaction is a real summary, not a
fallback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from stowage import (
    AssistantMessage,
    CompactionFailed,
    FunctionCall,
    HistoryCompacted,
    ModelRequest,
    ModelResponse,
    ToolRegistry,
)
from stowage.model import is_summary_request, scripted_usage

from .conftest import WireApi, read_tool, reader_brain

_SUMMARY = "Summary: files were read, one per turn."


def _tool_happy_brain(sent: list[tuple[str, bool]], *, always_calls: bool = False) -> Any:
    """``reader_brain`` for rounds; a summary request with tools gets a call to ``read``, one
    without tools a summary (or, ``always_calls``, a call all the same)."""
    rounds = reader_brain()

    def brain(request: ModelRequest) -> ModelResponse:
        if not is_summary_request(request):
            return rounds(request)
        sent.append(("summary", bool(request.tools)))
        items: tuple[AssistantMessage | FunctionCall, ...]
        if request.tools or always_calls:
            items = (FunctionCall(call_id="call_s", name="read", arguments=json.dumps({})),)
        else:
            items = (AssistantMessage(text=_SUMMARY),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


async def test_a_summary_answered_with_a_tool_call_is_asked_again_without_tools(
    tmp_path: Path, fault_run: Any, wire: tuple[WireApi, bool]
) -> None:
    sent: list[tuple[str, bool]] = []
    with anyio.fail_after(60):
        async with fault_run(
            tmp_path,
            *wire,
            brain=_tool_happy_brain(sent),
            tools=ToolRegistry([read_tool(1500)]),
            compact_threshold=1200,
        ) as run:
            for n in range(6):
                result = await run.turn(f"read file {n}")
                assert not isinstance(result, Exception), result
    compacted = [e for e in run.events if isinstance(e, HistoryCompacted)]
    assert compacted, "the history should have been compacted"
    assert all(e.kind == "full" and e.summary.startswith(_SUMMARY) for e in compacted)
    # each summary: first with the tools (for the prompt cache), then once without them
    assert sent[:2] == [("summary", True), ("summary", False)]
    assert sent.count(("summary", False)) == len(compacted)
    # the retry went out without tools on the wire as well
    summary_bodies = [b for b in run.server.requests if not b.get("tools")]
    assert summary_bodies and all("tool_choice" not in b for b in summary_bodies)
    assert not [e for e in run.events if isinstance(e, CompactionFailed)]


async def test_a_summarizer_that_calls_tools_even_without_them_fails_with_that_reason(
    tmp_path: Path, fault_run: Any
) -> None:
    sent: list[tuple[str, bool]] = []
    with anyio.fail_after(60):
        async with fault_run(
            tmp_path,
            "chat",
            False,
            brain=_tool_happy_brain(sent, always_calls=True),
            tools=ToolRegistry([read_tool(1500)]),
            compact_threshold=1200,
        ) as run:
            for n in range(4):
                result = await run.turn(f"read file {n}")
                assert not isinstance(result, Exception), result
    failures = [e for e in run.events if isinstance(e, CompactionFailed)]
    assert failures
    assert "tool calls and no summary, even without tools" in failures[0].error
    # each compaction asks twice, not in a loop: once with the tools, once without
    assert sent == [("summary", True), ("summary", False)] * len(failures)
