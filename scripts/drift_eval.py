"""Drift evaluation: does a fact planted early survive 20+ compactions, word for word?

Each session plants critical facts in its first turns (constraints, negative knowledge — an
approach that failed and why — and exact parameters: numbers, paths, versions), then runs one
filler turn and one compaction at a time. After every compaction the next request the model
receives is checked for each fact, verbatim. Four strategies run the same script:

* ``plain``: the seed's strategy, a summary and nothing else (the summarizer's updates block is
  cut from its replies, so protected state stays empty);
* ``regrounded``: ``plain``, but every ``--reground-every``-th compaction makes its summary
  from the log's original records since the last such one instead of from the summary before
  it (``Session.compact(reground=True)``; ``reground_every`` does it on its own);
* ``protected``: the constraints are given as protected state at session start, and the
  summarizer's updates block feeds failed attempts, decisions and artifacts into it;
* ``checked``: ``plain``, but each summary is checked against the user's instructions and
  corrections it absorbs (``check_summaries``, on by default; off in the others): asked for once
  more naming what it missed, then what it still misses appended. The summary tokens column
  is what every strategy's summary requests cost, the second asks included;
* ``searched``: ``plain``, but the session is offered ``search_history`` (the runtime offers
  it with ``recall_artifact`` when ``search_history_tool`` is on): at the start of each filler turn the scripted agent searches
  the log for each fact its request does not show, by the fact's topic words (its anchor: it
  knows what it needs, not the value), and reads the best user message found whole with
  ``recall_artifact``. A fact counts as recalled when the turn's last request holds it, in
  the history or in what the searches and recalls gave back.

The summarizer is the scripted one made deliberately lossy (``--loss``: it drops that fraction
of its facts on every pass, seeded), or any OpenAI-compatible endpoint (``--base-url``,
``--model``). It prints, per strategy, critical-fact recall after each compaction, constraint
preservation and drift rate (facts lost or changed per compaction), and writes a JSON report
with ``--json``. A failed approach is "repeated" after a compaction when the next request does
not show it failed: the scripted agent tries whatever its request does not rule out, so the
count is what a model that decides from its request alone would retry.

    .venv/bin/python scripts/drift_eval.py --sessions 3 --compactions 24 --loss 0.1
    .venv/bin/python scripts/drift_eval.py --base-url http://localhost:8000/v1 --model qwen2.5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import pydantic
from rich.console import Console
from rich.table import Table
from stowage import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    Runtime,
    Settings,
    SystemMessage,
    ToolRegistry,
    UserMessage,
    configure_logging,
)
from stowage.core._gateway import StreamEvent
from stowage.core._protected_updates import parse_summary_updates
from stowage.model._brain import ScriptedBrain, is_summary_request, scripted_usage
from stowage.model._scripted import ScriptedModel
from stowage.tools import SEARCH_TOOL

Strategy = Literal["plain", "checked", "regrounded", "protected", "searched"]
STRATEGIES: tuple[Strategy, ...] = ("plain", "checked", "regrounded", "protected", "searched")
RECALL_TOOL = "recall_artifact"
FACT_KINDS = ("constraint", "negative", "parameter")


@dataclass(frozen=True, slots=True, kw_only=True)
class Fact:
    """A planted fact: recalled when every one of ``values`` is in the request verbatim;
    changed when ``anchor`` is there but a value is not (the model kept the topic, not the fact)."""

    name: str
    kind: str
    message: str
    values: tuple[str, ...]
    anchor: str
    constraint: str | None = None


def facts_for(session: int) -> tuple[Fact, ...]:
    """The facts of session ``session``: the same shape, different exact values."""
    timeout, minor, conf, batch = 37 + session, 3 + session, 40 + session, 256 + 8 * session
    python = "must stay compatible with Python 3.12"
    return (
        Fact(
            name="never-commit",
            kind="constraint",
            message="Constraint: never commit code; leave every change uncommitted for review.",
            values=("never commit code",),
            anchor="commit",
            constraint="never commit code",
        ),
        Fact(
            name="python-3.12",
            kind="constraint",
            message=f"Constraint: the tool {python}.",
            values=(python,),
            anchor="Python",
            constraint=python,
        ),
        Fact(
            name="timeout",
            kind="constraint",
            message=f"Constraint: the request timeout must be {timeout} seconds, no more.",
            values=(f"request timeout must be {timeout} seconds",),
            anchor="timeout",
            constraint=f"request timeout must be {timeout} seconds",
        ),
        Fact(
            name="numpy-abi",
            kind="negative",
            message=(
                f"failed: upgrading numpy to 2.1.{minor} because ABI mismatch in _multiarray_umath"
            ),
            values=(f"upgrading numpy to 2.1.{minor}", "ABI mismatch in _multiarray_umath"),
            anchor="numpy",
        ),
        Fact(
            name="config-path",
            kind="parameter",
            message=f"artifact: /srv/app/conf.d/{conf}.yaml -- the live config",
            values=(f"/srv/app/conf.d/{conf}.yaml",),
            anchor="conf.d",
        ),
        Fact(
            name="batch-size",
            kind="parameter",
            message=f"decided: batch size is {batch} rows per insert",
            values=(f"batch size is {batch} rows per insert",),
            anchor="batch size",
        ),
    )


def filler(step: int) -> str:
    """A turn of ordinary work that pushes the planted messages out of the kept user words."""
    return (
        f"step {step}: profile module m{step:03d}, list its three hottest functions and "
        f"suggest one refactor for each; keep the notes short and concrete (ticket T-{step:04d})."
    )


# -- gateways ---------------------------------------------------------------------------


@dataclass(eq=False)
class Recorder:
    """A gateway wrapper that records every round request; for ``plain`` it also cuts the
    updates block out of summaries, so no protected state can form."""

    inner: ModelGateway
    plain: bool
    rounds: list[ModelRequest] = field(default_factory=list)
    #: tokens of the summary requests and their answers, as reported
    summary_tokens: int = 0

    async def create(self, request: ModelRequest) -> ModelResponse:
        if not is_summary_request(request):
            self.rounds.append(request)
        return self._filter(request, await self.inner.create(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if not is_summary_request(request):
            self.rounds.append(request)
        async for event in self.inner.stream(request):
            if isinstance(event, ResponseDone):
                event = ResponseDone(response=self._filter(request, event.response))
            yield event

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _filter(self, request: ModelRequest, response: ModelResponse) -> ModelResponse:
        if is_summary_request(request) and response.usage is not None:
            self.summary_tokens += response.usage.total_tokens
        if not (self.plain and is_summary_request(request)):
            return response
        summary = parse_summary_updates(response.text)[0]
        return ModelResponse(
            items=(AssistantMessage(text=summary),), usage=response.usage, model=response.model
        )


def request_text(request: ModelRequest) -> str:
    """Everything the model reads in ``request`` but tool outputs, as one text."""
    parts = [
        item.text
        for item in request.input
        if isinstance(item, SystemMessage | UserMessage | AssistantMessage | CompactionSummary)
    ]
    return "\n".join(parts)


def turn_outputs(request: ModelRequest) -> str:
    """The tool outputs of ``request``'s last turn (after its last user message)."""
    start = max(i for i, item in enumerate(request.input) if isinstance(item, UserMessage))
    outputs = request.input[start:]
    return "\n".join(i.output for i in outputs if isinstance(i, FunctionCallOutput))


