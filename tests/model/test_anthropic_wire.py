"""The Anthropic Messages wire, pure: bodies, cache breakpoints, parsing, the stream, errors,
retry headers, and the fake server's breakpoint cache. No event loop."""

from __future__ import annotations

import json
from typing import Any

import pytest
from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    ContextLengthExceeded,
    FunctionCall,
    FunctionCallOutput,
    IncompleteResponse,
    Item,
    ModelConnectionError,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    RateLimitError,
    SystemMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from stowage.model._anthropic_wire import (
    MAX_BREAKPOINTS,
    MessagesStreamAccumulator,
    anthropic_usage,
    cache_breakpoints,
    event_error,
    messages_body,
    parse_message,
)
from stowage.model._http_errors import HttpStatusError, model_error
from stowage.model._retry_headers import requested_wait
from stowage.testing._fake_messages import (
    BreakpointCache,
    message_events,
    message_object,
    overflow_error,
    request_from_messages,
)

TOOL = ToolSpec(name="read", description="read a file", parameters={"type": "object"})


def _round(n: int) -> list[Item]:
    return [
        FunctionCall(call_id=f"c{n}", name="read", arguments=json.dumps({"path": f"f{n}"})),
        FunctionCallOutput(call_id=f"c{n}", output=f"content of f{n} " * 50),
    ]


def _request(items: list[Item], **kw: Any) -> ModelRequest:
    return ModelRequest(model="claude-x", input=tuple(items), tools=(TOOL,), **kw)


def _marked(body: dict[str, Any]) -> list[Any]:
    """Every block of ``body`` that carries a breakpoint, in order."""
    blocks = [*body.get("tools", []), *body.get("system", [])]
    for message in body["messages"]:
        blocks += message["content"]
    return [b for b in blocks if "cache_control" in b]


