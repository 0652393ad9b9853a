"""Summaries and rounds that fail, against the fake OpenAI server through the real openai client."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import anyio
from stowage import CompactionFailed, Event, HistoryCompacted, Runtime, replay
from stowage.model._openai_gateway import OpenAIGateway
from stowage.storage import JsonlStore
from stowage.testing import FakeOpenAIServer, Fault

# the brain, tools and settings of the session tests, shared without a conftest
_spec = importlib.util.spec_from_file_location(
    "policy_session_helpers", Path(__file__).with_name("test_policy_session.py")
)
assert _spec is not None and _spec.loader is not None
helpers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("policy_session_helpers", helpers)
_spec.loader.exec_module(helpers)

TURNS = 8


async def run_session(
    tmp_path: Path, faults: list[tuple[Fault, str, int]], turns: int = TURNS, **changes: object
) -> tuple[list[Event], list[dict[str, object]], list[str]]:
    """Run TURNS turns against a fake server with ``faults``; returns the events, the request
    bodies the server saw, and the answers. Checks that replay equals the live history."""
    events: list[Event] = []
    answers: list[str] = []
    async with FakeOpenAIServer(brain=helpers.agent_brain()) as server:
        for fault, when, times in faults:
            server.inject(fault, when=when, times=times)  # type: ignore[arg-type]
        gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="chat")
        config = helpers.settings(tmp_path, max_retries=1, **changes)
        async with Runtime(config, gateway=gateway, tools=helpers.big_tools(1000)) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", system="sys")
            for n in range(turns):
                answers.append((await session.send(f"task {n}: " + "details " * 150)).text)
            live = list(session.state.history)
        bodies = list(server.requests)
    store = JsonlStore(tmp_path)
    try:
        assert replay("s1", (await store.read("s1")).records).history == live
        assert replay("s1", (await store.read_tail("s1")).records).history == live
    finally:
        await store.aclose()
    return events, bodies, answers


def summaries(bodies: list[dict[str, object]]) -> int:
    return sum(1 for b in bodies if b.get("tool_choice") == "none")


async def test_a_transient_summary_error_is_retried_and_the_compaction_is_full(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        events, bodies, answers = await run_session(
            tmp_path, [(Fault.server_error(), "summary", 1)]
        )
        compacted = [e for e in events if isinstance(e, HistoryCompacted)]
        assert answers == ["done"] * TURNS
        assert compacted and compacted[0].kind == "full"
        sent = [b for b in bodies if b.get("tool_choice") == "none"]
        # the first summary request was sent twice (the retry), the same body both times; a
        # plan asked for later may still be in flight when the session ends
        assert len(sent) >= len([c for c in compacted if c.kind == "full"]) + 1
        assert sent[0]["messages"] == sent[1]["messages"]
        assert not [e for e in events if isinstance(e, CompactionFailed)]


async def test_an_overflowing_summary_request_drops_oldest_rounds_and_says_how_many(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        events, bodies, answers = await run_session(
            tmp_path, [(Fault.context_length(), "summary", 1)]
        )
        compacted = [e for e in events if isinstance(e, HistoryCompacted)]
        failed = [e for e in events if isinstance(e, CompactionFailed)]
        assert answers == ["done"] * TURNS
        assert failed and "oldest" in failed[0].error and not failed[0].fallback
        assert compacted[0].kind == "full" and "oldest rounds dropped" in compacted[0].reason
        # the retried request carried less than the refused one
        first, second = [b for b in bodies if b.get("tool_choice") == "none"][:2]
        assert len(str(second["messages"])) < len(str(first["messages"]))


async def test_a_summarizer_that_is_down_opens_the_breaker_and_the_fallback_keeps_the_run_alive(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        events, bodies, answers = await run_session(
            tmp_path,
            [(Fault.garbage(), "summary", 1), (Fault.server_error(), "summary", 1000)],
            turns=16,
        )
        compacted = [e for e in events if isinstance(e, HistoryCompacted)]
        failed = [e for e in events if isinstance(e, CompactionFailed)]
        assert answers == ["done"] * 16  # the run never died
        assert compacted and all(e.kind == "fallback" for e in compacted)
        assert "mechanical digest" in compacted[0].summary and "big x" in compacted[0].summary
        assert [e.attempt for e in failed if e.fallback][-1] >= 3  # the breaker opened
        # once the breaker is open no summary request is sent any more
        assert summaries(bodies) <= 3 * 2  # at most 3 failed compactions x 2 attempts each


async def test_context_length_exceeded_on_a_round_compacts_and_retries_the_round_once(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer(brain=helpers.agent_brain()) as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="chat")
            events: list[Event] = []
            # a large window: only the provider's refusal can cause this compaction
            config = helpers.settings(tmp_path, context_window=100_000, max_output_tokens=1000)
            async with Runtime(config, gateway=gateway, tools=helpers.big_tools(1000)) as rt:
                rt.subscribe(events.append)
                session = await rt.create("s1", system="sys")
                await session.send("first task")
                server.inject(Fault.context_length(), when="round", times=1)
                sent_before = len(server.requests)
                assert (await session.send("second task")).text == "done"
                live = list(session.state.history)
            tail = server.requests[sent_before:]
        compacted = [e for e in events if isinstance(e, HistoryCompacted)]
        assert len(compacted) == 1 and "refused" in compacted[0].reason
        # refused round, the summary, then the same round once more (and the rest of the turn)
        assert [b.get("tool_choice") != "none" for b in tail[:3]] == [True, False, True]
        store = JsonlStore(tmp_path)
        try:
            assert replay("s1", (await store.read("s1")).records).history == live
        finally:
            await store.aclose()
