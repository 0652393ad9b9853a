"""Provider-native compaction end to end, over real HTTP against the fake server's
``/responses/compact``: the same scripted session compacted locally and by the provider keeps
the same invariants (no orphan calls, protected state in every request, replay equals the live
history), the provider's item goes back verbatim, and an endpoint without it falls back to
local compaction, said once."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage import HistoryCompacted, Runtime, replay
from stowage.core import CompactionRecord, ErrorRecord, HistoryEntry, Record
from stowage.model._openai_gateway import OpenAIGateway
from stowage.storage import JsonlStore
from stowage.testing import FakeOpenAIServer, orphan_calls, orphan_outputs
from structlog.testing import capture_logs

# the brain, tools and settings of the session tests, shared without a conftest
_spec = importlib.util.spec_from_file_location(
    "policy_session_helpers", Path(__file__).with_name("test_policy_session.py")
)
assert _spec is not None and _spec.loader is not None
helpers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("policy_session_helpers", helpers)
_spec.loader.exec_module(helpers)

CONSTRAINT = "never delete the fixtures directory (checked by ci-guard 41)"
TURNS = 8


@dataclass
class Run:
    records: list[Record]
    bodies: list[dict[str, Any]]
    answers: list[str]
    compacted: list[HistoryCompacted]
    live: list[HistoryEntry]


def strings(value: Any) -> list[str]:
    """Every string in a JSON request body."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


async def run_session(tmp_path: Path, *, compact_endpoint: bool = True, **changes: Any) -> Run:
    """TURNS turns of the agent brain (three big tool outputs a turn) on the responses wire."""
    compacted: list[HistoryCompacted] = []
    answers: list[str] = []
    async with FakeOpenAIServer(
        brain=helpers.agent_brain(), compact_endpoint=compact_endpoint
    ) as server:
        gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="responses")
        config = helpers.settings(tmp_path, wire_api="responses", **changes)
        async with Runtime(config, gateway=gateway, tools=helpers.big_tools(1000)) as rt:
            rt.subscribe(lambda e: compacted.append(e) if isinstance(e, HistoryCompacted) else None)
            session = await rt.create("s1", system="sys", constraints=[CONSTRAINT])
            for n in range(TURNS):
                answers.append((await session.send(f"task {n}: " + "details " * 150)).text)
            live = list(session.state.history)
        bodies = list(server.requests)
    store = JsonlStore(tmp_path)
    try:
        records = list((await store.read("s1")).records)
        tail = (await store.read_tail("s1")).records
    finally:
        await store.aclose()
    # invariant 4: replay of the log (whole, and from the newest compaction) is the live history
    assert replay("s1", records).history == live
    assert replay("s1", tail).history == live
    return Run(records, bodies, answers, compacted, live)


def rounds(run: Run) -> list[dict[str, Any]]:
    """The round requests (they carry the tools; summary and compact requests do not all)."""
    return [b for b in run.bodies if b.get("tools") and b.get("tool_choice") != "none"]


def assert_invariants(run: Run) -> None:
    """No request carries a call without its output (or the reverse), protected state is in
    every request, every turn was answered."""
    assert run.answers == ["done"] * TURNS
    assert run.compacted, "the session never compacted"
    for body in run.bodies:
        assert orphan_calls(body) == [] and orphan_outputs(body) == [], body
        assert any(CONSTRAINT in text for text in strings(body)), body


def compactions(run: Run) -> list[CompactionRecord]:
    return [r for r in run.records if isinstance(r, CompactionRecord)]


def unavailable(run: Run) -> list[ErrorRecord]:
    return [
        r
        for r in run.records
        if isinstance(r, ErrorRecord) and r.kind == "provider_compaction_unavailable"
    ]


