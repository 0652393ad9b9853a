"""The scripted model: deterministic rounds, summaries that carry facts forward, usage, scripts."""

from __future__ import annotations

import json
import math

import anyio
import pytest
from stowage.core._errors import ModelConnectionError, ModelResponseError
from stowage.core._gateway import (
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    TextDelta,
    ToolSpec,
)
from stowage.core._items import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    Item,
    SystemMessage,
    UserMessage,
)
from stowage.core._records import Usage
from stowage.model._brain import ScriptedBrain
from stowage.model._scripted import ScriptedModel
from stowage.policy import build_summary_request

TOOLS = tuple(
    ToolSpec(name=name, description=f"{name} tool", parameters={"type": "object"})
    for name in ("list_dir", "read_file", "search_text", "run_tests")
)


def _request(
    *items: Item, tools: tuple[ToolSpec, ...] = TOOLS, purpose: str = "round"
) -> ModelRequest:
    return ModelRequest(model="scripted", input=items, tools=tools, purpose=purpose)  # type: ignore[arg-type]


def _outputs(response: ModelResponse, output: str = "README.md\nsrc/app.py") -> list[Item]:
    return [
        *response.items,
        *(FunctionCallOutput(call_id=c.call_id, output=output) for c in response.calls),
    ]


def test_scripted_model_is_a_model_gateway() -> None:
    assert isinstance(ScriptedModel(), ModelGateway)


def test_same_request_gets_the_same_response() -> None:
    request = _request(SystemMessage(text="sys"), UserMessage(text="fix the parser bug"))
    assert ScriptedBrain()(request) == ScriptedBrain()(request)
    assert ScriptedBrain()(request).calls[0].call_id == ScriptedBrain()(request).calls[0].call_id


def test_makes_tool_rounds_round_robin_then_answers_with_what_tools_returned() -> None:
    brain = ScriptedBrain(tool_rounds=3)
    history: list[Item] = [SystemMessage(text="sys"), UserMessage(text="fix the parser bug")]
    rounds = []
    for _ in range(3):
        response = brain(_request(*history))
        assert response.calls and not response.text
        rounds.append(response.calls)
        history += _outputs(response)
    names = [c.name for calls in rounds for c in calls]
    assert names[:4] == ["list_dir", "read_file", "search_text", "run_tests"]
    assert [len(calls) for calls in rounds] == [1, 2, 1]
    args = {c.name: json.loads(c.arguments) for calls in rounds for c in calls}
    assert args["list_dir"] == {"path": "."}
    assert args["read_file"] == {"path": "README.md"}  # first file of the listing
    assert args["search_text"] == {"pattern": "parser"}
    assert args["run_tests"] == {}
    assert len({c.call_id for calls in rounds for c in calls}) == len(names)
    answer = brain(_request(*history))
    assert not answer.calls
    assert "fix the parser bug" in answer.text and "README.md" in answer.text


def test_rounds_are_counted_per_user_turn() -> None:
    brain = ScriptedBrain(tool_rounds=1)
    history: list[Item] = [UserMessage(text="first")]
    history += _outputs(brain(_request(*history)))
    history.append(brain(_request(*history)).items[0])
    history.append(UserMessage(text="second"))
    assert brain(_request(*history)).calls  # a new turn starts with tool calls again


def test_without_tools_it_answers_directly_and_pads_to_answer_chars() -> None:
    response = ScriptedBrain(answer_chars=500)(_request(UserMessage(text="hello"), tools=()))
    assert not response.calls
    assert len(response.text) == 500 and "hello" in response.text


def _summary_request(*items: Item) -> ModelRequest:
    """The summary request of a session whose round request carries ``items``: the same
    input and tools, then the instruction message."""
    return build_summary_request(items, model="scripted", tools=TOOLS, cache_key="k")


