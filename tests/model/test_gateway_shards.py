"""The OpenAI gateway spreads concurrent calls over small connection pools when the SDK's HTTP
client sends them (the lean HTTP client has one pool: tests/model/test_http1.py)."""

from __future__ import annotations

import anyio
from stowage import ModelRequest, SystemMessage, UserMessage
from stowage.core._gateway import ResponseDone
from stowage.model import _openai_gateway as gateway_module
from stowage.model._brain import ScriptedBrain
from stowage.model._openai_gateway import SHARD_CALLS, OpenAIGateway
from stowage.testing import FakeOpenAIServer


async def test_concurrent_calls_open_a_shard_per_shard_calls_in_flight_and_release_them() -> None:
    with anyio.fail_after(30):
        async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=0), latency=0.05) as server:
            gateway = OpenAIGateway(
                base_url=server.base_url, api_key="sk-test", wire_api="chat", lean_http=False
            )
            request = ModelRequest(
                model="m", input=(SystemMessage(text="s"), UserMessage(text="hi"))
            )
            answers: list[str] = []

            async def create() -> None:
                answers.append((await gateway.create(request)).text)

            async def stream() -> None:
                async for event in gateway.stream(request):
                    if isinstance(event, ResponseDone):
                        answers.append(event.response.text)

            try:
                async with anyio.create_task_group() as tg:
                    for n in range(2 * SHARD_CALLS + 4):
                        tg.start_soon(create if n % 2 else stream)
                assert len(answers) == 2 * SHARD_CALLS + 4
                assert len(gateway._shards) == 3
                assert gateway._in_flight == [0, 0, 0]
            finally:
                await gateway.aclose()


async def test_shards_share_the_first_clients_tls_context() -> None:
    # loading the CA store for each new pool costs ~20 ms of CPU: the shards reuse the first
    gateway = OpenAIGateway(
        base_url="https://example.invalid/v1", api_key="k", wire_api="chat", lean_http=False
    )
    try:
        for _ in range(SHARD_CALLS + 1):
            gateway._take_shard()
        assert len(gateway._shards) == 2
        first, second = (gateway_module._tls_context(client) for client in gateway._shards)
        assert first is not None and second is first
        assert gateway._shards[1].base_url == gateway._shards[0].base_url
    finally:
        await gateway.aclose()