async def test_a_provider_compaction_is_recorded_and_its_item_goes_back_verbatim(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        run = await run_session(tmp_path, compaction="provider")
    assert_invariants(run)
    records = compactions(run)
    assert records and all(r.provider_item is not None for r in records)
    compact_calls = [b for b in run.bodies if "tools" not in b and "tool_choice" not in b]
    assert len(compact_calls) >= len(records)
    for record in records:
        assert record.provider_item is not None
        assert record.provider_item["type"] == "compaction"
        assert "provider compaction" in record.reason
        assert record.tokens_before is not None and record.tokens_after is not None
        assert record.tokens_after < record.tokens_before
        assert "compacted by the provider" in record.summary
        # the item is in a later round request exactly as the endpoint returned it, with the
        # protected state beside it
        later = [
            b
            for b in rounds(run)
            if record.provider_item in b["input"]
            and any(CONSTRAINT in text for text in strings(b["input"]))
        ]
        assert later, record.seq
    # what the endpoint got to compact included the earlier compaction item: they chain
    if len(records) > 1:
        assert any(records[0].provider_item in b["input"] for b in compact_calls)
    assert unavailable(run) == []
    # the events say what the records say
    assert [e.reason for e in run.compacted] == [r.reason for r in records]


async def test_local_and_provider_compaction_keep_the_same_invariants(tmp_path: Path) -> None:
    with anyio.fail_after(90):
        local = await run_session(tmp_path / "local", compaction="local")
        provider = await run_session(tmp_path / "provider", compaction="auto")
    for run in (local, provider):
        assert_invariants(run)
    assert all(r.provider_item is None for r in compactions(local))
    assert all(r.provider_item is not None for r in compactions(provider))
    # both compact at the same points: the decision is the policy's, not the strategy's
    assert [r.covers_through for r in compactions(local)][:1] == [
        r.covers_through for r in compactions(provider)
    ][:1]
    # and keep the same entries verbatim: stowage's choice, whoever writes the summary
    first_local, first_provider = compactions(local)[0], compactions(provider)[0]
    assert [e.seq for e in first_local.retained] == [e.seq for e in first_provider.retained]


@pytest.mark.parametrize("strategy", ["auto", "provider"])
async def test_an_endpoint_without_compaction_falls_back_to_local_and_says_so_once(
    tmp_path: Path, strategy: str
) -> None:
    with anyio.fail_after(60), capture_logs() as logs:
        run = await run_session(tmp_path, compact_endpoint=False, compaction=strategy)
    assert_invariants(run)
    records = compactions(run)
    assert len(records) >= 2
    assert all(r.provider_item is None for r in records)
    assert "provider compaction unavailable" in records[0].reason
    (notice,) = unavailable(run)
    assert "404" in notice.message and "locally" in notice.message
    assert notice.seq < records[0].seq
    assert ("compaction is 'provider'" in notice.message) == (strategy == "provider")
    warnings = [e for e in logs if e["event"] == "provider_compaction_unavailable"]
    assert len(warnings) == 1
    # the endpoint was asked once; every later compaction went straight to a summary request
    asked = [b for b in run.bodies if "tools" not in b and "tool_choice" not in b]
    assert len(asked) == 1


async def test_a_resumed_session_sends_the_provider_item_it_replayed_from_the_log(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer(brain=helpers.agent_brain()) as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="responses")
            config = helpers.settings(tmp_path, wire_api="responses", compaction="provider")
            tools = helpers.big_tools(1000)
            async with Runtime(config, gateway=gateway, tools=tools) as rt:
                session = await rt.create("s1", system="sys", constraints=[CONSTRAINT])
                for n in range(4):
                    await session.send(f"task {n}: " + "details " * 150)
            store = JsonlStore(tmp_path)
            try:
                records = list((await store.read("s1")).records)
            finally:
                await store.aclose()
            newest = [r for r in records if isinstance(r, CompactionRecord)][-1]
            assert newest.provider_item is not None
            sent = len(server.requests)
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="responses")
            async with Runtime(config, gateway=gateway, tools=tools) as rt:
                session = await rt.resume("s1")
                assert (await session.send("one more")).text == "done"
            first = server.requests[sent]
    assert newest.provider_item in first["input"]
    assert any(CONSTRAINT in text for text in strings(first["input"]))
