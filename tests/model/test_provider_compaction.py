"""Provider-native compaction at the model boundary: the wire carries the provider's item
verbatim, the gateway posts ``/responses/compact`` to the fake server over real HTTP (through
aiohttp and through the openai SDK), and the strategy is refused where the wire cannot carry
it."""

from __future__ import annotations

import base64
import json
from typing import Any

import anyio
import orjson
import pytest
from stowage.actors._provider_compaction import ProviderCompactions
from stowage.core import (
    CompactingGateway,
    CompactionRecord,
    CompactionSummary,
    ConfigError,
    FunctionCall,
    FunctionCallOutput,
    ModelGateway,
    ModelRequest,
    ModelResponseError,
    Settings,
    SystemMessage,
    UserMessage,
    item_from_dict,
    item_to_dict,
)
from stowage.model import ScriptedModel
from stowage.model._openai_gateway import OpenAIGateway
from stowage.model._openai_wire import (
    chat_messages,
    compact_body,
    parse_compaction,
    responses_input,
)
from stowage.storage import decode_record, encode_record
from stowage.testing import FakeOpenAIServer
from stowage.testing._fake_wire import request_from_responses

ITEM = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-opaque"}

HISTORY = (
    SystemMessage(text="be brief"),
    UserMessage(text="read notes.txt and fix the parser"),
    FunctionCall(call_id="c1", name="read_file", arguments='{"path": "notes.txt"}'),
    FunctionCallOutput(call_id="c1", output="the parser drops the last line"),
)


def test_the_responses_wire_sends_a_provider_summary_item_verbatim() -> None:
    summary = CompactionSummary(text="[history compacted by the provider]", provider=ITEM)
    sent = responses_input([SystemMessage(text="sys"), summary, UserMessage(text="go on")])
    assert sent[1] == ITEM
    assert sent[1] is not None and "content" not in sent[1]


def test_the_chat_wire_sends_a_provider_summary_as_its_readable_line() -> None:
    summary = CompactionSummary(text="[history compacted by the provider]", provider=ITEM)
    (message,) = chat_messages([summary])
    assert message["role"] == "user"
    assert message["content"].endswith("[history compacted by the provider]")


def test_a_summary_item_keeps_its_provider_item_through_its_dict() -> None:
    summary = CompactionSummary(text="line", provider=ITEM)
    assert item_to_dict(summary)["provider"] == ITEM
    assert item_from_dict(item_to_dict(summary)) == summary
    assert "provider" not in item_to_dict(CompactionSummary(text="line"))


def test_the_compact_body_is_model_and_input_with_the_cache_key() -> None:
    request = ModelRequest(model="m", input=HISTORY, cache_key="k1")
    body = compact_body(request)
    assert body == {"model": "m", "input": responses_input(HISTORY), "prompt_cache_key": "k1"}


def test_an_answer_without_a_compaction_item_is_a_response_error() -> None:
    data = {"object": "response.compaction", "output": [{"type": "message", "role": "user"}]}
    with pytest.raises(ModelResponseError, match=r"no 'compaction' item .*message"):
        parse_compaction(data, covered=3)


def test_the_last_compaction_item_is_taken_and_retained_messages_are_left_out() -> None:
    data = {
        "object": "response.compaction",
        "output": [
            {"type": "message", "role": "user", "content": "kept by the endpoint"},
            ITEM,
        ],
        "usage": {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150},
    }
    compaction = parse_compaction(data, covered=4)
    assert compaction.item == ITEM
    assert "4 items" in compaction.text
    assert compaction.usage is not None and compaction.usage.total_tokens == 150


def test_a_compaction_record_round_trips_and_writes_its_item_only_when_set() -> None:
    record = CompactionRecord(
        seq=9,
        ts="t",
        summary="[history compacted by the provider: 4 items]",
        covers_through=8,
        retained=(),
        reason="r; provider compaction",
        tokens_before=100,
        tokens_after=20,
        removed=4,
        round=2,
        provider_item=ITEM,
    )
    line = encode_record(record)
    assert orjson.loads(line)["provider_item"] == ITEM
    assert decode_record(line) == record
    local = CompactionRecord(**{**_fields(record), "provider_item": None})
    assert "provider_item" not in orjson.loads(encode_record(local))
    assert decode_record(encode_record(local)).provider_item is None


