"""The watermark policy end to end: scripted model, real JSONL store, real actors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pydantic
from stowage import (
    AssistantMessage,
    CompactionDecided,
    CompactionSummary,
    Event,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    HistoryCompacted,
    Microcompacted,
    ModelRequest,
    ModelResponse,
    RoundCommitted,
    RoundStarted,
    Runtime,
    Settings,
    ToolRegistry,
    TurnFinished,
    UserMessage,
    replay,
)
from stowage.core import CallLimiter
from stowage.model._brain import is_summary_request, scripted_usage
from stowage.model._scripted import ScriptedModel
from stowage.policy._budget import resolve_budget
from stowage.storage import JsonlStore
from stowage.tools._recall import RECALL_TOOL, recall_tool


class BigArgs(pydantic.BaseModel):
    n: int


def big_tools(size: int) -> ToolRegistry:
    async def big(args: BigArgs) -> str:
        return f"output {args.n}: " + ("lorem ipsum " * (size // 12))[:size]

    return ToolRegistry(
        [FunctionTool(name="big", description="big output", args_model=BigArgs, fn=big)]
    )


def agent_brain(
    rounds_per_turn: int = 3, summary: str = "SUMMARY of the work"
) -> Callable[[ModelRequest], ModelResponse]:
    """Calls ``big`` ``rounds_per_turn`` times per turn, then answers; summaries are short."""
    counter = iter(range(1_000_000))

    def brain(request: ModelRequest) -> ModelResponse:
        if is_summary_request(request):
            items: tuple[AssistantMessage | FunctionCall, ...] = (AssistantMessage(text=summary),)
        else:
            last_user = max(
                i for i, item in enumerate(request.input) if isinstance(item, UserMessage)
            )
            done = sum(isinstance(i, FunctionCall) for i in request.input[last_user:])
            if done < rounds_per_turn:
                n = next(counter)
                items = (
                    FunctionCall(call_id=f"call{n}", name="big", arguments=json.dumps({"n": n})),
                )
            else:
                items = (AssistantMessage(text="done"),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


def settings(tmp_path: Path, **changes: object) -> Settings:
    # a 4000-token window holds ~16k characters: the seed's 20k of kept user words cannot fit
    base = Settings(
        store=tmp_path,
        model="scripted",
        context_window=4000,
        max_output_tokens=500,
        user_budget_chars=2000,
    )
    return base.with_(**changes)


def input_tokens_without_tools(request: ModelRequest) -> int:
    with_tools = scripted_usage(request, ()).input_tokens
    bare = scripted_usage(ModelRequest(model=request.model, input=request.input), ()).input_tokens
    return bare if bare <= with_tools else with_tools


async def test_growing_session_microcompacts_at_soft_compacts_at_compact_and_never_sends_above_hard(
    tmp_path: Path,
) -> None:
    """Seed 002's first verification case, with the default watermarks."""
    with anyio.fail_after(30):
        model = ScriptedModel(brain=agent_brain())
        tools = big_tools(1000)
        config = settings(tmp_path)
        events: list[Event] = []
        async with Runtime(config, gateway=model, tools=tools) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", system="be brief")
            for n in range(10):
                # long user messages: growth that stubs cannot take back, so compaction follows
                assert (await session.send(f"task {n}: " + "details " * 150)).text == "done"
            live = list(session.state.history)
            specs = session.state and ToolRegistry([*tools]).specs()
        budget = resolve_budget(config, [*specs, recall_tool(lambda: (), _no_log).spec])
        assert budget is not None
        rounds = [r for r in model.requests if r.purpose == "round"]
        assert rounds and all(RECALL_TOOL in {t.name for t in r.tools} for r in rounds)
        worst = max(input_tokens_without_tools(r) for r in rounds)
        assert worst <= 0.95 * budget.usable, (worst, budget.usable)
        micro = [e for e in events if isinstance(e, Microcompacted)]
        full = [e for e in events if isinstance(e, HistoryCompacted)]
        assert micro and full
        assert events.index(micro[0]) < events.index(full[0])
        assert micro[0].tokens_before is not None and micro[0].tokens_before >= 0.70 * budget.usable
        assert micro[0].tokens_after is not None and micro[0].tokens_after < micro[0].tokens_before
        # at the compaction mark, or earlier when the growth says it would land too late
        assert full[0].tokens_before is not None
        assert full[0].tokens_before >= 0.85 * budget.usable or (
            full[0].tokens_before >= 0.70 * budget.usable
            and "land before the hard mark" in full[0].reason
        )
        decided = [e for e in events if isinstance(e, CompactionDecided)]
        assert {"soft", "compact"} <= {e.watermark for e in decided}
        store = JsonlStore(tmp_path)
        try:
            assert replay("s1", (await store.read("s1")).records).history == live
            assert replay("s1", (await store.read_tail("s1")).records).history == live
        finally:
            await store.aclose()