def test_system_goes_on_top_calls_are_blocks_and_one_role_shares_one_message() -> None:
    items: list[Item] = [
        SystemMessage(text="be brief"),
        SystemMessage(text="PROTECTED STATE"),
        UserMessage(text="read two files"),
        AssistantMessage(text="reading"),
        FunctionCall(call_id="a", name="read", arguments='{"path": "x"}'),
        FunctionCall(call_id="b", name="read", arguments="not json"),
        FunctionCallOutput(call_id="a", output="X"),
        FunctionCallOutput(call_id="b", output="", is_error=True),
        UserMessage(text="and then?"),
    ]
    body = messages_body(_request(items, parallel_tool_calls=False), stream=True)
    assert [b["text"] for b in body["system"]] == ["be brief", "PROTECTED STATE"]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["text", "tool_use", "tool_use"]
    assert assistant[1]["input"] == {"path": "x"}
    assert assistant[2]["input"] == {"arguments": "not json"}  # the API takes only an object
    results = body["messages"][2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[1] == {"type": "tool_result", "tool_use_id": "b", "is_error": True}
    assert body["tools"][0]["input_schema"] == {"type": "object"}
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["stream"] is True and body["max_tokens"] > 0


def test_tool_results_come_first_in_their_user_message() -> None:
    items: list[Item] = [
        UserMessage(text="go"),
        FunctionCall(call_id="a", name="read", arguments="{}"),
        UserMessage(text="an interjection"),
        FunctionCallOutput(call_id="a", output="X"),
    ]
    body = messages_body(_request(items), stream=False)
    assert [b["type"] for b in body["messages"][-1]["content"]] == ["tool_result", "text"]


def test_a_summary_request_keeps_the_tools_with_tool_choice_none() -> None:
    items: list[Item] = [SystemMessage(text="s"), UserMessage(text="u"), UserMessage(text="sum")]
    body = messages_body(_request(items, tool_choice="none", purpose="summary"), stream=False)
    assert body["tool_choice"] == {"type": "none"} and body["tools"]
    assert "stream" not in body


def test_breakpoints_mark_system_summary_previous_and_newest_and_never_more_than_four() -> None:
    items: list[Item] = [
        SystemMessage(text="be brief"),
        SystemMessage(text="PROTECTED"),
        CompactionSummary(text="what happened"),
        UserMessage(text="go on"),
        *_round(1),
        *_round(2),
    ]
    request = _request(items)
    # newest (the last output), previous request's end, the summary, the instructions
    assert cache_breakpoints(request) == (7, 5, 2, 0)
    marked = _marked(messages_body(request, stream=False))
    assert len(marked) == MAX_BREAKPOINTS
    assert marked[0]["text"] == "be brief"
    assert marked[1]["text"].endswith("what happened")
    assert [m.get("tool_use_id") for m in marked[2:]] == ["c1", "c2"]


@pytest.mark.parametrize("rounds", range(6))
def test_no_request_ever_carries_more_than_four_breakpoints(rounds: int) -> None:
    items: list[Item] = [SystemMessage(text="s"), SystemMessage(text="p"), UserMessage(text="u")]
    for n in range(rounds):
        items += _round(n)
        items += [AssistantMessage(text="ok"), UserMessage(text=f"next {n}")]
    for purpose in ("round", "summary"):
        request = _request(items, purpose=purpose)
        assert 0 < len(_marked(messages_body(request, stream=False))) <= MAX_BREAKPOINTS


def test_a_turn_start_reads_where_the_previous_request_ended() -> None:
    items: list[Item] = [SystemMessage(text="s"), UserMessage(text="u"), *_round(1)]
    items += [AssistantMessage(text="done"), UserMessage(text="again")]
    # newest: the new user message; previous: the output the last request ended with
    assert cache_breakpoints(_request(items))[:2] == (5, 3)


def test_a_summary_request_marks_the_conversation_not_its_instruction() -> None:
    items: list[Item] = [SystemMessage(text="s"), UserMessage(text="u"), *_round(1)]
    summary = _request([*items, UserMessage(text="summarize")], purpose="summary")
    assert cache_breakpoints(summary)[0] == 3
    # it marks the same prefix the round request marked last: the cache serves it
    assert cache_breakpoints(_request(items))[0] == 3


def test_without_system_the_tools_are_marked() -> None:
    assert -1 in cache_breakpoints(_request([UserMessage(text="u")]))
    body = messages_body(_request([UserMessage(text="u")]), stream=False)
    assert "cache_control" in body["tools"][-1]


def test_usage_counts_the_whole_prompt_and_the_cache_reads_and_writes() -> None:
    usage = anthropic_usage(
        {"input_tokens": 50, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200,
         "output_tokens": 7}
    )  # fmt: skip
    assert usage == Usage(
        input_tokens=1250, output_tokens=7, total_tokens=1257, cached_tokens=1000,
        cache_write_tokens=200,
    )  # fmt: skip
    assert anthropic_usage({"input_tokens": 5, "output_tokens": 1}) == Usage(
        input_tokens=5, output_tokens=1, total_tokens=6
    )
    with pytest.raises(ModelResponseError):
        anthropic_usage({"input_tokens": "many", "output_tokens": 1})


@pytest.mark.parametrize(
    ("stop", "finish"),
    [("end_turn", "stop"), ("tool_use", "tool_calls"), ("max_tokens", "length"),
     ("stop_sequence", "stop")],
)  # fmt: skip
def test_stop_reasons_map_to_finish_reasons(stop: str, finish: str) -> None:
    data = {"type": "message", "model": "m", "content": [{"type": "text", "text": "hi"}],
            "stop_reason": stop, "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
    assert parse_message(data).finish_reason == finish
    assert parse_message(data).truncated == (stop == "max_tokens")


def test_a_message_without_stop_reason_is_incomplete() -> None:
    with pytest.raises(IncompleteResponse):
        parse_message({"type": "message", "content": [], "stop_reason": None})


def test_parse_message_reads_text_and_calls() -> None:
    data = {
        "type": "message", "model": "claude-x", "stop_reason": "tool_use",
        "content": [{"type": "text", "text": "let me "}, {"type": "text", "text": "look"},
                    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": 1}}],
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }  # fmt: skip
    response = parse_message(data)
    assert response.text == "let me look" and response.model == "claude-x"
    assert response.calls == (FunctionCall(call_id="toolu_1", name="read", arguments='{"p":1}'),)


def _response(items: tuple[Any, ...], finish: str) -> ModelResponse:
    usage = Usage(input_tokens=900, output_tokens=12, total_tokens=912)
    return ModelResponse(items=items, usage=usage, model="claude-x", finish_reason=finish)


def test_the_stream_accumulates_to_what_the_whole_message_says() -> None:
    from stowage.testing._fake_messages import CacheUse

    use = CacheUse(total=900, read=600, written=200, breakpoints=3, broke=False)
    answer = _response(
        (AssistantMessage(text="a fairly long answer, streamed in pieces"),
         FunctionCall(call_id="toolu_9", name="read", arguments='{"path":"a/b/c.txt"}')),
        "tool_calls",
    )  # fmt: skip
    accumulator = MessagesStreamAccumulator()
    texts = [
        accumulator.feed(e) for e in message_events(answer, model="claude-x", serial=1, use=use)
    ]
    streamed = accumulator.finish()
    whole = parse_message(message_object(answer, model="claude-x", serial=1, use=use))
    assert "".join(texts) == answer.text
    assert streamed == whole
    assert streamed.items == answer.items
    assert streamed.usage == Usage(
        input_tokens=900, output_tokens=12, total_tokens=912, cached_tokens=600,
        cache_write_tokens=200,
    )  # fmt: skip


def test_a_cut_stream_is_incomplete() -> None:
    answer = _response((AssistantMessage(text="half"),), "stop")
    accumulator = MessagesStreamAccumulator()
    for event in message_events(answer, model="m", serial=1, use=None, cut=True):
        accumulator.feed(event)
    with pytest.raises(IncompleteResponse):
        accumulator.finish()


def test_stream_error_events_map_by_type() -> None:
    assert isinstance(event_error({"type": "overloaded_error", "message": "Overloaded"}),
                      ModelConnectionError)  # fmt: skip
    overflow = event_error(
        {"type": "invalid_request_error", "message": "prompt is too long: 210 tokens > 200 maximum"}
    )
    assert isinstance(overflow, ContextLengthExceeded)
    assert (overflow.tokens, overflow.limit) == (210, 200)
    assert type(event_error({"type": "invalid_request_error", "message": "bad"})) is (
        ModelResponseError
    )
    with pytest.raises(ModelConnectionError):
        MessagesStreamAccumulator().feed({"type": "error", "error": {"type": "overloaded_error"}})


def test_overflow_and_overload_statuses_map_to_their_errors() -> None:
    body = json.dumps(
        {"type": "error", "error": {"type": "invalid_request_error",
                                    "message": "prompt is too long: 210000 tokens > 200000 maximum"}}
    ).encode()  # fmt: skip
    error = model_error(HttpStatusError(400, {}, body))
    assert isinstance(error, ContextLengthExceeded)
    assert (error.tokens, error.limit) == (210000, 200000)
    both = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message":
        "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease "
        "input length or `max_tokens` and try again"}}).encode()  # fmt: skip
    error = model_error(HttpStatusError(400, {}, both))
    assert isinstance(error, ContextLengthExceeded)
    assert (error.tokens, error.limit) == (197000, 200000)
    overloaded = model_error(HttpStatusError(529, {"retry-after": "3"}, b"{}"))
    assert isinstance(overloaded, ModelConnectionError) and overloaded.retry_after == 3
    limited = model_error(HttpStatusError(429, {"retry-after": "2"}, b"{}"))
    assert isinstance(limited, RateLimitError) and limited.retry_after == 2