def _fields(record: CompactionRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def test_provider_compaction_on_the_chat_wire_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="compaction 'provider' needs wire_api 'responses'"):
        Settings(compaction="provider", wire_api="chat")
    # auto means local there, quietly; provider on the responses wire is fine
    assert Settings(compaction="auto", wire_api="chat").compaction == "auto"
    assert Settings(compaction="provider", wire_api="responses").compaction == "provider"


def test_only_gateways_with_an_endpoint_for_it_are_compacting_ones() -> None:
    gateway = OpenAIGateway(base_url="http://127.0.0.1:9/v1", api_key="k", wire_api="responses")
    assert isinstance(gateway, CompactingGateway) and isinstance(gateway, ModelGateway)
    assert isinstance(ScriptedModel(), ModelGateway)
    assert not isinstance(ScriptedModel(), CompactingGateway)


@pytest.mark.parametrize("http_client", ["aiohttp", "sdk"])
async def test_the_gateway_compacts_through_the_endpoint_and_its_item_reads_back(
    http_client: str,
) -> None:
    with anyio.fail_after(20):
        async with FakeOpenAIServer() as server:
            gateway = OpenAIGateway(
                base_url=server.base_url,
                api_key="k",
                wire_api="responses",
                http_client=http_client,
            )
            try:
                compaction = await gateway.compact(
                    ModelRequest(model="fake-model", input=HISTORY, purpose="summary")
                )
            finally:
                await gateway.aclose()
        (body,) = server.requests
        assert body["model"] == "fake-model"
        assert body["input"] == responses_input(HISTORY)
        assert compaction.item["type"] == "compaction" and compaction.item["id"]
        assert compaction.usage is not None and compaction.usage.input_tokens > 0
        assert "4 items" in compaction.text and "encrypted" in compaction.text
        digest = json.loads(base64.b64decode(compaction.item["encrypted_content"]))
        assert digest["users"] == ["read notes.txt and fix the parser"]
        # sent back in a later request, the fake server reads it as the summary it sealed
        later = request_from_responses({"model": "m", "input": [compaction.item]})
        (summary,) = later.input
        assert isinstance(summary, CompactionSummary)
        assert summary.text == digest["summary"] and summary.provider == compaction.item


@pytest.mark.parametrize("http_client", ["aiohttp", "sdk"])
async def test_an_endpoint_without_compaction_answers_404_mapped_to_a_response_error(
    http_client: str,
) -> None:
    with anyio.fail_after(20):
        async with FakeOpenAIServer(compact_endpoint=False) as server:
            gateway = OpenAIGateway(
                base_url=server.base_url,
                api_key="k",
                wire_api="responses",
                http_client=http_client,
            )
            try:
                with pytest.raises(ModelResponseError, match="HTTP 404") as caught:
                    await gateway.compact(ModelRequest(model="m", input=HISTORY))
            finally:
                await gateway.aclose()
        assert "/responses/compact" in str(caught.value)


async def test_the_chat_gateway_refuses_to_compact_without_sending() -> None:
    with anyio.fail_after(20):
        async with FakeOpenAIServer() as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="chat")
            try:
                with pytest.raises(ModelResponseError, match="needs the responses wire"):
                    await gateway.compact(ModelRequest(model="m", input=HISTORY))
            finally:
                await gateway.aclose()
        assert server.requests == []


def test_auto_means_local_on_the_chat_wire_and_a_failure_is_final() -> None:
    assert not ProviderCompactions.for_settings(Settings(compaction="auto")).wanted
    assert not ProviderCompactions.for_settings(Settings(wire_api="responses")).wanted
    kept = ProviderCompactions.for_settings(Settings(compaction="auto", wire_api="responses"))
    assert kept.wanted and kept.state == "untried"
    kept.worked()
    assert kept.wanted and kept.state == "working"
    notice = kept.failed("ModelResponseError: HTTP 404")
    assert not kept.wanted and kept.state == "unavailable"
    assert "HTTP 404" in notice and "for the rest of the session" in notice
