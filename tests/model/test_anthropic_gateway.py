"""The Anthropic gateway against the fake server's ``/v1/messages`` over loopback, through
aiohttp and through the anthropic SDK: whole sessions on ``stowage.Runtime``, the prompt
cache's reads and writes, overflow recovery, and retries on 529 and 429."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage import Runtime, Settings, TurnResult
from stowage.core import (
    CompactionRecord,
    ContextLengthExceeded,
    ErrorRecord,
    ModelConnectionError,
    ModelRequest,
    ModelRetrying,
    RateLimitError,
    ResponseDone,
    RoundCommittedRecord,
    SystemMessage,
    UserMessage,
)
from stowage.model import ScriptedBrain, make_gateway
from stowage.model._anthropic_gateway import AnthropicGateway
from stowage.storage import JsonlStore
from stowage.testing import FakeOpenAIServer, Fault

pytest.importorskip("anthropic")

CLIENTS = ("aiohttp", "sdk")


def _marks(body: dict[str, Any]) -> int:
    blocks = [*body.get("tools", []), *body.get("system", [])]
    for message in body["messages"]:
        blocks += message["content"]
    return sum("cache_control" in b for b in blocks)


async def _records(store: Path, session: str) -> list[Any]:
    disk = JsonlStore(store)
    try:
        return list((await disk.read(session)).records)
    finally:
        await disk.aclose()


def _settings(tmp_path: Path, server: FakeOpenAIServer, **changes: Any) -> Settings:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "README.md").write_text("a project that reads files\n" * 20)
    return Settings(
        model="claude-x",
        store=tmp_path / "store",
        workspace=tmp_path / "work",
        base_url=server.base_url,
        api_key="sk-ant-test",
        wire_api="anthropic",
        durability="none",
    ).with_(**changes)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
async def test_a_tool_using_session_runs_on_the_anthropic_wire_and_reads_the_cache(
    tmp_path: Path, client: str, stream: bool
) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer(
            brain=ScriptedBrain(tool_rounds=2), api_key="sk-ant-test"
        ) as server:
            settings = _settings(tmp_path, server, http_client=client, stream=stream)
            async with Runtime(settings) as rt:
                session = await rt.create("s1", system="You read files. " * 200)
                for n in range(3):
                    result = await session.send(f"turn {n}: look at the readme")
                    assert isinstance(result, TurnResult) and result.text.startswith("Answer to")
            bodies = list(server.requests)
            headers = list(server.request_headers)
        records = await _records(tmp_path / "store", "s1")
    assert bodies and all(_marks(b) <= 4 for b in bodies)
    assert all(b.get("stream", False) is stream for b in bodies)
    assert any(
        block["type"] == "tool_use" for b in bodies for m in b["messages"] for block in m["content"]
    )
    assert {h.get("anthropic-version") for h in headers} == {"2023-06-01"}
    assert all("x-api-key" not in h for h in headers)  # the fake keeps no credentials
    usages = [r.usage for r in records if isinstance(r, RoundCommittedRecord)]
    assert len(usages) >= 6 and all(u is not None for u in usages)
    first, second = usages[0], usages[1]
    assert first is not None and second is not None
    assert first.cached_tokens == 0 and first.cache_write_tokens > 0
    # the second request reads what the first wrote, and writes only its new tail
    assert second.cached_tokens >= first.cache_write_tokens
    assert second.cache_write_tokens < second.input_tokens - second.cached_tokens + 1
    assert all(u.input_tokens >= u.cached_tokens + u.cache_write_tokens for u in usages if u)
    assert server.cached_share("round") is not None and server.cached_share("round") > 0.5  # type: ignore[operator]


@pytest.mark.parametrize("client", CLIENTS)
async def test_make_gateway_picks_the_anthropic_gateway_and_the_key_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    settings = Settings(model="claude-x", wire_api="anthropic", http_client=client)
    gateway = make_gateway(settings)
    try:
        assert isinstance(gateway, AnthropicGateway)
        assert gateway.url == "https://api.anthropic.com/v1/messages"
    finally:
        await gateway.aclose()
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    from stowage.core import ConfigError

    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        make_gateway(settings)


async def test_an_overflow_is_recovered_by_compaction_and_the_turn_goes_on(tmp_path: Path) -> None:
    """The session believes a larger window than the endpoint has: the endpoint's "prompt is
    too long" comes back as ContextLengthExceeded with its figures, the session compacts and
    the round is sent again, fitting."""
    with anyio.fail_after(60):
        async with FakeOpenAIServer(
            brain=ScriptedBrain(tool_rounds=1), context_window=3_000
        ) as server:
            settings = _settings(tmp_path, server, context_window=20_000, max_output_tokens=300)
            (tmp_path / "work" / "README.md").write_text("a line of the readme file\n" * 100)
            async with Runtime(settings) as rt:
                session = await rt.create("s1", system="You read files.")
                results = [await session.send(f"turn {n}: read the readme") for n in range(6)]
            bodies = list(server.requests)
        records = await _records(tmp_path / "store", "s1")
    assert all(isinstance(r, TurnResult) for r in results), results
    errors = [r for r in records if isinstance(r, ErrorRecord)]
    assert [e.kind for e in errors][:1] == ["context_length_exceeded"]
    assert "3000" in errors[0].message
    assert any(isinstance(r, CompactionRecord) for r in records)
    assert all(_marks(b) <= 4 for b in bodies)


@pytest.mark.parametrize("client", CLIENTS)
async def test_529_and_429_are_retried_honouring_retry_after(tmp_path: Path, client: str) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer(brain=ScriptedBrain(tool_rounds=0)) as server:
            server.inject(Fault.server_error(529), when="round")
            server.inject(Fault.rate_limit(0.2), when="round")
            settings = _settings(tmp_path, server, http_client=client)
            waits: list[ModelRetrying] = []
            async with Runtime(settings) as rt:
                rt.subscribe(lambda e: waits.append(e) if isinstance(e, ModelRetrying) else None)
                session = await rt.create("s1")
                result = await session.send("hello")
            faults = dict(server.stats["faults"])
    assert isinstance(result, TurnResult)
    assert faults == {"server_error": 1, "rate_limit": 1}
    assert [w.rate_limited for w in waits] == [False, True]
    assert waits[1].delay >= 0.2


@pytest.mark.parametrize("client", CLIENTS)
async def test_gateway_errors_name_the_endpoint_and_carry_the_figures(client: str) -> None:
    request = ModelRequest(
        model="claude-x", input=(SystemMessage(text="s"), UserMessage(text="x" * 20_000))
    )
    with anyio.fail_after(30):
        async with FakeOpenAIServer(context_window=1000) as server:
            gateway = AnthropicGateway(base_url=server.base_url, api_key="k", http_client=client)
            try:
                with pytest.raises(ContextLengthExceeded) as overflow:
                    await gateway.create(request)
                server.context_window = None
                server.inject(Fault.rate_limit(3.0))
                with pytest.raises(RateLimitError) as limited:
                    async for _ in gateway.stream(request):
                        pass
                server.inject(Fault.server_error(529))
                with pytest.raises(ModelConnectionError, match="HTTP 529"):
                    await gateway.create(request)
                server.inject(Fault.answer("cut_stream"))
                with pytest.raises(Exception, match=r"stop_reason|cut|incomplete"):
                    async for _ in gateway.stream(request):
                        pass
                done = [e async for e in gateway.stream(request) if isinstance(e, ResponseDone)]
            finally:
                await gateway.aclose()
    assert overflow.value.tokens is not None and overflow.value.tokens > 1000
    assert overflow.value.limit == 1000
    assert "/v1/messages" in str(overflow.value)
    assert limited.value.retry_after == pytest.approx(3.0)
    assert len(done) == 1 and done[0].response.text


def test_the_command_line_takes_the_anthropic_key_and_endpoint_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from stowage.cli._main import build_parser, settings_from

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai.invalid/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://anthropic.invalid")
    argv = ["run", "--model", "claude-sonnet-4-5", "--wire-api"]
    claude = settings_from(build_parser().parse_args([*argv, "anthropic", "hi"]))
    assert (claude.api_key, claude.base_url) == ("sk-ant", "http://anthropic.invalid")
    openai = settings_from(build_parser().parse_args([*argv, "chat", "hi"]))
    assert (openai.api_key, openai.base_url) == ("sk-openai", "http://openai.invalid/v1")
