"""Figures a proxy gets wrong, and windows too small for the work, through the real Runtime.

- Usage that cannot be true (zero, invented) is treated as missing, said once per session,
  and the estimate stands; ``require_reported_usage`` then reports it as missing.
- A context error that states the count recalibrates the session's chars per token (recorded
  in the log), and recovery frees until the request fits the window the provider stated.
- A turn that keeps re-reading what its compactions absorbed stops with ``CompactionLoop``
  long before the round limit; a mid-turn compaction keeps the newest rounds that fit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage import (
    AssistantMessage,
    CompactionLoop,
    CompactionSkipped,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    ModelResponse,
    RoundCommitted,
    ToolRegistry,
    TurnResult,
    Usage,
    UserMessage,
    replay,
)
from stowage.core import (
    CompactionRecord,
    ErrorRecord,
    ItemRecord,
    MicrocompactRecord,
    RoundCommittedRecord,
    TurnRecord,
)
from stowage.model import is_summary_request, scripted_usage
from stowage.policy import token_status
from stowage.testing import Fault

Wire = tuple[str, bool]


@pytest.mark.parametrize(
    ("fault", "reported"),
    [
        ("zero_usage", Usage(input_tokens=0, output_tokens=0, total_tokens=0)),
        ("invented_usage", Usage(input_tokens=3, output_tokens=1, total_tokens=4)),
    ],
)
async def test_usage_that_cannot_be_true_is_set_aside_said_once_and_the_estimate_used(
    tmp_path: Path, wire: Wire, fault_run: Any, fault: str, reported: Usage
) -> None:
    with anyio.fail_after(20):
        async with fault_run(tmp_path, *wire, require_reported_usage=True) as run:
            run.server.inject(Fault.answer(fault), when="any", times=1000)
            for _ in range(2):
                assert isinstance(await run.turn(), TurnResult)
            session = await run.runtime.open("faulty")
            status = token_status(session.state, require_reported=True)
            estimate = token_status(session.state)
        commits = [r for r in run.written if isinstance(r, RoundCommittedRecord)]
        assert len(commits) == 4
        assert all(r.usage is None and r.reported_usage == reported for r in commits)
        said = [r for r in run.log if isinstance(r, ErrorRecord) and r.kind == "usage_implausible"]
        assert len(said) == 1 and "treated as missing" in said[0].message
        assert status.tokens is None  # required usage: reported as missing
        assert estimate.estimated and estimate.tokens is not None and estimate.tokens > 100


def big_reader(size: int, summary_chars: int = 60) -> Any:
    """A reader brain whose ``read`` outputs are ``size`` characters (see ``big_tools``)."""

    def brain(request: ModelRequest) -> ModelResponse:
        items: tuple[AssistantMessage | FunctionCall, ...]
        if is_summary_request(request):
            items = (AssistantMessage(text=("Summary of the reading. " * 400)[:summary_chars]),)
        else:
            users = [i for i, item in enumerate(request.input) if isinstance(item, UserMessage)]
            turn = request.input[users[-1] + 1 :]
            if any(isinstance(i, FunctionCallOutput) for i in turn):
                items = (AssistantMessage(text="done"),)
            else:
                path = json.dumps({"path": f"file{len(users)}.txt"})
                items = (FunctionCall(call_id=f"c{len(users)}", name="read", arguments=path),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


def _is_round(body: dict[str, Any]) -> bool:
    """A round request's body (a summary request carries the tools too, for the prompt
    cache, but with tool_choice none)."""
    return bool(body.get("tools")) and body.get("tool_choice") != "none"


def request_chars(body: dict[str, Any]) -> int:
    """Characters of a request body's conversation (what the estimate counts)."""
    entries = body.get("messages") or body.get("input") or []
    total = 0
    for entry in entries:
        for key in ("content", "output", "arguments", "name", "call_id", "tool_call_id"):
            value = entry.get(key)
            total += len(value) if isinstance(value, str) else 0
        for call in entry.get("tool_calls") or ():
            total += len(call["id"]) + len(call["function"]["name"])
            total += len(call["function"]["arguments"])
    return total


