"""The OpenAI gateway: pure wire mapping, and the gateway against the fake server over HTTP,
sending through aiohttp and through the openai SDK's public API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import anyio
import httpx
import openai
import pytest
from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    ConfigError,
    ContextLengthExceeded,
    FunctionCall,
    FunctionCallOutput,
    ModelAuthError,
    ModelConnectionError,
    ModelError,
    ModelRequest,
    ModelResponseError,
    RateLimitError,
    ResponseDone,
    Settings,
    SystemMessage,
    TextDelta,
    ToolSpec,
    Usage,
    UserMessage,
)
from stowage.model import PURPOSE_HEADER, ScriptedBrain, ScriptedModel, make_gateway
from stowage.model._openai_gateway import (
    OpenAIGateway,
    chat_body,
    chat_messages,
    choose_http_client,
    parse_retry_after,
    responses_body,
    responses_input,
)
from stowage.model._openai_sdk import PlainEvents, map_openai_error
from stowage.model._openai_wire import (
    ChatStreamAccumulator,
    ResponsesStreamAccumulator,
    is_context_length_error,
)
from stowage.testing import FakeOpenAIServer, Fault
from stowage.testing._fake_wire import request_from_chat, request_from_responses

WireApi = Literal["chat", "responses"]
TOOLS = (
    ToolSpec(name="list_dir", description="List a directory.", parameters={"type": "object"}),
    ToolSpec(name="read_file", description="Read a file.", parameters={"type": "object"}),
)
ITEMS = (
    SystemMessage(text="be brief"),
    UserMessage(text="what is in the repo?"),
    AssistantMessage(text="let me look"),
    FunctionCall(call_id="c1", name="list_dir", arguments='{"path": "."}'),
    FunctionCall(call_id="c2", name="read_file", arguments='{"path": "a.py"}'),
    FunctionCallOutput(call_id="c1", output="a.py"),
    FunctionCallOutput(call_id="c2", output="print(1)", is_error=False),
    CompactionSummary(text="earlier we did X"),
)


@pytest.fixture(params=["chat", "responses"])
def gw_wire_api(request: pytest.FixtureRequest) -> WireApi:
    api: WireApi = request.param
    return api


#: how a gateway sends: its ``http_client`` argument
Sending = dict[str, str]


@pytest.fixture(
    params=[
        pytest.param({"http_client": "aiohttp"}, id="aiohttp"),
        pytest.param({"http_client": "sdk"}, id="sdk"),
    ]
)
def gw_fast(request: pytest.FixtureRequest) -> Sending:
    """aiohttp, or the openai SDK's public API."""
    sending: Sending = request.param
    return sending


@asynccontextmanager
async def _serving(
    wire_api: WireApi, *, http_client: str | None = None
) -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIGateway]]:
    # Not a fixture: the server's task group must be entered and left by the test's own task.
    async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=1)) as server:
        gateway = OpenAIGateway(
            base_url=server.base_url, api_key="sk-test", wire_api=wire_api, http_client=http_client
        )
        assert http_client is None or gateway.http_client == http_client
        try:
            yield server, gateway
        finally:
            await gateway.aclose()


def _request(*items: object, tools: tuple[ToolSpec, ...] = TOOLS, **kw: object) -> ModelRequest:
    base = (SystemMessage(text="be brief"), UserMessage(text="list the repo"))
    return ModelRequest(model="m", input=base + tuple(items), tools=tools, **kw)  # type: ignore[arg-type]


# --- pure mapping -------------------------------------------------------------------------


def test_chat_messages_maps_every_item_and_groups_consecutive_calls_with_preceding_text() -> None:
    assert chat_messages(ITEMS) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is in the repo?"},
        {
            "role": "assistant",
            "content": "let me look",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "list_dir", "arguments": '{"path": "."}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "c2", "content": "print(1)"},
        {"role": "user", "content": "Summary of the conversation so far:\nearlier we did X"},
    ]


def test_chat_messages_starts_a_new_assistant_message_for_calls_after_a_tool_output() -> None:
    items = (
        FunctionCall(call_id="a", name="x", arguments="{}"),
        FunctionCallOutput(call_id="a", output="1"),
        FunctionCall(call_id="b", name="x", arguments="{}"),
    )
    messages = chat_messages(items)
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
    assert messages[0]["content"] is None
    assert [len(m.get("tool_calls", [])) for m in messages] == [1, 0, 1]