# -- the searching agent ------------------------------------------------------------------

_USER_REF = re.compile(r"^R(\d+) \(user message", re.MULTILINE)
_ANY_REF = re.compile(r"^R(\d+) \(", re.MULTILINE)


def first_said(output: str) -> str | None:
    """The reference a search answer gives that an agent looking for what the user said
    reads: the oldest user message found, else the best match."""
    said = [int(seq) for seq in _USER_REF.findall(output)]
    if said:
        return f"R{min(said)}"
    best = _ANY_REF.search(output)
    return f"R{best.group(1)}" if best else None


@dataclass(eq=False)
class WorkingNotes:
    """``inner``, whose answers (not its summaries) end with a paragraph of working notes,
    as a real agent's do: a turn then holds more than its line of the summary, so each
    compaction frees something (none that frees nothing is written)."""

    inner: Callable[[ModelRequest], ModelResponse]

    def __call__(self, request: ModelRequest) -> ModelResponse:
        response = self.inner(request)
        if is_summary_request(request) or response.calls:
            return response
        notes = "\n\nWorking notes: " + "looked at the call graph and the timings again; " * 80
        items = (AssistantMessage(text=response.text + notes),)
        return ModelResponse(
            items=items, usage=scripted_usage(request, items), model=response.model
        )