@pytest.mark.parametrize(
    "fault",
    [Fault.litellm_context(tokens=7180), Fault.context_length(tokens=7180, limit=8192)],
    ids=["litellm", "openai"],
)
async def test_a_stated_count_recalibrates_the_ratio_and_recovery_fits_the_stated_window(
    tmp_path: Path, wire: Wire, fault_run: Any, brains: Any, fault: Fault
) -> None:
    with anyio.fail_after(20):
        tools = ToolRegistry([brains.read_tool(20_000)])
        async with fault_run(tmp_path, *wire, brain=big_reader(20_000), tools=tools) as run:
            assert isinstance(await run.turn("read file1"), TurnResult)
            refused_at = len(run.server.requests)
            run.server.inject(fault, when="round")
            assert isinstance(await run.turn("read file2"), TurnResult)
            bodies = run.server.requests[refused_at:]
        stated = [r for r in run.log if isinstance(r, ErrorRecord)]
        assert [r.kind for r in stated] == ["context_length_exceeded"]
        assert "7180" in stated[0].message
        ratio = float(re.search(r"give ([\d.]+) chars per token", stated[0].message)[1])  # type: ignore[index]
        refused_chars = request_chars(bodies[0])
        # the provider's own count, not the default 4 chars a token (tool schemas aside)
        assert refused_chars / 7180 < ratio < refused_chars / 6500
        # at the provider's ratio the 20,000-character read is above the cap: it is shown by
        # its reference (no summary needed), and the same round, sent once more, fits
        after = [r for r in run.log if r.seq > stated[0].seq]
        relief = [r for r in after if isinstance(r, MicrocompactRecord | CompactionRecord)]
        assert relief, "the refusal freed nothing"
        for compaction in (r for r in relief if isinstance(r, CompactionRecord)):
            assert compaction.chars_per_token == pytest.approx(ratio, abs=1e-3)
        retried = [b for b in bodies if _is_round(b)][1]
        assert request_chars(retried) / ratio < 7180 * 0.5