def test_responses_input_maps_every_item_type() -> None:
    assert responses_input(ITEMS) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is in the repo?"},
        {"role": "assistant", "content": "let me look"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "list_dir",
            "arguments": '{"path": "."}',
        },
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "read_file",
            "arguments": '{"path": "a.py"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        {"type": "function_call_output", "call_id": "c2", "output": "print(1)"},
        {"role": "user", "content": "Summary of the conversation so far:\nearlier we did X"},
    ]


def test_bodies_carry_tools_and_max_tokens_and_omit_tool_choice_without_tools() -> None:
    with_tools = _request(max_output_tokens=50)
    chat = chat_body(with_tools, stream=True)
    assert chat["tools"][0] == {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a directory.",
            "parameters": {"type": "object"},
        },
    }
    assert chat["tool_choice"] == "auto" and chat["max_tokens"] == 50
    assert chat["stream_options"] == {"include_usage": True}
    responses = responses_body(with_tools, stream=False)
    assert responses["tools"][0]["name"] == "list_dir" and responses["max_output_tokens"] == 50
    assert "stream" not in responses
    summary = _request(tools=(), tool_choice="none", purpose="summary")
    for body in (chat_body(summary, stream=False), responses_body(summary, stream=True)):
        assert "tools" not in body and "tool_choice" not in body


def test_fake_server_inverts_the_gateway_mapping_on_both_wire_apis() -> None:
    request = ModelRequest(model="m", input=ITEMS, tools=TOOLS)
    assert request_from_chat(chat_body(request, stream=False)).input == ITEMS
    assert request_from_responses(responses_body(request, stream=False)).input == ITEMS


def test_parse_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after(later, now=now.timestamp()) == pytest.approx(30)
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None


def test_gateway_without_any_api_key_raises_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="--api-key"):
        OpenAIGateway(base_url=None, api_key=None, wire_api="chat")


def test_make_gateway_gives_the_scripted_model_for_model_scripted() -> None:
    assert isinstance(make_gateway(Settings(model="scripted")), ScriptedModel)


# --- over HTTP with the real SDK ----------------------------------------------------------


async def test_stream_text_deltas_join_to_the_final_text(
    gw_wire_api: WireApi, gw_fast: Sending
) -> None:
    with anyio.fail_after(15):
        async with _serving(gw_wire_api, **gw_fast) as (server, gateway):
            # events that arrive together are read together: these arrive one at a time
            server.inject(Fault.drip(interval=0.01))
            # no tools: the brain answers at once (the purpose header says "round")
            events = [e async for e in gateway.stream(_request(tools=()))]
        deltas = [e.text for e in events if isinstance(e, TextDelta)]
        done = [e for e in events if isinstance(e, ResponseDone)]
        assert len(done) == 1 and events[-1] is done[0]
        assert len(deltas) > 1
        assert "".join(deltas) == done[0].response.text != ""


async def test_tool_calls_round_trip_streaming_and_not(
    gw_wire_api: WireApi, gw_fast: Sending
) -> None:
    with anyio.fail_after(15):
        request = _request()
        expected = ScriptedBrain(tool_rounds=1)(request)
        async with _serving(gw_wire_api, **gw_fast) as (_, gateway):
            created = await gateway.create(request)
            streamed = [e async for e in gateway.stream(request)][-1]
        assert isinstance(streamed, ResponseDone)
        for response in (created, streamed.response):
            assert response.calls == expected.calls
            assert response.calls[0].name == "list_dir"
            assert response.calls[0].call_id.startswith("call_0_0_")
            assert json.loads(response.calls[0].arguments) == {"path": "."}


async def test_usage_and_answer_text_are_parsed_streaming_and_not(
    gw_wire_api: WireApi, gw_fast: Sending
) -> None:
    with anyio.fail_after(15):
        request = _request(
            FunctionCall(call_id="c", name="list_dir", arguments="{}"),
            FunctionCallOutput(call_id="c", output="a.py"),
        )
        expected = ScriptedBrain(tool_rounds=1)(request)
        assert isinstance(expected.usage, Usage)
        async with _serving(gw_wire_api, **gw_fast) as (_, gateway):
            created = await gateway.create(request)
            streamed = [e async for e in gateway.stream(request)][-1]
        assert isinstance(streamed, ResponseDone)
        assert created.usage == streamed.response.usage == expected.usage
        assert created.text == streamed.response.text == expected.text
        assert not created.calls