def test_a_used_up_anthropic_limit_waits_until_its_reset() -> None:
    now = 1_700_000_000.0
    headers = {
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": "2023-11-14T22:13:40Z",  # now + 20 s
        "anthropic-ratelimit-requests-remaining": "40",
        "anthropic-ratelimit-requests-reset": "2023-11-14T22:18:20Z",  # not used up
    }
    assert requested_wait(headers, now=now) == pytest.approx(20.0)
    assert requested_wait({**headers, "retry-after": "45"}, now=now) == pytest.approx(45.0)


def test_the_fake_server_reads_back_what_the_gateway_wrote() -> None:
    items: list[Item] = [
        SystemMessage(text="s"), CompactionSummary(text="so far"), UserMessage(text="u"),
        FunctionCall(call_id="a", name="read", arguments='{"path":"x"}'),
        FunctionCallOutput(call_id="a", output="X", is_error=True),
        AssistantMessage(text="done"),
    ]  # fmt: skip
    request = _request(items, max_output_tokens=77)
    back = request_from_messages(messages_body(request, stream=False), purpose="round")
    assert back.input == request.input
    assert back.tools == request.tools and back.max_output_tokens == 77


def test_the_fake_cache_serves_only_marked_prefixes_it_saw_before() -> None:
    cache = BreakpointCache()
    base: list[Item] = [SystemMessage(text="s " * 2000), UserMessage(text="u " * 400)]
    first = messages_body(_request([*base, *_round(1)]), stream=False)
    second = messages_body(_request([*base, *_round(1), *_round(2)]), stream=False)
    one = cache.serve(first, total=None, purpose="round")
    two = cache.serve(second, total=None, purpose="round")
    assert one.read == 0 and one.written > 0
    # the second reads everything the first marked last, and writes its own new round
    assert two.read == one.read + one.written and two.written > 0 and not two.broke
    unmarked = {k: v for k, v in second.items()}
    unmarked["messages"] = json.loads(json.dumps(second["messages"]).replace(
        ', "cache_control": {"type": "ephemeral"}', ""))  # fmt: skip
    unmarked["system"] = [{"type": "text", "text": "other"}]
    bare = cache.serve(unmarked, total=None, purpose="round")
    assert bare.read == 0 and bare.written == 0 and bare.uncached == bare.total


