"""Killed mid-request and resumed, a session sends byte for byte the request it would have
sent without the kill, and its log rebuilds every request it recorded."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import anyio
import orjson
import pytest
from stowage import AssistantMessage, FunctionCall, ModelRequest, ModelResponse, UserMessage
from stowage.model._brain import is_summary_request, scripted_usage
from stowage.policy import check_requests
from stowage.storage import JsonlStore
from stowage.testing import FakeOpenAIServer

pytestmark = pytest.mark.slow

AGENT = Path(__file__).with_name("resume_agent.py")
TURNS = 6


def reader(request: ModelRequest) -> ModelResponse:
    """Decides from the request alone: three reads a turn, then an answer."""
    items: tuple[AssistantMessage | FunctionCall, ...]
    if is_summary_request(request):
        items = (AssistantMessage(text="SUMMARY: files were read"),)
    else:
        last = max(i for i, item in enumerate(request.input) if isinstance(item, UserMessage))
        calls = sum(isinstance(item, FunctionCall) for item in request.input[last:])
        if calls < 3:
            n = len(request.input) * 10 + calls
            items = (FunctionCall(call_id=f"r{n}", name="read", arguments=json.dumps({"n": n})),)
        else:
            items = (AssistantMessage(text="done"),)
    return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)


async def agent(url: str, store: Path, env: dict[str, str]) -> anyio.abc.Process:
    return await anyio.open_process(
        [sys.executable, str(AGENT), url, str(store), str(TURNS)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


async def in_flight(server: FakeOpenAIServer, count: int) -> None:
    """Until the server has received ``count`` requests (it answers each after its latency)."""
    while True:
        if len(server.requests) >= count:
            return
        await anyio.sleep(0.005)


async def run_to_end(url: str, store: Path, env: dict[str, str]) -> None:
    process = await agent(url, store, env)
    async with process:
        code = await process.wait()
        assert process.stderr is not None
        err = (await process.stderr.receive()).decode() if code else ""
    assert code == 0, err


async def test_after_a_kill_the_first_request_is_byte_identical_to_the_uninterrupted_one(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with anyio.fail_after(240):
        async with FakeOpenAIServer(brain=reader, latency=0.15) as server:
            url = server.base_url
            await run_to_end(url, tmp_path / "whole", cli_env)
            baseline = [orjson.dumps(b) for b in server.requests]
            rounds = [n for n, b in enumerate(server.requests) if b.get("tool_choice") != "none"]
            assert len(baseline) > 12 and len(rounds) < len(baseline)  # compactions happened
            for k in random.Random(7).sample(rounds[2:], 3):
                store = tmp_path / f"killed-{k}"
                start = len(server.requests)
                process = await agent(url, store, cli_env)
                async with process:
                    await in_flight(server, start + k + 1)
                    process.kill()
                    await process.wait()
                killed = [orjson.dumps(b) for b in server.requests[start:]]
                assert killed == baseline[: k + 1]
                start = len(server.requests)
                await run_to_end(url, store, cli_env)
                resumed = [orjson.dumps(b) for b in server.requests[start:]]
                assert resumed[0] == baseline[k], f"the first request after a kill at {k} differs"
                disk = JsonlStore(store)
                try:
                    report = check_requests("s1", (await disk.read("s1")).records)
                finally:
                    await disk.aclose()
                assert report.ok and report.checked > 0, report.problems