def test_summary_carries_goals_errors_and_a_previous_summary_forward() -> None:
    brain = ScriptedBrain()
    first = brain(
        _summary_request(
            SystemMessage(text="sys"),
            UserMessage(text="goal one: migrate the DB"),
            FunctionCall(call_id="a", name="run_tests", arguments="{}"),
            FunctionCallOutput(call_id="a", output="error: 3 tests failed", is_error=True),
            AssistantMessage(text="tests fail"),
        )
    ).text
    assert "goal one: migrate the DB" in first and "error: 3 tests failed" in first
    second = brain(
        _summary_request(
            SystemMessage(text="sys"),
            CompactionSummary(text=first),
            UserMessage(text="goal two: add an index"),
            FunctionCall(call_id="b", name="run_tests", arguments="{}"),
            FunctionCallOutput(call_id="b", output="ok"),
        )
    ).text
    for fact in ("goal one: migrate the DB", "goal two: add an index", "error: 3 tests failed"):
        assert fact in second
    assert "run_tests x2" in second
    assert "Do not call any tool" not in second  # the instruction message is not a goal
    third = brain(_summary_request(SystemMessage(text="sys"), CompactionSummary(text=second))).text
    assert third == second  # a summary of a summary loses nothing


def test_a_user_message_last_with_tool_choice_none_is_a_summary_even_without_its_purpose() -> None:
    """What a server that sees only the wire gets: the tools, tool_choice none, and the
    instruction message last."""
    summary = _summary_request(
        UserMessage(text="goal: keep me"),
        FunctionCall(call_id="a", name="run_tests", arguments="{}"),
        FunctionCallOutput(call_id="a", output="ok"),
    )
    request = ModelRequest(model="m", input=summary.input, tools=summary.tools, tool_choice="none")
    text = ScriptedBrain()(request).text
    assert text.startswith("Summary of the session so far.") and "goal: keep me" in text


def test_tool_choice_none_without_tools_is_a_summary_request() -> None:
    request = ModelRequest(
        model="m", input=(UserMessage(text="keep me"),), tools=(), tool_choice="none"
    )
    assert ScriptedBrain()(request).text.startswith("Summary of the session so far.")


def test_usage_counts_four_characters_a_token() -> None:
    request = _request(UserMessage(text="x" * 10), tools=TOOLS[:1])
    response = ScriptedBrain()(request)
    specs = json.dumps(
        [{"name": "list_dir", "description": "list_dir tool", "parameters": {"type": "object"}}],
        sort_keys=True,
    )
    call = response.calls[0]
    input_tokens = math.ceil((10 + len(specs)) / 4)
    output_tokens = math.ceil((len(call.name) + len(call.arguments)) / 4)
    assert response.usage == Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )
    assert ScriptedBrain(report_usage=False)(request).usage is None


async def test_stream_yields_16_char_chunks_then_one_done_and_records_requests() -> None:
    with anyio.fail_after(15):
        model = ScriptedModel(answer_chars=100)
        request = _request(UserMessage(text="hi"), tools=())
        events = [e async for e in model.stream(request)]
        deltas = [e for e in events if isinstance(e, TextDelta)]
        assert [len(d.text) for d in deltas] == [16] * 6 + [4]
        assert isinstance(events[-1], ResponseDone)
        assert "".join(d.text for d in deltas) == events[-1].response.text
        assert model.requests == [request]


async def test_from_responses_plays_in_order_and_raises_the_exceptions() -> None:
    with anyio.fail_after(15):
        one = ModelResponse(items=(AssistantMessage(text="one"),))
        two = ModelResponse(items=(AssistantMessage(text="two"),))
        model = ScriptedModel.from_responses([one, ModelConnectionError("down"), two])
        request = _request(UserMessage(text="hi"))
        assert await model.create(request) == one
        with pytest.raises(ModelConnectionError, match="down"):
            await model.create(request)
        events = [e async for e in model.stream(request)]
        assert events[-1] == ResponseDone(response=two)
        with pytest.raises(ModelResponseError, match="exhausted"):
            await model.create(request)
        assert len(model.requests) == 4
