"""A round of one call runs it in the sampler's own task: no executor is started for it, and
the call keeps everything the executor gives (write-ahead, the shared tool limit, events, the
turn's interrupt). Several calls still go to the executor, started by the run that needs it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from stowage import (
    AssistantMessage,
    Event,
    FunctionCall,
    FunctionCallOutput,
    ModelResponse,
    Runtime,
    Settings,
    ToolFinished,
    ToolRegistry,
    ToolStarted,
    tool,
)
from stowage.actors import ExecutorInbox, Reply, RunTools
from stowage.core import ItemRecord
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore


def _call(call_id: str, n: int) -> FunctionCall:
    return FunctionCall(call_id=call_id, name="where", arguments=f'{{"n": {n}}}')


def _task_name() -> str:
    """The name anyio gave the running task (the qualified name of the function it runs)."""
    return anyio.get_current_task().name


async def test_a_lone_call_runs_in_the_samplers_task_and_several_in_the_executor(
    tmp_path: Path,
) -> None:
    ran_in: dict[int, str] = {}
    durable: dict[int, bool] = {}
    store = JsonlStore(tmp_path)

    @tool
    async def where(n: int) -> str:
        """Say which task runs this call."""
        ran_in[n] = _task_name()
        log = await store.read("s1")  # write-ahead: the call is on disk before it runs
        durable[n] = any(
            isinstance(r, ItemRecord)
            and isinstance(r.item, FunctionCall)
            and r.item.call_id == f"c{n}"
            for r in log.records
        )
        return f"ran {n}"

    model = ScriptedModel.from_responses(
        [
            ModelResponse(items=(_call("c0", 0),)),
            ModelResponse(items=(_call("c1", 1), _call("c2", 2))),
            ModelResponse(items=(AssistantMessage(text="done"),)),
        ]
    )
    events: list[Event] = []
    with anyio.fail_after(15):
        async with Runtime(
            Settings(store=tmp_path), gateway=model, tools=ToolRegistry([where])
        ) as rt:
            rt.subscribe(events.append)
            result = await (await rt.create("s1")).send("go")
    assert result.text == "done"
    # the lone call ran in the task serving the turn, not in a task of the executor's
    assert ran_in[0].endswith("Runtime._supervise"), ran_in
    # each of the two calls ran in a task of its own, in the executor's task group
    assert ran_in[1].endswith("._run_one") and ran_in[2].endswith("._run_one"), ran_in
    assert durable == {0: True, 1: True, 2: True}
    started = [e.call_id for e in events if isinstance(e, ToolStarted)]
    finished = [e.call_id for e in events if isinstance(e, ToolFinished)]
    assert started[0] == finished[0] == "c0" and sorted(started) == sorted(finished)
    assert sorted(started) == ["c0", "c1", "c2"]
    second = model.requests[1].input
    assert [i.output for i in second if isinstance(i, FunctionCallOutput)] == ["ran 0"]


async def test_lone_calls_of_many_sessions_keep_the_shared_tool_limit(tmp_path: Path) -> None:
    """Four sessions, one call a round each, ``max_tool_calls=2``: never more than two run at
    once though no executor is involved, and two do overlap."""
    running = 0
    peak = 0
    full = anyio.Event()

    @tool
    async def where(n: int) -> str:
        """Wait until the limit is full once."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 2:
            full.set()
        with anyio.move_on_after(0.5):
            await full.wait()
        await anyio.sleep(0.01)
        running -= 1
        return f"ran {n}"

    scripts = {
        sid: [ModelResponse(items=(_call("c0", 0),)), ModelResponse(items=(AssistantMessage(text="ok"),))]
        for sid in "abcd"
    }  # fmt: skip

    class PerSession(ScriptedModel):
        async def create(self, request):  # type: ignore[no-untyped-def]
            first = next(i for i in request.input if type(i).__name__ == "UserMessage")
            return await models[first.text].create(request)

    models = {sid: ScriptedModel.from_responses(r) for sid, r in scripts.items()}
    with anyio.fail_after(15):
        async with (
            Runtime(
                Settings(store=tmp_path),
                gateway=PerSession(),
                tools=ToolRegistry([where]),
                max_tool_calls=2,
            ) as rt,
            anyio.create_task_group() as tg,
        ):
            for sid in scripts:
                tg.start_soon(rt.send, sid, sid)
    assert peak == 2


async def test_the_executor_inbox_starts_its_executor_once_and_only_when_sent_to() -> None:
    starts: list[object] = []
    got: list[RunTools] = []

    async def executor(inbox: object) -> None:
        async with inbox:  # type: ignore[attr-defined]
            async for request in inbox:  # type: ignore[attr-defined]
                got.append(request)
                request.reply.set(())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:

            def start(inbox: object) -> None:
                starts.append(inbox)
                tg.start_soon(executor, inbox)

            unused = ExecutorInbox(start)
            async with unused:
                pass
            assert not unused.started and starts == []

            used = ExecutorInbox(start)
            async with used:
                for round_ in (1, 2):
                    reply: Reply[tuple[FunctionCallOutput, ...]] = Reply()
                    await used.send(RunTools(round=round_, calls=(), reply=reply))
                    assert await reply.wait() == ()
                assert used.started
        # leaving the inbox closed it: the executor's loop ended and its task group could exit
    assert len(starts) == 1
    assert [r.round for r in got] == [1, 2]


@pytest.mark.parametrize("calls", [1, 2])
async def test_stopping_the_turn_stops_a_running_call_lone_or_not(
    tmp_path: Path, calls: int
) -> None:
    """The consumer of a streamed turn goes away while its calls hang: each is cancelled and
    gets an "interrupted" output, whether it ran in the sampler's task or the executor's."""
    began = anyio.Event()
    cancelled: list[int] = []

    @tool
    async def where(n: int) -> str:
        """Hang until stopped."""
        began.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(n)
        return "never"  # pragma: no cover

    model = ScriptedModel.from_responses(
        [
            ModelResponse(items=tuple(_call(f"c{i}", i) for i in range(calls))),
            ModelResponse(items=(AssistantMessage(text="next turn"),)),
        ]
    )

    async def consume(stream: AsyncIterator[object]) -> None:
        async for _ in stream:
            pass

    with anyio.fail_after(15):
        async with Runtime(
            Settings(store=tmp_path), gateway=model, tools=ToolRegistry([where])
        ) as rt:
            session = await rt.create("s1")
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume, session.stream("go"))
                await began.wait()
                tg.cancel_scope.cancel()
            result = await session.send("and now?")
    assert sorted(cancelled) == list(range(calls))
    assert result.text == "next turn"
    records = (await JsonlStore(tmp_path).read("s1")).records
    outputs = [
        r.item
        for r in records
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    ]
    assert [o.call_id for o in outputs] == [f"c{i}" for i in range(calls)]
    assert all(o.is_error and o.output.startswith("interrupted") for o in outputs)
