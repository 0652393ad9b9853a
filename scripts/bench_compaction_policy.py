"""Compaction policies side by side: prompt cache, compactions, waits and recall, 200 rounds.

The same scripted workload (planted facts, then turns of five tool rounds, each reading an
output of ``--output-chars``) runs through the fake OpenAI server over loopback HTTP, whose
prefix cache serves the common prefix with the session's previous request in whole 128-token
blocks, once per policy and output size. Two sizes by default: a typical 1,200 characters
(each round adds ~3% of the usable window) and a heavy 4,000 (~12%: no policy that fits the
window can then reuse more than ~82% of its input, whatever it does). The policies:

* ``stowage`` — the defaults: watermarks, batched microcompaction, background planning;
* ``stowage-reground`` — the defaults, with every second full compaction re-grounded: made
  from the log's original records since the last re-grounded one, not from the previous
  summary (``reground_every = 2``), so what it costs and what it recalls can be compared;
* ``codex-like`` — one full compaction near 90% of the window, nothing else, inline;
* ``claude-code-like`` — microcompaction every round keeping the 5 newest outputs, full
  compaction at ~85%, inline;
* ``unlimited`` — no compaction and a window large enough for everything.

Per policy it prints: uncached input tokens (the cost proxy, summary requests included),
prefix reuse (cached share of the round requests' input), the cached share of the summary
requests' input (a summary request is the session's round request plus one instruction
message, so the cache serves most of it), prefix breaks, compactions (micro and full), the largest share of the window a request used, rounds held back for compaction and how
long, and recall of the planted facts (``scripts/drift_eval.py``'s) in the last request. The
summarizer is the scripted one (lossy with ``--loss``), and it is the same for every policy.

With ``--wire anthropic`` the same runs go through the Anthropic gateway to the fake server's
``/v1/messages``, whose cache serves only the prefixes the gateway's breakpoints mark (a read
needs the same marked prefix seen before; a new mark is a cache write, also reported).
``--cache-minimum`` sets the smallest prefix that cache keeps (Claude's is 1,024 or 2,048
tokens by model).

    .venv/bin/python scripts/bench_compaction_policy.py [--rounds 200] [--json out.json]
    .venv/bin/python scripts/bench_compaction_policy.py --wire anthropic
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pydantic
from rich.console import Console
from rich.table import Table
from stowage import (
    AssistantMessage,
    CompactionLanded,
    CompactionWaited,
    Event,
    FunctionCall,
    FunctionTool,
    HistoryCompacted,
    Microcompacted,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    Runtime,
    Settings,
    ToolRegistry,
    UserMessage,
    configure_logging,
    replay,
)
from stowage.core._gateway import StreamEvent
from stowage.model._anthropic_gateway import AnthropicGateway
from stowage.model._brain import ScriptedBrain, is_summary_request, scripted_usage
from stowage.model._openai_gateway import OpenAIGateway
from stowage.storage import JsonlStore
from stowage.testing import BreakpointCache, FakeOpenAIServer

ROUNDS_PER_TURN = 5
POLICIES = ("stowage", "stowage-reground", "codex-like", "claude-code-like", "unlimited")
# what runs unless --policies names others: re-grounding is a variant of stowage, asked for
DEFAULT_POLICIES = ("stowage", "codex-like", "claude-code-like", "unlimited")

# the planted facts of the drift evaluation, loaded from the script beside this one
_spec = importlib.util.spec_from_file_location(
    "drift_eval", Path(__file__).with_name("drift_eval.py")
)
assert _spec is not None and _spec.loader is not None
drift_eval = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("drift_eval", drift_eval)
_spec.loader.exec_module(drift_eval)


class BigArgs(pydantic.BaseModel):
    n: int


def tools(output_chars: int) -> ToolRegistry:
    async def big(args: BigArgs) -> str:
        return f"output {args.n}: " + ("row of data, " * (output_chars // 13 + 1))[:output_chars]

    return ToolRegistry([FunctionTool(name="big", description="big", args_model=BigArgs, fn=big)])


def make_brain(loss: float, seed: int) -> Callable[[ModelRequest], ModelResponse]:
    """Rounds: five tool calls per turn, then a short answer; summaries: the scripted
    summarizer (lossy with ``loss``)."""
    summarizer = ScriptedBrain(tool_rounds=0, loss=loss, seed=seed)
    calls = itertools.count()

    def brain(request: ModelRequest) -> ModelResponse:
        if is_summary_request(request):
            return summarizer(request)
        last_user = max(i for i, x in enumerate(request.input) if isinstance(x, UserMessage))
        done = sum(isinstance(x, FunctionCall) for x in request.input[last_user:])
        n = next(calls)  # call ids must be unique in a session, as providers make them
        items: tuple[AssistantMessage | FunctionCall, ...] = (
            (FunctionCall(call_id=f"c{n}", name="big", arguments=json.dumps({"n": n})),)
            if done < ROUNDS_PER_TURN
            else (AssistantMessage(text="done with this step"),)
        )
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


@dataclass(eq=False)
class Metered:
    """The gateway wrapper of a run: summary latency, and every request and usage seen."""

    inner: ModelGateway
    summary_latency: float
    round_latency: float = 0.0
    rounds: list[ModelRequest] = field(default_factory=list)
    # purpose, input, cached, written to the cache
    usages: list[tuple[str, int, int, int]] = field(default_factory=list)

    def _seen(self, request: ModelRequest, response: ModelResponse) -> None:
        usage = response.usage
        if usage is not None:
            self.usages.append(
                (request.purpose, usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens)
            )

    async def create(self, request: ModelRequest) -> ModelResponse:
        await self._before(request)
        response = await self.inner.create(request)
        self._seen(request, response)
        await self._after(request)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        await self._before(request)
        async for event in self.inner.stream(request):
            if isinstance(event, ResponseDone):
                self._seen(request, event.response)
                await self._after(request)
            yield event

    async def _before(self, request: ModelRequest) -> None:
        if not is_summary_request(request):
            self.rounds.append(request)
            await anyio.sleep(self.round_latency)

    async def _after(self, request: ModelRequest) -> None:
        # a summary's time is the model writing it: the provider has the request (and its
        # cache serves it) at once, not after the rounds that go on meanwhile
        if is_summary_request(request):
            await anyio.sleep(self.summary_latency)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Figures:
    policy: str
    output_chars: int = 0
    rounds: int = 0
    summaries: int = 0
    input_tokens: int = 0
    uncached_tokens: int = 0
    cache_write_tokens: int = 0
    round_input_tokens: int = 0
    round_cached_tokens: int = 0
    summary_input_tokens: int = 0
    summary_cached_tokens: int = 0
    prefix_breaks: int = 0
    full: int = 0
    fallbacks: int = 0
    micro: int = 0
    landed_below_hard: int = 0
    landed: int = 0
    max_fraction: float = 0.0
    rounds_waited: int = 0
    waited: float = 0.0
    recall: float = 0.0
    wall: float = 0.0
    replay_ok: bool = False

    @property
    def reuse(self) -> float:
        return self.round_cached_tokens / self.round_input_tokens if self.round_input_tokens else 0

    @property
    def summary_reuse(self) -> float | None:
        if not self.summary_input_tokens:
            return None
        return self.summary_cached_tokens / self.summary_input_tokens


def settings_for(policy: str, args: argparse.Namespace, store: Path, base_url: str) -> Settings:
    base = Settings(
        store=store,
        model="scripted",
        base_url=base_url,
        api_key="bench",
        context_window=args.window,
        max_output_tokens=args.window // 10,
        user_budget_chars=2000,
        durability="none",
        max_compactions_per_turn=10,
    )
    if policy == "stowage":
        return base
    if policy == "stowage-reground":
        return base.with_(reground_every=2)
    if policy == "codex-like":
        # one full compaction near 90% of the window, no microcompaction, the turn waits
        return base.with_(
            soft_mark=0.90, compact_mark=0.90, hard_mark=0.95, keep_rounds=1_000_000,
            background_compaction=False,
        )  # fmt: skip
    if policy == "claude-code-like":
        # old outputs cleared every round past the soft mark (the 5 newest kept), full at 85%
        return base.with_(
            keep_rounds=5, micro_min_free=0.0, compact_mark=0.85, background_compaction=False
        )
    if policy == "unlimited":
        return base.with_(context_window=100 * args.window * args.rounds, auto_compact=False)
    raise ValueError(policy)


async def run(policy: str, args: argparse.Namespace, store: Path, output_chars: int) -> Figures:
    figures = Figures(policy=policy, output_chars=output_chars)
    facts = drift_eval.facts_for(0)
    cache = BreakpointCache(minimum=args.cache_minimum)
    brain = make_brain(args.loss, args.seed)
    async with FakeOpenAIServer(brain=brain, breakpoint_cache=cache) as server:
        settings = settings_for(policy, args, store, server.base_url)
        inner: ModelGateway = (
            AnthropicGateway(base_url=server.base_url, api_key="bench")
            if args.wire == "anthropic"
            else OpenAIGateway(base_url=server.base_url, api_key="bench", wire_api=args.wire)
        )
        gateway = Metered(inner, args.summary_latency, args.round_latency)

        def on_event(event: Event) -> None:
            if isinstance(event, HistoryCompacted):
                figures.full += event.kind == "full"
                figures.fallbacks += event.kind != "full"
            elif isinstance(event, Microcompacted):
                figures.micro += 1
            elif isinstance(event, CompactionLanded):
                if event.fraction is not None:
                    figures.landed += 1
                    figures.landed_below_hard += event.fraction < event.hard
            elif isinstance(event, CompactionWaited) and event.seconds > 0:
                figures.rounds_waited += 1
                figures.waited += event.seconds

        started = time.perf_counter()
        async with Runtime(settings, gateway=gateway, tools=tools(output_chars)) as rt:
            rt.subscribe(on_event)
            session = await rt.create("bench", system="You are a data agent.")
            for fact in facts:
                await session.send(fact.message)
            step = 0
            while len(gateway.rounds) < args.rounds:
                await session.send(drift_eval.filler(step))
                step += 1
            live = list(session.state.history)
        figures.wall = time.perf_counter() - started
        assert server.prefix_cache is not None
        seen = cache.figures if args.wire == "anthropic" else server.prefix_cache.figures
        figures.prefix_breaks = seen[next(iter(seen))]["prefix_breaks"]
    for purpose, input_tokens, cached, written in gateway.usages:
        figures.input_tokens += input_tokens
        figures.uncached_tokens += input_tokens - cached
        figures.cache_write_tokens += written
        if purpose == "round":
            figures.rounds += 1
            figures.round_input_tokens += input_tokens
            figures.round_cached_tokens += cached
            figures.max_fraction = max(figures.max_fraction, input_tokens / args.window)
        else:
            figures.summaries += 1
            figures.summary_input_tokens += input_tokens
            figures.summary_cached_tokens += cached
    last = drift_eval.observe(facts, drift_eval.request_text(gateway.rounds[-1]))
    figures.recall = len(last.recalled) / len(facts)
    disk = JsonlStore(store)
    try:
        figures.replay_ok = replay("bench", (await disk.read("bench")).records).history == live
    finally:
        await disk.aclose()
    return figures


async def main(args: argparse.Namespace) -> list[Figures]:
    results = []
    for output_chars in args.output_chars:
        workload = []
        for policy in args.policies:
            with tempfile.TemporaryDirectory() as tmp:
                workload.append(await run(policy, args, Path(tmp), output_chars))
        _print_table(args, output_chars, workload)
        results += workload
    if args.json is not None:
        rows = [
            asdict(f) | {"prefix_reuse": f.reuse, "summary_cached_share": f.summary_reuse}
            for f in results
        ]
        args.json.write_text(json.dumps({"args": _plain(vars(args)), "results": rows}, indent=2))
    return results


def _print_table(args: argparse.Namespace, output_chars: int, results: list[Figures]) -> None:
    table = Table(
        title=f"{args.wire} wire, {args.rounds} rounds, {output_chars}-char tool outputs, "
        f"{args.window}-token "
        f"window, rounds {args.round_latency}s, summaries {args.summary_latency}s, "
        f"summary loss {args.loss}"
    )
    for column in (
        "policy", "round reqs", "summary reqs", "uncached input", "cache writes", "prefix reuse",
        "summary cached", "breaks",
        "compactions micro/full(fallback)", "below hard", "max window used", "rounds waited",
        "recall", "replay = live",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    for f in results:
        table.add_row(
            f.policy, str(f.rounds), str(f.summaries), f"{f.uncached_tokens:,}",
            f"{f.cache_write_tokens:,}", f"{f.reuse:.1%}",
            "-" if f.summary_reuse is None else f"{f.summary_reuse:.1%}", str(f.prefix_breaks), f"{f.micro}/{f.full}({f.fallbacks})",
            f"{f.landed_below_hard}/{f.landed}" if f.landed else "-",
            f"{f.max_fraction:.1%}" if f.policy != "unlimited" else "-",
            f"{f.rounds_waited} ({f.waited:.2f}s)", f"{f.recall:.0%}", "yes" if f.replay_ok else "NO",
        )  # fmt: skip
    Console(width=200).print(table)


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--output-chars",
        type=int,
        nargs="+",
        default=[1200, 4000],
        help="tool output sizes, one workload each (default: a typical 1,200 and a heavy 4,000)",
    )
    parser.add_argument("--window", type=int, default=10_000)
    parser.add_argument("--round-latency", type=float, default=0.02)
    parser.add_argument("--summary-latency", type=float, default=0.25)
    parser.add_argument("--loss", type=float, default=0.1, help="share of facts a summary drops")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(DEFAULT_POLICIES))
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument(
        "--wire",
        choices=("chat", "responses", "anthropic"),
        default="chat",
        help="the wire API the runs go through (anthropic: the Messages endpoint and its "
        "breakpoint cache)",
    )
    parser.add_argument(
        "--cache-minimum",
        type=int,
        default=0,
        help="anthropic wire: the smallest marked prefix, in tokens, its cache keeps",
    )
    return parser


if __name__ == "__main__":
    configure_logging("console", "error")
    anyio.run(main, build_parser().parse_args())