async def test_summary_request_on_the_wire_has_no_tools_and_no_tool_choice(
    gw_wire_api: WireApi, gw_fast: Sending
) -> None:
    with anyio.fail_after(15):
        async with _serving(gw_wire_api, **gw_fast) as (server, gateway):
            summary = _request(tools=(), tool_choice="none", purpose="summary")
            response = await gateway.create(summary)
            body = server.requests[-1]
        assert "tools" not in body and "tool_choice" not in body
        assert response.text.startswith("Summary of the session so far.")


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.rate_limit(retry_after=7), RateLimitError),
        (Fault.server_error(500), ModelConnectionError),
        (Fault.server_error(503), ModelConnectionError),
        (Fault.context_length(), ContextLengthExceeded),
        (Fault.auth(), ModelAuthError),
        (Fault.garbage(), ModelResponseError),
    ],
    ids=["429", "500", "503", "context_length", "401", "garbage"],
)
@pytest.mark.parametrize("streaming", [False, True], ids=["create", "stream"])
async def test_injected_faults_map_to_model_errors(
    gw_wire_api: WireApi, gw_fast: Sending, fault: Fault, error: type[ModelError], streaming: bool
) -> None:
    with anyio.fail_after(15):
        async with _serving(gw_wire_api, **gw_fast) as (server, gateway):
            server.inject(fault)
            with pytest.raises(error) as caught:
                if streaming:
                    [e async for e in gateway.stream(_request())]
                else:
                    await gateway.create(_request())
            # the fault was used up: the next call succeeds
            assert (await gateway.create(_request())).calls
        if isinstance(caught.value, RateLimitError):
            assert caught.value.retry_after == 7
        assert caught.value.__cause__ is not None


async def test_unreachable_endpoint_raises_model_connection_error(
    gw_wire_api: WireApi, gw_fast: Sending
) -> None:
    with anyio.fail_after(15):
        gateway = OpenAIGateway(
            base_url="http://127.0.0.1:9/v1",
            api_key="k",
            wire_api=gw_wire_api,
            **gw_fast,
        )
        try:
            with pytest.raises(ModelConnectionError):
                await gateway.create(_request())
            with pytest.raises(ModelConnectionError):
                [e async for e in gateway.stream(_request())]
        finally:
            await gateway.aclose()


async def test_a_fault_can_target_summaries_only(gw_wire_api: WireApi, gw_fast: Sending) -> None:
    with anyio.fail_after(15):
        async with _serving(gw_wire_api, **gw_fast) as (server, gateway):
            server.inject(Fault.server_error(), when="summary")
            assert (await gateway.create(_request())).calls
            with pytest.raises(ModelConnectionError):
                await gateway.create(_request(tools=(), purpose="summary"))


async def test_the_gateway_sends_once_and_leaves_retries_to_its_caller(gw_fast: Sending) -> None:
    with anyio.fail_after(15):
        async with _serving("chat", **gw_fast) as (server, gateway):
            server.inject(Fault.rate_limit(retry_after=0))
            with pytest.raises(RateLimitError):
                await gateway.create(_request())
            assert len(server.requests) == 1  # the SDK did not retry behind the caller's back
            response = await gateway.create(_request())
        assert response.calls and len(server.requests) == 2


def test_responses_stream_error_event_maps_to_context_length_exceeded() -> None:
    accumulator = ResponsesStreamAccumulator()
    assert accumulator.feed({"type": "response.output_text.delta", "delta": "hi"}) == "hi"
    event = {
        "type": "response.failed",
        "response": {"error": {"code": "context_length_exceeded", "message": "too long"}},
    }
    with pytest.raises(ContextLengthExceeded):
        accumulator.feed(event)
    with pytest.raises(ModelResponseError, match="before response"):
        ResponsesStreamAccumulator().finish()


def test_chat_stream_accumulates_tool_call_deltas_by_index() -> None:
    accumulator = ChatStreamAccumulator()
    chunks = [
        {"choices": [{"delta": {"content": "ok "}}]},
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "y"}}]}}
            ]
        },
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "x"}}]}}
            ]
        },
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"p"'}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
    ]
    assert [accumulator.feed(c) for c in chunks] == ["ok ", "", "", "", "", "", ""]
    response = accumulator.finish()
    assert response.text == "ok "
    assert response.calls == (
        FunctionCall(call_id="a", name="x", arguments='{"p": 1}'),
        FunctionCall(call_id="b", name="y", arguments=""),
    )
    assert response.usage == Usage(input_tokens=3, output_tokens=2, total_tokens=5)
    with pytest.raises(ModelResponseError):
        ChatStreamAccumulator().finish()