def test_the_fake_answers_an_oversized_prompt_with_anthropics_overflow_error() -> None:
    request = _request([UserMessage(text="x" * 4000)], max_output_tokens=100)
    error = overflow_error(request, window=500)
    assert error is not None and "prompt is too long" in error["error"]["message"]
    assert overflow_error(request, window=1100) is not None  # prompt + max_tokens past it
    assert overflow_error(request, window=5000) is None


def test_stubs_are_recognised_in_both_shapes_default_stub_writes() -> None:
    from stowage.core import PREVIEW_MIN_CHARS, HistoryEntry, default_stub
    from stowage.model._anthropic_wire import is_stub

    for size in (1_200, PREVIEW_MIN_CHARS + 10):
        entry = HistoryEntry(seq=41, item=FunctionCallOutput(call_id="c", output="y" * size))
        assert is_stub(FunctionCallOutput(call_id="c", output=default_stub(entry)))
    assert not is_stub(FunctionCallOutput(call_id="c", output="output stored as artifact R1"))
    assert not is_stub(UserMessage(text="[output stored as artifact R1, 5 chars ~2 tokens]"))


def _stubbed(rounds: int, stubbed: int) -> list[Item]:
    """System, protected state, a user message, then ``rounds`` rounds whose oldest
    ``stubbed`` outputs microcompaction replaced with stubs."""
    from stowage.core import HistoryEntry, default_stub

    items: list[Item] = [
        SystemMessage(text="s " * 300),
        SystemMessage(text="p"),
        UserMessage(text="u"),
    ]
    for n in range(rounds):
        call, output = _round(n)
        assert isinstance(output, FunctionCallOutput)
        if n < stubbed:
            entry = HistoryEntry(seq=10 + n, item=output)
            output = FunctionCallOutput(call_id=output.call_id, output=default_stub(entry))
        items += [call, output]
    return items


def test_settled_points_among_the_stubs_are_marked_before_the_summary_and_system() -> None:
    # 33 stubs: the 32nd and the 16th are the settled points (outputs are at 4 + 2n)
    assert cache_breakpoints(_request(_stubbed(36, 33))) == (74, 72, 4 + 2 * 31, 4 + 2 * 15)
    # fewer than 16 stubs: no settled point yet, protected state and system are marked
    assert cache_breakpoints(_request(_stubbed(10, 5))) == (22, 20, 1, 0)


def test_a_new_batch_of_stubs_rereads_up_to_a_settled_mark() -> None:
    cache = BreakpointCache()
    before = messages_body(_request(_stubbed(30, 20)), stream=False)
    for _ in range(2):  # rounds before the batch carry the same settled mark
        cache.serve(before, total=None, purpose="round")
    after = messages_body(_request(_stubbed(31, 30)), stream=False)  # a batch of 10 stubs
    use = cache.serve(after, total=None, purpose="round")
    settled = messages_body(_request(_stubbed(16, 16)), stream=False)  # through the 16th stub
    head = cache.serve(settled, total=None, purpose="round")
    # it read the prefix through the 16th stub, far past system and protected state
    assert use.read == head.read > 300
    assert use.written > 0


def test_the_fake_tells_a_summary_body_from_a_round_without_the_purpose_header() -> None:
    items: list[Item] = [SystemMessage(text="s"), UserMessage(text="u"), *_round(1)]
    summary = _request([*items, UserMessage(text="sum")], tool_choice="none", purpose="summary")
    assert request_from_messages(messages_body(summary, stream=False)).purpose == "summary"
    assert request_from_messages(messages_body(_request(items), stream=False)).purpose == "round"