@dataclass(eq=False)
class Rereader:
    """``inner`` (the lossy scripted brain), but a filler turn starts with a search_history
    call for each planted fact its request does not show (queried by the fact's anchor, the
    most matches a call gives), then one recall_artifact of what each search names first
    (``first_said``), then the inner brain's answer."""

    inner: ScriptedBrain
    facts: Sequence[Fact]
    searches: int = 0

    def __call__(self, request: ModelRequest) -> ModelResponse:
        if is_summary_request(request) or SEARCH_TOOL not in {t.name for t in request.tools}:
            return self.inner(request)
        start = max(i for i, item in enumerate(request.input) if isinstance(item, UserMessage))
        user, turn = request.input[start], request.input[start + 1 :]
        if not (isinstance(user, UserMessage) and user.text.startswith("step ")):
            return self.inner(request)
        calls = [i for i in turn if isinstance(i, FunctionCall)]
        items: tuple[FunctionCall, ...] = ()
        if not calls:
            shown = request_text(request)
            missing = [f for f in self.facts if not all(v in shown for v in f.values)]
            items = tuple(
                _call(f"s{start}-{n}", SEARCH_TOOL, query=f.anchor.lower(), limit=20)
                for n, f in enumerate(missing)
            )
            self.searches += len(items)
        elif all(c.name == SEARCH_TOOL for c in calls):
            outputs = [i.output for i in turn if isinstance(i, FunctionCallOutput)]
            refs = [first_said(o) for o in outputs]
            items = tuple(
                _call(f"r{start}-{n}", RECALL_TOOL, ref=ref)
                for n, ref in enumerate(refs)
                if ref is not None
            )
        if not items:
            return self.inner(request)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)


def _call(call_id: str, name: str, **arguments: object) -> FunctionCall:
    return FunctionCall(call_id=call_id, name=name, arguments=json.dumps(arguments))


class NoteArgs(pydantic.BaseModel):
    text: str = ""


def note_tools() -> ToolRegistry:
    """One tool of the session's own: the runtime offers recall_artifact and search_history
    to a session with tools (the scripted agent never calls this one)."""

    async def note(args: NoteArgs) -> str:
        return "noted"

    return ToolRegistry(
        [FunctionTool(name="note", description="take a note", args_model=NoteArgs, fn=note)]
    )


# -- one session ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """Which facts one request held: recalled, changed (anchor without value) or lost."""

    recalled: frozenset[str]
    changed: frozenset[str]


def observe(facts: Sequence[Fact], text: str) -> Observation:
    recalled = {f.name for f in facts if all(v in text for v in f.values)}
    changed = {f.name for f in facts if f.name not in recalled and f.anchor in text}
    return Observation(recalled=frozenset(recalled), changed=frozenset(changed))


