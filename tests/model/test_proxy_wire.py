"""What providers and proxies put on the wire when things go wrong, read purely: finish
markers, truncation, the figures of a context error, and every header that asks for a wait."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from stowage.core import ContextLengthExceeded, IncompleteResponse, ModelResponseError
from stowage.model._http_errors import model_error
from stowage.model._openai_sdk import map_openai_error
from stowage.model._openai_wire import (
    ChatStreamAccumulator,
    ResponsesStreamAccumulator,
    context_error_figures,
    parse_chat_completion,
    parse_responses_response,
)
from stowage.model._retry_headers import parse_duration, requested_wait


def chat(finish_reason: str | None = "stop", **message: object) -> dict[str, object]:
    choice = {"index": 0, "message": {"role": "assistant", **message}}
    return {"choices": [{**choice, "finish_reason": finish_reason}], "model": "m"}


def test_a_chat_completion_counts_only_with_a_choice_that_says_why_it_finished() -> None:
    assert parse_chat_completion(chat("stop", content="hi")).text == "hi"
    with pytest.raises(IncompleteResponse, match="no choices"):
        parse_chat_completion({"choices": [], "usage": None})
    with pytest.raises(IncompleteResponse, match="finish_reason"):
        parse_chat_completion(chat(None, content="hi"))


def test_finish_reason_length_marks_a_chat_completion_truncated() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"pa'}}
    response = parse_chat_completion(chat("length", content=None, tool_calls=[call]))
    assert response.truncated and response.finish_reason == "length"
    assert response.calls[0].arguments == '{"pa'
    assert not parse_chat_completion(chat("tool_calls", tool_calls=[call])).truncated


def test_a_chat_stream_without_a_finish_reason_is_incomplete() -> None:
    accumulator = ChatStreamAccumulator()
    accumulator.feed({"choices": [{"delta": {"content": "par"}}]})
    with pytest.raises(IncompleteResponse, match="without a finish_reason"):
        accumulator.finish()
    only_usage = ChatStreamAccumulator()
    only_usage.feed({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    with pytest.raises(IncompleteResponse):
        only_usage.finish()


def responses(status: str, output: list[object], **extra: object) -> dict[str, object]:
    return {"status": status, "output": output, "model": "m", **extra}


TEXT = {"type": "message", "content": [{"type": "output_text", "text": "hel"}]}


def test_a_responses_answer_stopped_by_the_output_limit_is_truncated() -> None:
    details = {"incomplete_details": {"reason": "max_output_tokens"}}
    response = parse_responses_response(responses("incomplete", [TEXT], **details))
    assert response.truncated and response.text == "hel"
    assert not parse_responses_response(responses("completed", [TEXT])).truncated


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (responses("in_progress", [TEXT]), IncompleteResponse),
        (responses("completed", []), IncompleteResponse),
        (responses("failed", [], error={"message": "boom"}), ModelResponseError),
    ],
    ids=["not-finished", "no-output", "failed"],
)
def test_a_responses_answer_that_is_not_done_or_empty_is_refused(
    body: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        parse_responses_response(body)


def test_a_responses_stream_ending_in_response_incomplete_is_a_truncated_answer() -> None:
    accumulator = ResponsesStreamAccumulator()
    assert accumulator.feed({"type": "response.output_text.delta", "delta": "hel"}) == "hel"
    final = responses("incomplete", [TEXT], incomplete_details={"reason": "max_output_tokens"})
    accumulator.feed({"type": "response.incomplete", "response": final})
    assert accumulator.finish().truncated
    cut = ResponsesStreamAccumulator()
    cut.feed({"type": "response.output_text.delta", "delta": "hel"})
    with pytest.raises(IncompleteResponse, match=r"before response\.completed"):
        cut.finish()


def test_a_body_that_is_not_json_is_an_incomplete_response_worth_retrying() -> None:
    try:
        json.loads('{"choices": [')
    except json.JSONDecodeError as exc:
        errors = [model_error(exc), map_openai_error(exc)]
    assert all(isinstance(error, IncompleteResponse) and error.transient for error in errors)


@pytest.mark.parametrize(
    ("message", "figures"),
    [
        (
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens. Please reduce the length of the messages.",
            (9000, 8192),
        ),
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4000 in the messages, 1000 in the completion).",
            (4000, 4096),
        ),
        (
            "litellm.ContextWindowExceededError: litellm.BadRequestError: "
            "ContextWindowExceededError: OpenAIException - prompt is 7180 tokens",
            (7180, None),
        ),
        ("prompt is too long: 7,180 tokens > 4096 maximum", (7180, 4096)),
        ("Your input exceeds the context window of this model.", (None, None)),
    ],
    ids=["openai", "vllm", "litellm", "anthropic", "no-figures"],
)
def test_a_context_error_gives_the_count_and_the_window_it_states(
    message: str, figures: tuple[int | None, int | None]
) -> None:
    assert context_error_figures(message) == figures


def test_a_mapped_context_error_carries_its_figures() -> None:
    error = ContextLengthExceeded("x", tokens=7180, limit=8192)
    assert (error.tokens, error.limit) == (7180, 8192)
    assert ContextLengthExceeded("x").tokens is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("250ms", 0.25), ("1h2m3.5s", 3723.5), ("20", 20.0)],
)
def test_durations_of_rate_limit_resets_are_read(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "s1", None])
def test_what_is_not_a_duration_is_none(text: str | None) -> None:
    assert parse_duration(text) is None


def test_the_longest_wait_any_header_asks_for_wins_and_is_capped() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert requested_wait({"retry-after": "2"}) == 2.0
    assert requested_wait({"retry-after": later}, now=now.timestamp()) == pytest.approx(30)
    assert requested_wait({"retry-after-ms": "1500"}) == 1.5
    assert requested_wait({"llm_provider-retry-after": "7"}) == 7.0
    both = {"retry-after": "2", "x-ratelimit-reset-tokens": "6m0s"}
    assert requested_wait(both) == 360.0
    assert requested_wait(both, cap=60) == 60
    assert requested_wait({"content-type": "application/json"}) is None


def test_a_rate_limit_reset_counts_only_for_a_limit_that_is_used_up() -> None:
    headers = {
        "x-ratelimit-remaining-requests": "12",
        "x-ratelimit-reset-requests": "40s",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "250ms",
    }
    assert requested_wait(headers) == 0.25
    proxied = {f"llm_provider-{k}": v for k, v in headers.items()}
    assert requested_wait(proxied) == 0.25