async def test_faults_can_be_injected_over_http_and_requests_are_recorded(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(15):
        record = tmp_path / "requests.jsonl"
        async with FakeOpenAIServer(record=record) as server:
            root = server.base_url.removesuffix("/v1")
            async with httpx.AsyncClient(base_url=root) as http:
                fault = {"fault": "context_length", "when": "round", "times": 1}
                assert (await http.post("/_fake/faults", json=fault)).json()["pending"] == 1
                body = chat_body(_request(), stream=False)
                failed = await http.post("/v1/chat/completions", json=body)
                answered = await http.post("/v1/chat/completions", json=body)
                recorded = (await http.get("/_fake/requests")).json()
        assert failed.status_code == 400
        assert failed.json()["error"]["code"] == "context_length_exceeded"
        assert answered.status_code == 200
        assert recorded == [body, body]
        lines = [json.loads(line) for line in record.read_text().splitlines()]
        assert [line["body"] for line in lines] == [body, body]


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        ("context_length_exceeded", "", True),
        (None, "This model's maximum context length is 4096 tokens. However, you asked 5000", True),
        (None, "Input exceeds the context window of this model", True),
        (None, "invalid tool schema", False),
    ],
)
def test_context_length_errors_are_recognised_by_code_or_message(
    code: str | None, message: str, expected: bool
) -> None:
    assert is_context_length_error(code, message) is expected


# --- the HTTP client: aiohttp by default, the SDK's public API when asked ----------------


@pytest.mark.parametrize(
    ("given", "environ", "chosen"),
    [
        (None, {}, "aiohttp"),
        (None, {"STOWAGE_HTTP_CLIENT": "sdk"}, "sdk"),
        (None, {"STOWAGE_HTTP_CLIENT": " SDK "}, "sdk"),
        (None, {"STOWAGE_HTTP_CLIENT": "lean"}, "aiohttp"),  # the name before aiohttp
        (None, {"STOWAGE_HTTP_CLIENT": "aiohttp"}, "aiohttp"),
        ("aiohttp", {"STOWAGE_HTTP_CLIENT": "sdk"}, "aiohttp"),  # the setting wins
        ("sdk", {}, "sdk"),
    ],
)
def test_the_http_client_is_the_setting_else_the_environment_else_aiohttp(
    given: str | None, environ: dict[str, str], chosen: str
) -> None:
    assert choose_http_client(given, environ) == chosen


def test_an_unknown_http_client_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="http_client must be 'aiohttp' or 'sdk', got 'curl'"):
        OpenAIGateway(base_url="http://h/v1", api_key="k", wire_api="chat", http_client="curl")
    with pytest.raises(ConfigError, match="http_client must be 'aiohttp' or 'sdk'"):
        Settings(model="m", http_client="curl")  # type: ignore[arg-type]
    monkeypatch.setenv("STOWAGE_HTTP_CLIENT", "curl")
    with pytest.raises(
        ConfigError, match="STOWAGE_HTTP_CLIENT must be 'aiohttp' or 'sdk', got 'curl'"
    ):
        OpenAIGateway(base_url="http://h/v1", api_key="k", wire_api="chat")
    monkeypatch.setenv("STOWAGE_HTTP_CLIENT", "sdk")
    gateway = make_gateway(Settings(model="m", base_url="http://h/v1", api_key="k"))
    assert isinstance(gateway, OpenAIGateway) and gateway.http_client == "sdk"
    gateway = make_gateway(
        Settings(model="m", base_url="http://h/v1", api_key="k", http_client="aiohttp")
    )
    assert isinstance(gateway, OpenAIGateway) and gateway.http_client == "aiohttp"


def test_an_endpoint_that_is_not_http_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be an http"):
        OpenAIGateway(base_url="ftp://user:pw@h/v1", api_key="k", wire_api="chat")