async def run_session(
    settings: Settings,
    gateway: ModelGateway,
    strategy: Strategy,
    session_no: int,
    compactions: int,
    reground_every: int = 0,
) -> tuple[list[Observation], int]:
    """Plant, then ``compactions`` times: a filler turn, a compaction; observe the request
    after each (index 0 is the request before the first compaction). Also returns the
    tokens its summary requests cost."""
    facts = facts_for(session_no)
    recorder = Recorder(inner=gateway, plain=strategy != "protected")
    observations: list[Observation] = []
    searched = strategy == "searched"
    tools = note_tools() if searched else None
    settings = settings.with_(check_summaries=strategy == "checked")
    if searched:  # recall and search are offered to a session that may compact on its own
        window = settings.context_window if settings.base_url else 1_000_000
        settings = settings.with_(
            auto_compact=True, context_window=window, search_history_tool=True
        )
    async with Runtime(settings, gateway=recorder, tools=tools) as rt:
        constraints = (
            [f.constraint for f in facts if f.constraint] if strategy == "protected" else []
        )
        session = await rt.create(
            f"{strategy}-{session_no}",
            system="You are a careful engineering agent. Answer briefly.",
            objective="speed up the ingest service" if strategy == "protected" else None,
            constraints=constraints,
        )
        for fact in facts:
            await session.send(fact.message)
        for step in range(compactions + 1):
            before = len(recorder.rounds)
            await session.send(filler(step))
            if searched:  # what the turn's last request holds, re-read parts included
                last = recorder.rounds[-1]
                seen = request_text(last) + "\n" + turn_outputs(last)
            else:
                seen = request_text(recorder.rounds[before])
            observations.append(observe(facts, seen))
            reground = strategy == "regrounded" and (step + 1) % reground_every == 0
            if step < compactions and not await session.compact(reground=reground):
                raise RuntimeError(f"compaction {step + 1} of {session.id} did not happen")
    await gateway.aclose()
    return observations, recorder.summary_tokens


# -- the report -------------------------------------------------------------------------


def summarize(
    facts: Sequence[Fact],
    runs: Sequence[Sequence[Observation]],
    compactions: int,
    summary_tokens: int = 0,
) -> dict[str, Any]:
    """The figures of one strategy over its sessions."""
    total = len(facts)
    recall = [
        sum(len(run[k].recalled) for run in runs) / (total * len(runs))
        for k in range(compactions + 1)
    ]
    by_kind: dict[str, list[float]] = {}
    for kind in FACT_KINDS:
        names = {f.name for f in facts if f.kind == kind}
        by_kind[kind] = [
            sum(len(run[k].recalled & names) for run in runs) / (len(names) * len(runs))
            for k in range(compactions + 1)
        ]
    lost = changed = 0
    for run in runs:
        for k in range(1, compactions + 1):
            gone = run[k - 1].recalled - run[k].recalled
            changed += len(gone & run[k].changed)
            lost += len(gone - run[k].changed)
    pairs = len(runs) * compactions
    # the agent repeats a failed approach in a request that does not show it failed (the
    # scripted agent's rule: it tries what its request does not rule out)
    negatives = {f.name for f in facts if f.kind == "negative"}
    repeats = sum(
        len(negatives - run[k].recalled) for run in runs for k in range(1, compactions + 1)
    )
    after = by_kind["constraint"][1:]
    return {
        "recall_by_compaction": recall,
        "recall_by_kind": by_kind,
        "final_recall": recall[-1],
        "constraint_preservation": sum(after) / len(after) if after else 1.0,
        "constraints_final": by_kind["constraint"][-1],
        "lost": lost,
        "changed": changed,
        "drift_per_compaction": (lost + changed) / pairs if pairs else 0.0,
        "failed_approach_repeats": repeats,
        "failed_approach_chances": pairs * len(negatives),
        "summary_tokens": summary_tokens,
    }


def pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def print_report(report: dict[str, Any], console: Console) -> None:
    compactions = report["config"]["compactions"]
    marks = sorted({1, 2, 5, 10, 15, 20, compactions} & set(range(1, compactions + 1)))
    table = Table(title=f"Drift over {compactions} compactions ({report['config']['summarizer']})")
    table.add_column("strategy")
    for k in marks:
        table.add_column(f"recall\n@{k}", justify="right")
    for name in ("constraints", "negative", "parameters"):
        table.add_column(f"{name}\n@end", justify="right")
    table.add_column("constraint\npreservation", justify="right")
    table.add_column("drift per\ncompaction", justify="right")
    table.add_column("failed approach\nrepeated", justify="right")
    table.add_column("summary\ntokens", justify="right")
    for strategy, figures in report["strategies"].items():
        kinds = figures["recall_by_kind"]
        table.add_row(
            strategy,
            *(pct(figures["recall_by_compaction"][k]) for k in marks),
            pct(kinds["constraint"][-1]),
            pct(kinds["negative"][-1]),
            pct(kinds["parameter"][-1]),
            pct(figures["constraint_preservation"]),
            f"{figures['drift_per_compaction']:.3f}",
            f"{figures['failed_approach_repeats']} of {figures['failed_approach_chances']}",
            f"{figures.get('summary_tokens', 0):,}",
        )
    console.print(table)
    curve = Table(title="critical-fact recall after each compaction")
    curve.add_column("compaction", justify="right")
    for strategy in report["strategies"]:
        curve.add_column(strategy, justify="right")
    for k in range(compactions + 1):
        curve.add_row(
            str(k) if k else "0 (before)",
            *(pct(f["recall_by_compaction"][k]) for f in report["strategies"].values()),
        )
    console.print(curve)


