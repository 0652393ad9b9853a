"""Several calls in one response run at once, under the runtime's shared tool limit; every call
is durable before any of them runs, and the outputs are committed in call order whatever order
the tools finish in."""

from __future__ import annotations

from pathlib import Path

import anyio
from stowage import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    ModelResponse,
    Runtime,
    Session,
    Settings,
    ToolRegistry,
    UserMessage,
    tool,
)
from stowage.core import ItemRecord, RoundCommittedRecord
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore


class PerSessionModel(ScriptedModel):
    """One script per session, chosen by the session's first user message ("for <id>")."""

    def __init__(self, scripts: dict[str, list[ModelResponse]]) -> None:
        super().__init__()
        self.models = {sid: ScriptedModel.from_responses(r) for sid, r in scripts.items()}

    async def create(self, request: ModelRequest) -> ModelResponse:
        first = next(i for i in request.input if isinstance(i, UserMessage))
        return await self.models[first.text.removeprefix("for ")].create(request)


def ok() -> ModelResponse:
    return ModelResponse(items=(AssistantMessage(text="ok"),))


def calls(n: int) -> tuple[FunctionCall, ...]:
    return tuple(
        FunctionCall(call_id=f"c{i}", name="step", arguments=f'{{"n": {i}}}') for i in range(n)
    )


async def test_calls_of_one_response_overlap_and_commit_in_call_order(tmp_path: Path) -> None:
    """Each call waits until all three have started (so they must overlap), and they finish
    newest first; the log still holds outputs c0, c1, c2, after all three calls."""
    started: list[int] = []
    finished: list[int] = []
    all_started = anyio.Event()
    turn_to_finish = {2: anyio.Event(), 1: anyio.Event(), 0: anyio.Event()}
    durable_calls: list[set[str]] = []
    store = JsonlStore(tmp_path)

    @tool
    async def step(n: int) -> str:
        """One step."""
        log = await store.read("s1")  # the test's own look at the log: write-ahead holds
        durable_calls.append(
            {
                r.item.call_id
                for r in log.records
                if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall)
            }
        )
        started.append(n)
        if len(started) == 3:
            all_started.set()
            turn_to_finish[2].set()
        await all_started.wait()
        await turn_to_finish[n].wait()
        finished.append(n)
        if n > 0:
            turn_to_finish[n - 1].set()
        return f"done {n}"

    model = ScriptedModel.from_responses(
        [
            ModelResponse(items=(AssistantMessage(text="three at once"), *calls(3))),
            ModelResponse(items=(AssistantMessage(text="all done"),)),
        ]
    )
    with anyio.fail_after(15):
        async with Runtime(
            Settings(store=tmp_path), gateway=model, tools=ToolRegistry([step])
        ) as rt:
            session = await rt.create("s1")
            result = await session.send("go")
    assert result.text == "all done"
    assert sorted(started) == [0, 1, 2] and finished == [2, 1, 0]
    assert durable_calls == [{"c0", "c1", "c2"}] * 3
    records = (await store.read("s1")).records
    outputs = [
        r for r in records if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    ]
    assert [r.item.call_id for r in outputs] == ["c0", "c1", "c2"]
    assert [r.item.output for r in outputs] == ["done 0", "done 1", "done 2"]
    last_call = max(
        r.seq for r in records if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall)
    )
    commit = next(r for r in records if isinstance(r, RoundCommittedRecord))
    assert last_call < outputs[0].seq < outputs[-1].seq < commit.seq
    # the next request saw calls then outputs in the same order
    second = model.requests[1].input
    assert [i.call_id for i in second if isinstance(i, FunctionCallOutput)] == ["c0", "c1", "c2"]


async def test_the_shared_tool_limit_caps_how_many_calls_run_at_once(tmp_path: Path) -> None:
    """Two sessions, four calls each, ``max_tool_calls=3``: never more than three at once, and
    the limit is reached (the calls did overlap)."""
    running = 0
    peak = 0
    gate = anyio.Event()

    @tool
    async def step(n: int) -> str:
        """One step."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if peak == 3:
            gate.set()  # the limit is full: let everyone go
        await gate.wait()
        running -= 1
        return f"done {n}"

    model = PerSessionModel({sid: [ModelResponse(items=calls(4)), ok()] for sid in "ab"})
    outputs: dict[str, str] = {}
    with anyio.fail_after(15):
        async with Runtime(
            Settings(store=tmp_path),
            gateway=model,
            tools=ToolRegistry([step]),
            max_tool_calls=3,
        ) as rt:
            a = await rt.create("a")
            b = await rt.create("b")

            async def turn(session: Session) -> None:
                outputs[session.id] = (await session.send(f"for {session.id}")).text

            async with anyio.create_task_group() as tg:
                tg.start_soon(turn, a)
                tg.start_soon(turn, b)
    assert peak == 3
    assert outputs == {"a": "ok", "b": "ok"}
    for sid in ("a", "b"):
        records = (await JsonlStore(tmp_path).read(sid)).records
        ids = [
            r.item.call_id
            for r in records
            if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
        ]
        assert ids == ["c0", "c1", "c2", "c3"]