async def test_a_summary_request_shows_stubbed_outputs_as_the_last_round_request_did(
    tmp_path: Path,
) -> None:
    """What the model read as a stub in the last round request is summarized as that stub
    (naming its reference), not read again whole: the summary request is that request plus
    an instruction, so the provider's prefix cache serves it, and it stays small."""
    with anyio.fail_after(30):
        model = ScriptedModel(brain=agent_brain())
        # stubs at half the budget, every round past it (large rounds would otherwise wait for
        # a batch worth four of them), summaries well below the hard mark: nothing trimmed
        config = settings(tmp_path, soft_mark=0.5, compact_mark=0.7, micro_min_free=0.0)
        async with Runtime(config, gateway=model, tools=big_tools(1000)) as rt:
            session = await rt.create("s1", system="be brief")
            for n in range(10):
                await session.send(f"task {n}: " + "details " * 150)
    checked = 0
    last_round: ModelRequest | None = None
    for request in model.requests:
        if not is_summary_request(request):
            last_round = request
            continue
        assert last_round is not None
        stubs = {
            i.call_id: i.output
            for i in last_round.input
            if isinstance(i, FunctionCallOutput) and "recall_artifact" in i.output
        }
        shown = {i.call_id: i.output for i in request.input if isinstance(i, FunctionCallOutput)}
        for call_id, stub in stubs.items():
            if call_id in shown:  # not trimmed from the summary input
                assert shown[call_id] == stub
                checked += 1
    assert checked, "no summary request covered a stubbed output"


async def _no_log() -> tuple[()]:
    return ()


class GatedSummaries(ScriptedModel):
    """Summaries wait for ``gate``: the test decides when the background plan is ready."""

    def __init__(self, brain: Callable[[ModelRequest], ModelResponse]) -> None:
        super().__init__(brain=brain)
        self.gate = anyio.Event()
        self.summaries_started = 0

    async def create(self, request: ModelRequest) -> ModelResponse:
        if is_summary_request(request):
            self.summaries_started += 1
            await self.gate.wait()
        return await super().create(request)