def reads_then_answers(reads: int, summary_chars: int) -> Any:
    """Reads file1..file``reads``, one a round; answers once it has them all in view, or a
    summary (it trusts the summary). Summaries are ``summary_chars`` long."""

    def brain(request: ModelRequest) -> ModelResponse:
        items: tuple[AssistantMessage | FunctionCall, ...]
        if is_summary_request(request):
            items = (AssistantMessage(text=("Summary of the reading. " * 2000)[:summary_chars]),)
        else:
            users = [i for i, item in enumerate(request.input) if isinstance(item, UserMessage)]
            turn = request.input[users[-1] + 1 :]
            done = sum(isinstance(i, FunctionCall) for i in turn)
            summarized = any(isinstance(i, CompactionSummary) for i in request.input)
            if done >= reads or summarized:
                items = (AssistantMessage(text="done"),)
            else:
                arguments = json.dumps({"path": f"file{done + 1}.txt"})
                call_id = f"t{len(users)}r{done + 1}"
                items = (FunctionCall(call_id=call_id, name="read", arguments=arguments),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


async def test_an_overflow_frees_until_the_request_fits_even_when_the_summary_is_long(
    tmp_path: Path, fault_run: Any, brains: Any
) -> None:
    """Mid-turn, with a summary far longer than what it replaces: recovery stubs the older
    turn's outputs, asks for a summary, skips it as no smaller (said, never written), then
    stubs every older output without a model, never skipping a step as freeing too little,
    until the request fits; the turn is answered."""
    with anyio.fail_after(20):
        tools = ToolRegistry([brains.read_tool(2_500)])
        brain = reads_then_answers(4, summary_chars=20_000)
        async with fault_run(tmp_path, "chat", True, brain=brain, tools=tools) as run:
            assert isinstance(await run.turn("read the files"), TurnResult)
            mark = run.last_seq
            refused_at = len(run.server.requests)
            reads = [0]

            def after_four_reads(event: object) -> None:
                if isinstance(event, RoundCommitted) and event.calls:
                    reads[0] += 1
                    if reads[0] == 4:
                        fault = Fault.context_length(tokens=7000, limit=4000)
                        run.server.inject(fault, when="round")

            run.runtime.subscribe(after_four_reads)
            result = await run.turn("read them again")
            assert isinstance(result, TurnResult) and result.text == "done", result
            bodies = [b for b in run.server.requests[refused_at:] if _is_round(b)]
        skipped = [e for e in run.events if isinstance(e, CompactionSkipped)]
        assert not [e for e in skipped if "would free only" in e.reason]
        recovery = [r for r in run.log if r.seq > mark and not isinstance(r, ItemRecord)]
        kinds = [getattr(r, "kind", type(r).__name__) for r in recovery]
        start = kinds.index("context_length_exceeded")
        # the summary came back larger than the history it would replace: skipped with its
        # reason, never written; stubs without a model free the window instead
        assert "full" not in kinds[start:]
        assert [e for e in skipped if "would be no smaller than the history" in e.reason]
        freed = [
            r for r in recovery[start:] if isinstance(r, MicrocompactRecord | CompactionRecord)
        ]
        assert freed, kinds
        refused, retried = bodies[4], bodies[5]
        assert request_chars(retried) < request_chars(refused)
        # at the provider's own count (7,000 tokens for the refused request) it now fits 4,000
        assert request_chars(retried) / (request_chars(refused) / 7000) < 4000


def looping_brain() -> Any:
    """Reads ``big.txt`` until it sees the output in the turn, then answers."""

    def brain(request: ModelRequest) -> ModelResponse:
        items: tuple[AssistantMessage | FunctionCall, ...]
        if is_summary_request(request):
            items = (AssistantMessage(text="Summary: the user wants big.txt read."),)
        else:
            users = [i for i, item in enumerate(request.input) if isinstance(item, UserMessage)]
            turn = request.input[users[-1] + 1 :]
            if any(isinstance(i, FunctionCallOutput) and len(i.output) > 1000 for i in turn):
                items = (AssistantMessage(text="done"),)
            else:
                arguments = json.dumps({"path": "big.txt"})
                items = (FunctionCall(call_id="c1", name="read", arguments=arguments),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


async def test_a_turn_that_keeps_rereading_what_compaction_absorbed_stops_with_the_loop_error(
    tmp_path: Path, wire: Wire, fault_run: Any, brains: Any
) -> None:
    with anyio.fail_after(20):
        tools = ToolRegistry([brains.read_tool(6_000)])
        # two repeats (the default is 3): the figures below count them
        settings = {
            "context_window": 2_000,
            "max_output_tokens": 200,
            "max_rounds_per_turn": 50,
            "compaction_loop_repeats": 2,
        }
        async with fault_run(
            tmp_path, *wire, brain=looping_brain(), tools=tools, **settings
        ) as run:
            error = await run.turn("read big.txt")
            rounds = [b for b in run.server.requests if _is_round(b)]
        assert isinstance(error, CompactionLoop), error
        message = str(error)
        assert "read" in message and "big.txt" in message
        # the repeats are counted: "2 times", or "the last 2 compactions" each followed by one
        assert re.search(r"\b2 (times|compactions)\b", message), message
        assert "2000 tokens" in message and "6000 characters" in message
        assert "larger window" in message and "read_max_bytes" in message
        assert "fewer tools" in message
        assert len(rounds) == 3  # read, re-read, re-read: stopped, far from the 50-round limit
        # the compactor judged the committed re-read a cycle; the log says so, and no request
        # followed it (what took the read out of view: an output the window could never hold
        # is capped, shown by reference, rather than summarized)
        last_compaction = max(
            r.seq for r in run.log if isinstance(r, CompactionRecord | MicrocompactRecord)
        )
        after = [r for r in run.log if r.seq > last_compaction]
        kinds = [(type(r).__name__, getattr(r, "kind", "")) for r in after]
        # the error says why, and the turn is closed as stopped (a resume does not go on with it)
        assert kinds[-2:] == [("ErrorRecord", "compaction_loop"), ("TurnRecord", "")]
        assert isinstance(after[-1], TurnRecord) and after[-1].phase == "stopped"
        assert [k for k, _ in kinds[:-2]] == ["ItemRecord", "ItemRecord", "RoundCommittedRecord"]


def three_reads() -> Any:
    """Reads file1..file3, one a round; answers once three outputs or a summary are in view."""

    def brain(request: ModelRequest) -> ModelResponse:
        items: tuple[AssistantMessage | FunctionCall, ...]
        if is_summary_request(request):
            items = (AssistantMessage(text="Summary: reading files one by one."),)
        else:
            users = [i for i, item in enumerate(request.input) if isinstance(item, UserMessage)]
            turn = request.input[users[-1] + 1 :]
            reads = sum(isinstance(i, FunctionCall) for i in turn)
            summarized = any(isinstance(i, CompactionSummary) for i in request.input)
            if reads >= 3 or (summarized and reads):
                items = (AssistantMessage(text="done"),)
            else:
                arguments = json.dumps({"path": f"file{reads + 1}.txt"})
                items = (FunctionCall(call_id=f"r{reads + 1}", name="read", arguments=arguments),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


async def test_a_mid_turn_compaction_keeps_the_turns_newest_output_verbatim_when_it_fits(
    tmp_path: Path, fault_run: Any, brains: Any
) -> None:
    with anyio.fail_after(20):
        tools = ToolRegistry([brains.read_tool(3_000)])
        settings = {
            "context_window": 4_000,
            "max_output_tokens": 400,
            "soft_mark": 0.55,
            "compact_mark": 0.55,
            "background_compaction": False,
            # whatever it frees: each read is a fifth of the window, and by default a summary
            # asked for below the hard mark must free room for four of them (so this one
            # would wait for the turn's end)
            "micro_min_free": 0.0,
        }
        async with fault_run(
            tmp_path, "chat", True, brain=three_reads(), tools=tools, **settings
        ) as run:
            result = await run.turn("read the files")
        assert isinstance(result, TurnResult) and result.text == "done"
        compaction = next(r for r in run.log if isinstance(r, CompactionRecord))
        state = replay("faulty", [r for r in run.log if r.seq <= compaction.seq])
        kept = [e.item for e in state.history if isinstance(e.item, FunctionCallOutput)]
        calls = [
            r for r in run.log if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall)
        ]
        newest = calls[-1].item
        assert isinstance(newest, FunctionCall)
        # the newest call's output stays verbatim (an older read of the turn may be kept or
        # re-attached beside it); the compaction covers what came before
        assert kept and kept[-1].call_id == newest.call_id
        assert kept[-1].output.startswith("contents of file")
        assert compaction.covers_through < calls[-1].seq
