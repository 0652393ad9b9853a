"""``Session.stream``: a turn's events as they happen, then its result; stopping the consumer
interrupts the turn cleanly (logged, nothing orphaned) and the session takes the next turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest
from stowage import (
    AssistantDelta,
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    ModelResponse,
    RoundCommitted,
    Runtime,
    Settings,
    ToolFinished,
    ToolRegistry,
    ToolStarted,
    TurnFinished,
    TurnResult,
    replay,
    tool,
)
from stowage.core import ItemRecord, ResponseDone, StreamEvent, TextDelta, TurnRecord
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore


@tool
async def echo(text: str) -> str:
    """Repeat the text."""
    return f"echo: {text}"


def call(call_id: str, name: str, arguments: str) -> FunctionCall:
    return FunctionCall(call_id=call_id, name=name, arguments=arguments)


class StallingModel(ScriptedModel):
    """Plays responses like ``ScriptedModel``; the stream of request ``stall_at`` (0-based)
    sends its first text and then never finishes (a provider that hangs)."""

    def __init__(self, responses: list[ModelResponse], *, stall_at: int) -> None:
        super().__init__(brain=ScriptedModel.from_responses(responses).brain)
        self.stall_at = stall_at
        self.streams = 0
        self.stalled = anyio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        index = self.streams
        self.streams += 1
        if index != self.stall_at:
            async for event in super().stream(request):
                yield event
            return
        yield TextDelta(text="thinking about ")
        self.stalled.set()
        await anyio.sleep_forever()
        yield ResponseDone(response=ModelResponse(items=()))  # pragma: no cover


async def test_stream_yields_deltas_tool_events_and_ends_with_the_result(tmp_path: Path) -> None:
    model = ScriptedModel.from_responses(
        [
            ModelResponse(items=(call("c1", "echo", '{"text": "hi"}'),)),
            ModelResponse(items=(AssistantMessage(text="the echo said hi, all done here"),)),
            ModelResponse(items=(AssistantMessage(text="yes"),)),
        ]
    )
    with anyio.fail_after(15):
        async with Runtime(
            Settings(store=tmp_path), gateway=model, tools=ToolRegistry([echo])
        ) as rt:
            session = await rt.create("s1")
            seen = [event async for event in session.stream("go")]
            later = await session.send("again?")  # send still works, after a stream
    kinds = [type(e) for e in seen]
    assert kinds.index(ToolStarted) < kinds.index(ToolFinished) < kinds.index(RoundCommitted)
    deltas = "".join(e.text for e in seen if isinstance(e, AssistantDelta))
    assert deltas == "the echo said hi, all done here"
    assert isinstance(seen[-2], TurnFinished)
    result = seen[-1]
    assert isinstance(result, TurnResult)
    assert result.text == "the echo said hi, all done here" and result.rounds == 2
    assert later.text == "yes" and later.stopped == "answered"
    assert all(getattr(e, "session_id", "s1") == "s1" for e in seen[:-1])


@pytest.mark.parametrize("closing", [True, False], ids=["aclosing", "plain-break"])
async def test_breaking_out_mid_stream_interrupts_the_turn_and_the_session_goes_on(
    tmp_path: Path, closing: bool
) -> None:
    """With ``aclosing`` the turn stops at the break; with a plain ``break`` the event loop
    closes the abandoned generator soon after, and the next turn waits for that."""
    model = StallingModel(
        [ModelResponse(items=(AssistantMessage(text="second answer"),))], stall_at=0
    )
    with anyio.fail_after(20):
        async with Runtime(Settings(store=tmp_path), gateway=model) as rt:
            session = await rt.create("s1")
            if closing:
                async with aclosing(session.stream("first")) as events:
                    async for event in events:
                        if isinstance(event, AssistantDelta):
                            break  # the model is still streaming: stop the turn here
            else:
                async for event in session.stream("first"):
                    if isinstance(event, AssistantDelta):
                        break
            result = await session.send("second")
    assert result.text == "second answer"
    log = await JsonlStore(tmp_path).read("s1")
    turns = [(r.turn, r.phase) for r in log.records if isinstance(r, TurnRecord)]
    assert turns == [(1, "started"), (1, "interrupted"), (2, "started"), (2, "finished")]
    state = replay("s1", log.records)
    assert not state.turn_open and not state.open_calls


async def test_cancelling_the_consumer_during_a_tool_gives_an_interrupted_output(
    tmp_path: Path,
) -> None:
    started = anyio.Event()
    cancelled: list[bool] = []

    @tool
    async def wait_forever() -> str:
        """Block until cancelled."""
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(True)
        return "never"  # pragma: no cover

    model = ScriptedModel.from_responses(
        [
            ModelResponse(
                items=(call("w1", "wait_forever", "{}"), call("e1", "echo", '{"text": "x"}'))
            ),
            ModelResponse(items=(AssistantMessage(text="next turn answer"),)),
        ]
    )

    async def consume(session_stream: AsyncIterator[object]) -> None:
        async for _ in session_stream:
            pass

    with anyio.fail_after(20):
        async with Runtime(
            Settings(store=tmp_path), gateway=model, tools=ToolRegistry([wait_forever, echo])
        ) as rt:
            session = await rt.create("s1")
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume, session.stream("start"))
                await started.wait()
                tg.cancel_scope.cancel()
            result = await session.send("and now?")
    assert cancelled == [True]
    assert result.text == "next turn answer"
    log = await JsonlStore(tmp_path).read("s1")
    outputs = {
        r.item.call_id: r.item
        for r in log.records
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    }
    assert outputs["w1"].is_error and outputs["w1"].output.startswith("interrupted:")
    assert outputs["e1"].output == "echo: x"
    turns = [r.phase for r in log.records if isinstance(r, TurnRecord)]
    assert turns == ["started", "interrupted", "started", "finished"]
    # the second request carried the whole first round: no orphan call
    second = model.requests[-1]
    ids = [i.call_id for i in second.input if isinstance(i, FunctionCallOutput)]
    assert ids == ["w1", "e1"]