async def test_background_compaction_splices_while_rounds_go_on_and_replay_equals_live(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        model = GatedSummaries(agent_brain(rounds_per_turn=6))
        events: list[Event] = []
        rounds_while_planning: list[int] = []

        def on_event(event: Event) -> None:
            events.append(event)
            if (
                isinstance(event, RoundCommitted)
                and model.summaries_started
                and not model.gate.is_set()
            ):
                rounds_while_planning.append(event.round)
                if len(rounds_while_planning) == 2:
                    model.gate.set()  # the plan is ready two rounds after it was asked for

        config = settings(
            tmp_path, soft_mark=0.5, compact_mark=0.55, hard_mark=0.95, keep_rounds=50
        )
        async with Runtime(config, gateway=model, tools=big_tools(300)) as rt:
            rt.subscribe(on_event)
            session = await rt.create("s1", system="sys")
            for n in range(4):
                await session.send(f"task {n}")
            live = list(session.state.history)
        compacted = [e for e in events if isinstance(e, HistoryCompacted)]
        assert len(rounds_while_planning) == 2 and compacted
        first = compacted[0]
        assert first.kind == "full" and first.summary == "SUMMARY of the work"
        # the plan covered only what was committed when it was asked for: the two rounds run
        # meanwhile came after covers_through and were kept verbatim
        store = JsonlStore(tmp_path)
        try:
            records = (await store.read("s1")).records
            assert replay("s1", records).history == live
            assert replay("s1", (await store.read_tail("s1")).records).history == live
        finally:
            await store.aclose()
        splice = next(
            r
            for r in records
            if getattr(r, "type", None) is None and type(r).__name__ == "CompactionRecord"
        )
        later_calls = [
            r.item.call_id for r in records
            if type(r).__name__ == "ItemRecord" and isinstance(r.item, FunctionCall)  # type: ignore[attr-defined]
            and splice.covers_through < r.seq < splice.seq  # type: ignore[attr-defined]
        ]  # fmt: skip
        assert len(later_calls) >= 2
        after = replay("s1", [r for r in records if r.seq <= splice.seq]).history
        kept = {e.item.call_id for e in after if isinstance(e.item, FunctionCall)}
        assert set(later_calls) <= kept


async def test_a_plan_back_while_the_round_waits_for_a_model_call_place_is_in_its_request(
    tmp_path: Path,
) -> None:
    """One model-call place, held by the gated summary: the session's next round waits for it
    with its request already built; when the place comes, the plan is applied first and the
    request is built again, so the history it sends is the compacted one."""
    with anyio.fail_after(30):
        model = GatedSummaries(agent_brain(rounds_per_turn=6))
        config = settings(
            tmp_path, soft_mark=0.5, compact_mark=0.55, hard_mark=0.95, keep_rounds=50
        )
        events: list[Event] = []
        async with (
            Runtime(config, gateway=model, tools=big_tools(300), max_model_calls=1) as rt,
            anyio.create_task_group() as tg,
        ):
            rt.subscribe(events.append)
            limiter = rt.limiters["model"]
            assert isinstance(limiter, CallLimiter)

            async def open_the_gate_once_a_round_waits() -> None:
                # nothing announces a waiting round: the test looks at the queue
                while not (model.summaries_started and limiter.waiting("round")):  # noqa: ASYNC110
                    await anyio.sleep(0.005)
                sent_before.append(len(model.requests))
                model.gate.set()

            sent_before: list[int] = []
            tg.start_soon(open_the_gate_once_a_round_waits)
            session = await rt.create("s1", system="sys")
            for n in range(4):
                await session.send(f"task {n}")
        [cut] = sent_before
        assert not any(
            isinstance(item, CompactionSummary)
            for request in model.requests[:cut]
            for item in request.input
        )
        summary, waiting_round = model.requests[cut : cut + 2]
        assert is_summary_request(summary) and waiting_round.purpose == "round"
        assert any(isinstance(item, CompactionSummary) for item in waiting_round.input)
        landed = [e for e in events if isinstance(e, HistoryCompacted)]
        assert landed and landed[0].summary == "SUMMARY of the work"


class LatePlan(GatedSummaries):
    """The first summary waits for ``gate``; once it is open, a round's request waits until
    that summary is back (and a moment more, for the compactor to hand the plan over), so the
    plan is applied at the next round boundary, not in a later turn."""

    def __init__(self, brain: Callable[[ModelRequest], ModelResponse]) -> None:
        super().__init__(brain)
        self.summary_back = anyio.Event()

    async def create(self, request: ModelRequest) -> ModelResponse:
        if is_summary_request(request):
            if self.summary_back.is_set():
                return await ScriptedModel.create(self, request)
            response = await super().create(request)
            self.summary_back.set()
            return response
        if self.gate.is_set() and not self.summary_back.is_set():
            await self.summary_back.wait()
            await anyio.sleep(0.05)
        return await super().create(request)


async def test_a_plan_back_after_the_next_turn_began_stubs_finished_turns_not_the_open_one(
    tmp_path: Path,
) -> None:
    """A plan asked for in one turn comes back in the next, after its first tool round: it
    cannot keep the earlier turn's last tool round or the new turn's round out of its
    summary's way. What it leaves (with the earlier turn's output stubbed, recallable, when
    that is needed) is below the soft mark; a no-model digest would have absorbed the new
    turn's own round, which the model just asked for, and none is made."""
    with anyio.fail_after(30):
        model = LatePlan(agent_brain(rounds_per_turn=2))
        events: list[Event] = []
        turn = {"number": 1, "asked_in": 0}

        def on_event(event: Event) -> None:
            events.append(event)
            if isinstance(event, TurnFinished):
                turn["number"] += 1
            elif isinstance(event, RoundStarted) and model.summaries_started:
                turn["asked_in"] = turn["asked_in"] or turn["number"]
                if turn["number"] > turn["asked_in"]:
                    model.gate.set()  # the plan comes back during the next turn's first round

        # the plan is asked for at the compaction mark (50%), from turn 2 on, whatever it
        # frees (large rounds would otherwise wait for a plan worth four of them)
        config = settings(
            tmp_path, soft_mark=0.5, compact_mark=0.5, target_after=0.3, micro_min_free=0.0
        )
        async with Runtime(config, gateway=model, tools=big_tools(1500)) as rt:
            rt.subscribe(on_event)
            session = await rt.create("s1", system="sys")
            for n in range(4):
                await session.send(f"task {n}: " + "details " * 150)
        asked_in = turn["asked_in"]
        assert asked_in >= 2
        landed = next(e for e in events if isinstance(e, HistoryCompacted))
        at = events.index(landed)
        committed = [e for e in events[:at] if isinstance(e, RoundCommitted)]
        # the next turn (three rounds a turn) had committed its first tool round when the
        # plan landed
        assert landed.kind == "full" and committed[-1].calls == 1
        assert committed[-1].round == 3 * asked_in + 1
        assert not [e for e in events if isinstance(e, HistoryCompacted) and e.kind == "fallback"]
        # what it left (with stubs of finished turns' outputs, when needed) is below the soft
        # mark, so no digest follows
        usable = next(e for e in events if isinstance(e, CompactionDecided)).usable
        stubbed = [e for e in events[at:] if isinstance(e, Microcompacted)]
        left = stubbed[0].tokens_after if stubbed else landed.tokens_after
        assert left is not None and left < 0.5 * usable
        # the next request carries turn 3's tool output verbatim
        request = next(
            r for r in model.requests
            if r.purpose == "round" and any(isinstance(i, CompactionSummary) for i in r.input)
        )  # fmt: skip
        outputs = [i for i in request.input if isinstance(i, FunctionCallOutput)]
        assert outputs[-1].output.startswith("output ") and len(outputs[-1].output) > 1000


async def test_recall_artifact_returns_the_exact_original_from_history_and_from_the_log(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        model = ScriptedModel(brain=agent_brain())
        async with Runtime(settings(tmp_path), gateway=model, tools=big_tools(1000)) as rt:
            session = await rt.create("s1")
            for n in range(10):
                await session.send(f"task {n}: " + "details " * 150)
        store = JsonlStore(tmp_path)
        try:
            records = (await store.read("s1")).records

            async def read_log() -> tuple[object, ...]:
                return tuple((await store.read("s1")).records)

            originals = {
                r.seq: r.item.output
                for r in records
                if type(r).__name__ == "ItemRecord" and isinstance(r.item, FunctionCallOutput)
            }  # type: ignore[attr-defined]
            stub_requests = [
                item.output for r in model.requests for item in r.input
                if isinstance(item, FunctionCallOutput) and "recall_artifact" in item.output
            ]  # fmt: skip
            assert stub_requests, "no stub ever reached the model"
            ref = stub_requests[0].split("artifact ", 1)[1].split(",", 1)[0]
            state = replay("s1", records)
            tool = recall_tool(lambda: state.history, read_log)  # type: ignore[arg-type]
            got = await tool.run(tool.validate({"ref": ref}))
            assert got == originals[int(ref[1:])]
            # an output absorbed by a compaction is read back from the log
            gone = min(originals)
            assert all(e.seq != gone for e in state.history)
            assert await tool.run(tool.validate({"ref": f"R{gone}"})) == originals[gone]
        finally:
            await store.aclose()
