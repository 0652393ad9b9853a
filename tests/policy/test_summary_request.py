"""The summary request rides the session's prompt cache: it is the session's own round request
with one instruction message after it, so a prefix cache serves all of it but that message."""

from __future__ import annotations

from typing import Literal

import anyio
import pytest
from stowage.core import (
    UPDATES_INSTRUCTIONS,
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ModelRequest,
    SystemMessage,
    ToolSpec,
    UserMessage,
)
from stowage.core._protected import ProtectedState, prepare_all, render, user_ops
from stowage.model import ScriptedBrain, is_summary_request
from stowage.model._brain import transcript_items
from stowage.model._openai_gateway import OpenAIGateway
from stowage.model._openai_wire import chat_body, responses_body
from stowage.policy import PrefixCache, build_summary_request
from stowage.policy._compaction import SUMMARY_INSTRUCTIONS
from stowage.testing import FakeOpenAIServer
from stowage.testing._fake_wire import request_from_chat, request_from_responses

TOOLS = (
    ToolSpec(
        name="read_file",
        description="Read a file of the workspace.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
    ToolSpec(name="run_tests", description="Run the tests.", parameters={"type": "object"}),
)
KEY = "stowage-abc"


def projection(rounds: int, output_chars: int = 2000) -> tuple[Item, ...]:
    """A round request's input: system, protected state, a goal, ``rounds`` whole rounds."""
    state, _ = prepare_all(
        ProtectedState(), user_ops(objective="port the parser", add_constraints=["no C"]), "user"
    )
    items: list[Item] = [
        SystemMessage(text="You are a careful coding agent."),
        SystemMessage(text=render(state)),
        UserMessage(text="goal: port the parser to the new grammar"),
    ]
    for n in range(rounds):
        items.append(FunctionCall(call_id=f"c{n}", name="read_file", arguments=f'{{"n": {n}}}'))
        items.append(FunctionCallOutput(call_id=f"c{n}", output=f"file {n}: " + "x" * output_chars))
    return tuple(items)


def round_request(items: tuple[Item, ...]) -> ModelRequest:
    return ModelRequest(model="m", input=items, tools=TOOLS, max_output_tokens=500, cache_key=KEY)


def summary_request(
    items: tuple[Item, ...],
    *,
    focus: str | None = None,
    protected_updates: bool = False,
    instructions: str | None = None,
    max_output_tokens: int | None = None,
) -> ModelRequest:
    """The summary request of ``items``; output c<n> is artifact R<10+n>."""
    return build_summary_request(
        items,
        model="m",
        tools=TOOLS,
        cache_key=KEY,
        refs={f"c{n}": 10 + n for n in range(len(items))},
        focus=focus,
        protected_updates=protected_updates,
        instructions=instructions,
        max_output_tokens=max_output_tokens,
    )


def instruction_of(request: ModelRequest) -> str:
    last = request.input[-1]
    assert isinstance(last, UserMessage)
    return last.text


def test_the_summary_request_is_the_round_request_then_one_instruction_message() -> None:
    items = projection(3)
    rounds, summary = round_request(items), summary_request(items, max_output_tokens=900)
    assert summary.input[:-1] == rounds.input
    assert summary.tools == rounds.tools and summary.cache_key == rounds.cache_key == KEY
    assert summary.model == rounds.model
    assert instruction_of(summary).startswith(SUMMARY_INSTRUCTIONS)
    assert summary.tool_choice == "none" and summary.purpose == "summary"
    assert summary.max_output_tokens == 900


def test_the_instruction_message_names_the_refs_the_focus_and_the_updates_block() -> None:
    text = instruction_of(
        summary_request(projection(3), focus="the grammar migration", protected_updates=True)
    )
    for n in range(3):
        assert f"- R{10 + n}: output of read_file (c{n})" in text
    assert "the grammar migration" in text
    assert UPDATES_INSTRUCTIONS in text and '"# Protected state"' in text
    plain = instruction_of(summary_request(projection(3)))
    assert UPDATES_INSTRUCTIONS not in plain and "pay particular attention" not in plain


def test_refs_are_listed_only_for_outputs_that_do_not_name_them_already() -> None:
    items = (
        UserMessage(text="go"),
        FunctionCall(call_id="a", name="read_file", arguments="{}"),
        FunctionCallOutput(
            call_id="a", output="[output stored as artifact R4, 9000 chars; call recall_artifact]"
        ),
        FunctionCall(call_id="b", name="run_tests", arguments="{}"),
        FunctionCallOutput(call_id="b", output="3 passed"),
    )
    refs = {"a": 4, "b": 6, "gone": 2}  # "gone": an output trimmed from the projection
    text = instruction_of(build_summary_request(items, model="m", refs=refs))
    assert "- R6: output of run_tests (b)" in text
    assert "R4:" not in text and "R2" not in text


def test_a_prompt_file_replaces_the_built_in_instructions_but_not_the_rest() -> None:
    text = instruction_of(
        summary_request(projection(1), instructions="Summarize tersely.", focus="tests")
    )
    assert text.startswith("Summarize tersely.") and SUMMARY_INSTRUCTIONS not in text
    assert "- R10: output of read_file (c0)" in text and "tests" in text


def test_summary_instructions_ask_for_what_must_survive_and_no_tool_call() -> None:
    lowered = SUMMARY_INSTRUCTIONS.lower()
    for needed in ("goal", "decision", "files", "completed", "pending", "error", "r<n>"):
        assert needed in lowered
    assert "here is the summary" in lowered and "no preamble" in lowered
    assert "do not call any tool" in lowered


def test_the_prefix_cache_serves_over_90_percent_of_a_summary_of_a_large_history() -> None:
    items = projection(20, output_chars=2000)
    cache = PrefixCache()
    cache.serve(round_request(items))
    summary = summary_request(items, focus="the parser", protected_updates=True)
    hit = cache.serve(summary)
    assert hit.cached_tokens / hit.input_tokens >= 0.90, hit
    # what is left to pay is the instruction message and the last partial cache block
    assert hit.input_tokens - hit.cached_tokens < len(instruction_of(summary)) / 4 + 128


def test_a_summary_after_the_next_round_was_sent_is_served_the_same() -> None:
    """The compactor summarizes a committed round while the sampler goes on: the summary's
    projection is then a prefix of the newest round request (plus the instruction)."""
    items = projection(20)
    cache = PrefixCache()
    cache.serve(round_request(items[:-2]))
    cache.serve(round_request(items))
    hit = cache.serve(summary_request(items))
    assert hit.cached_tokens / hit.input_tokens >= 0.90


@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_both_wires_send_the_tools_tool_choice_none_and_a_final_user_message(
    wire: Literal["chat", "responses"],
) -> None:
    items = (*projection(2), AssistantMessage(text="read both"))[:-1]  # ends with an output
    request = summary_request(items, protected_updates=True)
    if wire == "chat":
        body = chat_body(request, stream=False)
        messages = body["messages"]
        assert [m["role"] for m in messages[-3:]] == ["assistant", "tool", "user"]
        parsed = request_from_chat(body)  # no purpose header: the wire alone tells
    else:
        body = responses_body(request, stream=False)
        messages = body["input"]
        assert messages[-2]["type"] == "function_call_output"
        assert messages[-1] == {"role": "user", "content": instruction_of(request)}
        parsed = request_from_responses(body)
    assert body["tool_choice"] == "none" and len(body["tools"]) == len(TOOLS)
    assert body["prompt_cache_key"] == KEY
    assert parsed.purpose == "summary" and is_summary_request(parsed)
    round_body = chat_body(round_request(items), stream=False)
    assert request_from_chat(round_body).purpose == "round"


def test_the_shape_alone_marks_a_summary_request() -> None:
    items = projection(2)
    shaped = ModelRequest(
        model="m", input=summary_request(items).input, tools=TOOLS, tool_choice="none"
    )
    assert is_summary_request(shaped)
    assert not is_summary_request(round_request(items))
    # tool_choice none after a tool output, with no instruction message, is not one
    assert not is_summary_request(
        ModelRequest(model="m", input=items, tools=TOOLS, tool_choice="none")
    )


def test_the_scripted_summarizer_reads_the_history_and_not_the_instruction() -> None:
    items = (
        *projection(1),
        FunctionCall(call_id="t", name="run_tests", arguments="{}"),
        FunctionCallOutput(call_id="t", output="error: 2 tests failed", is_error=True),
        AssistantMessage(text="the tests fail"),
    )
    request = summary_request(items, focus="summarize the failures", protected_updates=True)
    assert transcript_items(request.input) == list(items)
    text = ScriptedBrain()(request).text
    assert "goal: port the parser to the new grammar" in text
    assert "error: 2 tests failed" in text
    assert "run_tests x1" in text and "read_file x1" in text
    assert "Do not call any tool" not in text and "summarize the failures" not in text
    # the failed call is proposed as a failed attempt; the objective is not proposed again
    assert '"add_failed_attempt"' in text and "port the parser" not in text.split("```")[1]


def test_over_the_wire_the_scripted_summarizer_still_sees_failed_calls_and_the_state() -> None:
    """The wire carries no error flag: a failed output is its "error" text; and the protected
    state the summarizer proposes against is the system message every round shows."""
    state, _ = prepare_all(
        ProtectedState(), [{"op": "add_pending", "text": "migrate the loader"}], "summarizer"
    )
    items = (
        SystemMessage(text="sys"),
        SystemMessage(text=render(state)),
        UserMessage(text="done: migrate the loader"),
        FunctionCall(call_id="t", name="run_tests", arguments="{}"),
        FunctionCallOutput(call_id="t", output="error: 2 tests failed", is_error=True),
    )
    parsed = request_from_chat(
        chat_body(summary_request(items, protected_updates=True), stream=False)
    )
    assert not any(isinstance(i, FunctionCallOutput) and i.is_error for i in parsed.input)
    text = ScriptedBrain()(parsed).text
    assert "error: 2 tests failed" in text
    block = text.split("```")[1]
    assert '"add_failed_attempt"' in block and "run_tests({})" in block
    assert '{"op": "complete_pending", "id": "p1"}' in block


@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_the_fake_server_reports_the_cached_share_of_summary_requests_apart(
    wire: Literal["chat", "responses"],
) -> None:
    with anyio.fail_after(30):
        items = projection(20)
        async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=0)) as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api=wire)
            try:
                await gateway.create(round_request(items))
                response = await gateway.create(summary_request(items, protected_updates=True))
            finally:
                await gateway.aclose()
        assert response.text.startswith("Summary of the session so far.")
        assert server.stats["rounds"] == 1 and server.stats["summaries"] == 1
        share = server.cached_share("summary", KEY)
        assert share is not None and share >= 0.90
        assert server.cached_share("summary") == share  # one key: the total is the same
        assert server.cached_share("round", KEY) == 0.0  # the first request finds nothing
        assert server.prefix_cache is not None
        figures = server.prefix_cache.figures[KEY]
        assert figures["requests"] == 2 and figures["summary_requests"] == 1
        assert figures["summary_cached_tokens"] == figures["cached_tokens"]
