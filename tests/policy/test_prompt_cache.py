"""The prompt cache: the simulated prefix cache and its figures (pure), and a growing session
through the fake server: batched microcompaction breaks the prefix rarely, and background
compaction lands before the hard mark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import anyio
from stowage import CompactionLanded, Event, HistoryCompacted, Microcompacted, Runtime
from stowage.core import (
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    ModelRequest,
    SystemMessage,
    Usage,
    UserMessage,
)
from stowage.model._openai_gateway import OpenAIGateway
from stowage.policy import (
    PrefixCache,
    cache_figures,
    microcompact_batch,
    microcompact_candidates,
)
from stowage.policy._compaction import SUMMARY_INSTRUCTIONS
from stowage.testing import FakeOpenAIServer

# the brain, tools and settings of the session tests, shared without a conftest
_spec = importlib.util.spec_from_file_location(
    "policy_session_helpers", Path(__file__).with_name("test_policy_session.py")
)
assert _spec is not None and _spec.loader is not None
helpers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("policy_session_helpers", helpers)
_spec.loader.exec_module(helpers)


def _request(outputs: list[str], key: str = "k") -> ModelRequest:
    items: list[object] = [SystemMessage(text="s" * 2000), UserMessage(text="u" * 2000)]
    for n, output in enumerate(outputs):
        items += [
            FunctionCall(call_id=f"c{n}", name="t", arguments="{}"),
            FunctionCallOutput(call_id=f"c{n}", output=output),
        ]
    return ModelRequest(model="m", input=tuple(items), cache_key=key)  # type: ignore[arg-type]


def test_the_prefix_cache_serves_whole_blocks_of_the_common_prefix_and_counts_breaks() -> None:
    cache = PrefixCache(block=128)
    first = cache.serve(_request(["a" * 4000]))
    grown = cache.serve(_request(["a" * 4000, "b" * 4000]))
    stubbed = cache.serve(_request(["[stub]", "b" * 4000, "c" * 4000]))
    assert first.cached_tokens == 0 and not first.broke
    # the whole first request (~2,000 tokens) is a prefix: all of it, in whole blocks
    assert grown.cached_tokens % 128 == 0
    assert first.input_tokens - 128 < grown.cached_tokens <= first.input_tokens
    assert not grown.broke
    # a stub early in the request: only the system and user messages and the call survive
    assert stubbed.broke and stubbed.cached_tokens < 1100
    assert cache.figures["k"]["prefix_breaks"] == 1 and cache.figures["k"]["requests"] == 3
    # another key starts cold
    assert cache.serve(_request(["a" * 4000], key="other")).cached_tokens == 0


def test_cache_figures_sum_reuse_breaks_and_uncached_tokens_from_usage() -> None:
    usages = [
        Usage(input_tokens=1000, output_tokens=5, total_tokens=1005),
        Usage(input_tokens=1500, output_tokens=5, total_tokens=1505, cached_tokens=896),
        None,  # not reported: skipped
        Usage(input_tokens=1200, output_tokens=5, total_tokens=1205, cached_tokens=256),
    ]
    figures = cache_figures(usages, block=128)
    assert figures.requests == 3 and figures.input_tokens == 3700
    assert figures.cached_tokens == 1152 and figures.uncached_tokens == 2548
    assert figures.breaks == 1  # 256 cached of a previous 1500: a break; 896 of 1000 is not
    assert round(figures.reuse, 3) == round(1152 / 3700, 3)
    assert "1 prefix breaks" in figures.line()
    silent = cache_figures([Usage(input_tokens=10, output_tokens=1, total_tokens=11)] * 3)
    assert not silent.reported and silent.breaks == 0
    assert "reported no cached tokens" in silent.line()


def test_a_microcompaction_batch_is_all_old_outputs_or_nothing() -> None:
    history: list[HistoryEntry] = []
    seq = 0
    for n in range(6):
        for item in (
            FunctionCall(call_id=f"c{n}", name="t", arguments="{}"),
            FunctionCallOutput(call_id=f"c{n}", output="x" * 2000),
        ):
            seq += 1
            history.append(HistoryEntry(seq=seq, item=item))
    old = microcompact_candidates(history, (), keep_rounds=2)
    assert len(old) == 4
    assert microcompact_batch(history, (), 2, min_free_chars=4000) == old
    assert microcompact_batch(history, (), 2, min_free_chars=4 * 2000) == ()


async def _growing_session(tmp_path: Path, **changes: object) -> tuple[list[Event], dict]:  # type: ignore[type-arg]
    events: list[Event] = []
    async with FakeOpenAIServer(brain=helpers.agent_brain()) as server:
        gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="chat")
        config = helpers.settings(tmp_path, **changes)
        async with Runtime(config, gateway=gateway, tools=helpers.big_tools(1000)) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", system="sys")
            for n in range(12):
                assert (await session.send(f"task {n}: short")).text == "done"
        assert server.prefix_cache is not None
        [figures] = server.prefix_cache.figures.values()
    return events, figures


async def test_batched_microcompaction_breaks_the_prefix_at_most_once_per_compaction(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        events, batched = await _growing_session(tmp_path / "batched")
        _, each_round = await _growing_session(tmp_path / "each", micro_min_free=0.0)
    micro = [e for e in events if isinstance(e, Microcompacted)]
    full = [e for e in events if isinstance(e, HistoryCompacted)]
    assert micro, "the session never reached the soft mark"
    # every break is a compaction event, and stubbing each round breaks more often
    assert batched["prefix_breaks"] <= len(micro) + len(full)
    assert batched["prefix_breaks"] < each_round["prefix_breaks"]
    assert batched["cached_tokens"] > each_round["cached_tokens"]


async def test_background_compactions_land_below_the_hard_mark(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        events: list[Event] = []
        async with FakeOpenAIServer(brain=helpers.agent_brain()) as server:
            gateway = OpenAIGateway(base_url=server.base_url, api_key="k", wire_api="chat")
            config = helpers.settings(tmp_path)
            async with Runtime(config, gateway=gateway, tools=helpers.big_tools(1000)) as rt:
                rt.subscribe(events.append)
                session = await rt.create("s1", system="sys")
                for n in range(10):
                    # long user messages: growth that stubs cannot take back
                    await session.send(f"task {n}: " + "details " * 150)
    landed = [e for e in events if isinstance(e, CompactionLanded) and e.kind == "full"]
    assert landed, "no full compaction was applied"
    assert all(e.fraction is not None for e in landed)
    below = [e for e in landed if e.fraction is not None and e.fraction < e.hard]
    assert len(below) >= 0.9 * len(landed), [(e.fraction, e.waited) for e in landed]


async def test_a_compaction_prompt_file_replaces_the_summary_instructions(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Summarize for a data engineer: keep every table name and row count.\n")
    from stowage.model._scripted import ScriptedModel

    with anyio.fail_after(30):
        model = ScriptedModel(brain=helpers.agent_brain())
        config = helpers.settings(tmp_path, compact_prompt_file=prompt)
        async with Runtime(config, gateway=model, tools=helpers.big_tools(1000)) as rt:
            session = await rt.create("s1", system="sys")
            await session.send("task: " + "details " * 50)
            assert await session.compact()
    [summary] = [r for r in model.requests if r.purpose == "summary"]
    instruction = summary.input[-1]
    assert isinstance(instruction, UserMessage)
    assert instruction.text.startswith("Summarize for a data engineer: keep every table name")
    assert SUMMARY_INSTRUCTIONS not in instruction.text  # the built-in text is replaced
    # the instruction message names each tool output's artifact reference
    assert ": output of big (" in instruction.text
    # and the rest is the session's last round request, the prefix its cache holds
    last_round = [r for r in model.requests if r.purpose == "round"][-1]
    assert summary.input[: len(last_round.input)] == last_round.input
    assert summary.tools == last_round.tools and summary.cache_key == last_round.cache_key


def test_the_command_line_refuses_a_missing_compaction_prompt_file(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    done = cli("run", "--store", "st", "--compact-prompt-file", "nope.md", "hello", cwd=tmp_path)
    assert done.returncode == 2
    assert "nope.md" in done.stderr and "Traceback" not in done.stderr