async def test_aiohttp_sends_the_key_the_purpose_and_the_account_headers(
    gw_wire_api: WireApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_1")
    with anyio.fail_after(15):
        async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=1)) as server:
            server.api_key = "sk-secret"
            gateway = OpenAIGateway(base_url=server.base_url, api_key="sk-secret",
                                    wire_api=gw_wire_api)  # fmt: skip
            assert gateway.http_client == "aiohttp"
            try:
                await gateway.create(_request())
                [e async for e in gateway.stream(_request(purpose="summary"))]
            finally:
                await gateway.aclose()
            wrong = OpenAIGateway(base_url=server.base_url, api_key="sk-wrong",
                                  wire_api=gw_wire_api)  # fmt: skip
            try:
                with pytest.raises(ModelAuthError, match="HTTP 401") as caught:
                    await wrong.create(_request())
            finally:
                await wrong.aclose()
        first, second = server.request_headers[:2]
        assert first["user-agent"].startswith("stowage/")
        assert first[PURPOSE_HEADER.lower()] == "round"
        assert second[PURPOSE_HEADER.lower()] == "summary"
        assert first["content-type"] == "application/json"
        assert first["openai-project"] == "proj_1"
        assert "gzip" in first["accept-encoding"]
        # the error carries the endpoint's words, worded as the SDK words them
        assert "Error code: 401" in str(caught.value) and "Incorrect API key" in str(caught.value)


async def test_credentials_in_the_url_go_as_basic_auth_and_never_into_messages() -> None:
    with anyio.fail_after(15):
        async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=1)) as server:
            url = server.base_url.replace("http://", "http://user:pa%40ss@")
            gateway = OpenAIGateway(base_url=url, api_key="k", wire_api="chat")
            try:
                assert "pa%40ss" not in gateway.url and "REDACTED@" in gateway.url
                assert (await gateway.create(_request())).calls
                server.inject(Fault.server_error(500))
                with pytest.raises(ModelConnectionError) as caught:
                    await gateway.create(_request())
            finally:
                await gateway.aclose()
    assert "pa%40ss" not in str(caught.value) and "REDACTED@127.0.0.1" in str(caught.value)


async def test_the_sdk_path_calls_the_public_api_with_the_same_answers() -> None:
    request = _request()
    expected = ScriptedBrain(tool_rounds=1)(request)
    with anyio.fail_after(15):
        for wire_api in ("chat", "responses"):
            async with _serving(wire_api, http_client="sdk") as (server, gateway):
                created = await gateway.create(request)
                streamed = [e async for e in gateway.stream(request)][-1]
            assert isinstance(streamed, ResponseDone)
            assert created == streamed.response == expected
            assert server.request_headers[0]["user-agent"].startswith("AsyncOpenAI/Python")


@pytest.mark.parametrize("streaming", [False, True], ids=["create", "stream"])
async def test_both_paths_put_the_same_body_on_the_wire(
    gw_wire_api: WireApi, streaming: bool
) -> None:
    request = _request(
        FunctionCall(call_id="c", name="list_dir", arguments="{}"),
        FunctionCallOutput(call_id="c", output="a.py"),
        max_output_tokens=64,
    )
    bodies = []
    with anyio.fail_after(15):
        for http_client in ("aiohttp", "sdk"):
            async with _serving(gw_wire_api, http_client=http_client) as (server, gateway):
                if streaming:
                    [e async for e in gateway.stream(request)]
                else:
                    await gateway.create(request)
                bodies.append(server.requests[-1])
    assert bodies[0] == bodies[1]


async def test_body_fields_the_public_create_does_not_take_go_as_extra_body(
    gw_wire_api: WireApi,
) -> None:
    with anyio.fail_after(15):
        async with _serving(gw_wire_api, http_client="sdk") as (server, gateway):
            sdk: Any = gateway._sdk
            assert sdk is not None and sdk.parameters is not None
            limit = "max_tokens" if gw_wire_api == "chat" else "max_output_tokens"
            sdk.parameters -= {limit}
            await gateway.create(_request(max_output_tokens=32))
            assert server.requests[-1][limit] == 32


async def test_a_broken_public_stream_is_a_connection_error() -> None:
    class Broken:
        response = SimpleNamespace(request=httpx.Request("POST", "http://x/v1/responses"))
        closed = False

        def __aiter__(self) -> Broken:
            return self

        async def __anext__(self) -> object:
            raise OSError("connection reset")

        async def close(self) -> None:
            self.closed = True

    broken = Broken()
    async with PlainEvents(broken) as events:
        with pytest.raises(openai.APIConnectionError) as caught:
            await events.next_events()
    assert broken.closed
    assert isinstance(map_openai_error(caught.value), ModelConnectionError)
