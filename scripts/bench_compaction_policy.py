"""Figure 8: a scripted 200-round session with large tool outputs, background compaction on/off.

Prints, per mode: requests sent (rounds and summaries), the largest fraction of the context
window any round request used, compactions and microcompactions, and the time the sampler
spent waiting on compaction. The model is the offline scripted one with a fixed latency per
round and per summary (summaries are slower, as they are in life).

    .venv/bin/python scripts/bench_compaction_policy.py [--rounds 200] [--summary-latency 0.25]
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import pydantic
from rich.console import Console
from rich.table import Table
from stowage import (
    AssistantMessage,
    CompactionWaited,
    Event,
    FunctionCall,
    FunctionTool,
    HistoryCompacted,
    Microcompacted,
    ModelRequest,
    ModelResponse,
    Runtime,
    Settings,
    ToolRegistry,
    UserMessage,
    configure_logging,
    replay,
)
from stowage.model._brain import is_summary_request, scripted_usage
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore

ROUNDS_PER_TURN = 5
_CALLS = itertools.count()


class BigArgs(pydantic.BaseModel):
    n: int


def tools(output_chars: int) -> ToolRegistry:
    async def big(args: BigArgs) -> str:
        return f"output {args.n}: " + ("row of data, " * (output_chars // 13 + 1))[:output_chars]

    return ToolRegistry([FunctionTool(name="big", description="big", args_model=BigArgs, fn=big)])


def brain(request: ModelRequest) -> ModelResponse:
    if is_summary_request(request):
        items: tuple[AssistantMessage | FunctionCall, ...] = (
            AssistantMessage(text="Summary: goal, files, decisions, next step. " * 10),
        )
    else:
        last_user = max(i for i, x in enumerate(request.input) if isinstance(x, UserMessage))
        done = sum(isinstance(x, FunctionCall) for x in request.input[last_user:])
        n = next(_CALLS)  # call ids must be unique in a session, as providers make them
        items = (
            (FunctionCall(call_id=f"c{n}", name="big", arguments=json.dumps({"n": n})),)
            if done < ROUNDS_PER_TURN
            else (AssistantMessage(text="done with this step"),)
        )
    return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)


class Latency(ScriptedModel):
    def __init__(self, round_latency: float, summary_latency: float) -> None:
        super().__init__(brain=brain)
        self.round_latency, self.summary_latency = round_latency, summary_latency

    async def create(self, request: ModelRequest) -> ModelResponse:
        summary = is_summary_request(request)
        await anyio.sleep(self.summary_latency if summary else self.round_latency)
        return await super().create(request)


@dataclass
class Figures:
    mode: str
    micro: bool
    rounds: int = 0
    summaries: int = 0
    max_fraction: float = 0.0
    compactions: int = 0
    fallbacks: int = 0
    microcompactions: int = 0
    waited: float = 0.0
    wall: float = 0.0
    replay_ok: bool = False


async def run(mode: str, micro: bool, args: argparse.Namespace, store: Path) -> Figures:
    figures = Figures(mode=mode, micro=micro)
    model = Latency(args.round_latency, args.summary_latency)
    settings = Settings(
        store=store,
        model="scripted",
        context_window=args.window,
        max_output_tokens=args.window // 10,
        user_budget_chars=2000,
        background_compaction=mode == "on",
        # without microcompaction every output stays whole until a compaction absorbs it
        keep_rounds=3 if micro else 1_000_000,
        durability="none",
    )

    def on_event(event: Event) -> None:
        if isinstance(event, HistoryCompacted):
            figures.compactions += 1
            figures.fallbacks += event.kind == "fallback"
        elif isinstance(event, Microcompacted):
            figures.microcompactions += 1
        elif isinstance(event, CompactionWaited):
            figures.waited += event.seconds

    started = time.perf_counter()
    async with Runtime(settings, gateway=model, tools=tools(args.output_chars)) as rt:
        rt.subscribe(on_event)
        session = await rt.create("bench", system="You are a data agent.")
        while sum(r.purpose == "round" for r in model.requests) < args.rounds:
            await session.send("next step: fetch and inspect the next table")
        live = list(session.state.history)
    figures.wall = time.perf_counter() - started
    for request in model.requests:
        if request.purpose == "summary":
            figures.summaries += 1
            continue
        figures.rounds += 1
        used = scripted_usage(request, ()).input_tokens
        figures.max_fraction = max(figures.max_fraction, used / args.window)
    disk = JsonlStore(store)
    try:
        figures.replay_ok = replay("bench", (await disk.read("bench")).records).history == live
    finally:
        await disk.aclose()
    return figures


async def main(args: argparse.Namespace) -> None:
    results = []
    for micro in (True, False):
        for mode in ("on", "off"):
            with tempfile.TemporaryDirectory() as tmp:
                results.append(await run(mode, micro, args, Path(tmp)))
    table = Table(
        title=f"{args.rounds} rounds, {args.output_chars}-char tool outputs, "
        f"{args.window}-token window, rounds {args.round_latency}s, summaries {args.summary_latency}s"
    )
    for column in (
        "background", "microcompact", "round requests", "summary requests", "max window used",
        "compactions (fallback)", "microcompactions", "sampler waited", "wall", "replay = live",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    for f in results:
        table.add_row(
            f.mode, "on" if f.micro else "off", str(f.rounds), str(f.summaries), f"{f.max_fraction:.1%}",
            f"{f.compactions} ({f.fallbacks})", str(f.microcompactions), f"{f.waited:.2f}s",
            f"{f.wall:.2f}s", "yes" if f.replay_ok else "NO",
        )  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--output-chars", type=int, default=4000)
    parser.add_argument("--window", type=int, default=10_000)
    parser.add_argument("--round-latency", type=float, default=0.02)
    parser.add_argument("--summary-latency", type=float, default=0.25)
    configure_logging("console", "warning")
    anyio.run(main, parser.parse_args())