# -- entry point ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3, help="sessions per strategy")
    parser.add_argument("--compactions", type=int, default=24, help="compactions per session")
    parser.add_argument(
        "--loss", type=float, default=0.1, help="fraction of facts the scripted summary drops"
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the lossy summarizer")
    parser.add_argument(
        "--user-budget",
        type=int,
        default=600,
        help="characters of recent user words kept verbatim (small, so facts must be summarized)",
    )
    parser.add_argument(
        "--reground-every",
        type=int,
        default=4,
        help="the regrounded strategy re-grounds every Nth compaction",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    parser.add_argument("--store", type=Path, default=None, help="keep the logs here")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint")
    parser.add_argument("--model", default=None, help="model name at --base-url")
    parser.add_argument("--api-key", default=None, help="else OPENAI_API_KEY; never printed")
    parser.add_argument("--wire-api", choices=["chat", "responses"], default="chat")
    return parser


def settings_for(args: argparse.Namespace, store: Path) -> Settings:
    base = Settings(
        store=store,
        tools="none",
        auto_compact=False,
        durability="none",
        user_budget_chars=args.user_budget,
        stream=False,
    )
    if args.base_url is None:
        return base
    return base.with_(
        model=args.model or "gpt-4o-mini",
        base_url=args.base_url,
        api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or "unused",
        wire_api=args.wire_api,
    )


def gateway_for(
    args: argparse.Namespace, settings: Settings, strategy: Strategy = "plain", session_no: int = 0
) -> ModelGateway:
    if args.base_url is None:
        brain = ScriptedBrain(tool_rounds=0, loss=args.loss, seed=args.seed)
        if strategy == "searched":
            reread = Rereader(inner=brain, facts=facts_for(session_no))
            return ScriptedModel(brain=WorkingNotes(reread))
        return ScriptedModel(brain=WorkingNotes(brain))
    from stowage.model import make_gateway

    return make_gateway(settings)


async def evaluate(args: argparse.Namespace, store: Path) -> dict[str, Any]:
    settings = settings_for(args, store)
    summarizer = (
        f"scripted, loss {args.loss}, seed {args.seed}"
        if args.base_url is None
        else f"{settings.model} at {args.base_url}"
    )
    strategies: dict[str, Any] = {}
    for strategy in STRATEGIES:
        done = [
            await run_session(
                settings,
                gateway_for(args, settings, strategy, n),
                strategy,
                n,
                args.compactions,
                args.reground_every,
            )
            for n in range(args.sessions)
        ]
        runs = [observations for observations, _ in done]
        tokens = sum(spent for _, spent in done)
        strategies[strategy] = summarize(facts_for(0), runs, args.compactions, tokens)
    return {
        "config": {
            "sessions": args.sessions,
            "compactions": args.compactions,
            "loss": args.loss if args.base_url is None else None,
            "seed": args.seed,
            "user_budget_chars": args.user_budget,
            "reground_every": args.reground_every,
            "summarizer": summarizer,
            "facts": [
                {"name": f.name, "kind": f.kind, "values": list(f.values)} for f in facts_for(0)
            ],
        },
        "strategies": strategies,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging("console", "warning")  # the tables are the output, not the session logs
    if (
        args.compactions < 1
        or args.sessions < 1
        or not 0 <= args.loss < 1
        or args.reground_every < 1
    ):
        print(
            "drift_eval: need --sessions >= 1, --compactions >= 1, 0 <= --loss < 1, "
            "--reground-every >= 1",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="drift-") as tmp:
        store = args.store or Path(tmp)
        report = anyio.run(evaluate, args, store)
    print_report(report, Console(width=160))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
