"""No request above the window, whatever the turn: the shape an outside run caught sending
four requests above the window less its output reserve (window 4,000, 500 of output, three
small turns, then a ~2,900-token message and tool reads). Over real HTTP, on both wires: every
request the endpoint receives fits, and a turn that cannot fit stops with the figures."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import anyio
from stowage import (
    AssistantMessage,
    ContextLengthExceeded,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    ModelResponse,
    TurnResult,
    UserMessage,
)
from stowage.core import ErrorRecord, TurnRecord, tool_schema_tokens
from stowage.model import is_summary_request, scripted_usage
from stowage.tools import ToolRegistry

WINDOW, RESERVE = 4_000, 500


def two_reads() -> Any:
    """Each turn reads s1 then s2 (once each in view), then answers."""

    def brain(request: ModelRequest) -> ModelResponse:
        if is_summary_request(request):
            items: tuple[AssistantMessage | FunctionCall, ...] = (
                AssistantMessage(text="Summary: files were read."),
            )
        else:
            users = [i for i, item in enumerate(request.input) if isinstance(item, UserMessage)]
            turn = request.input[users[-1] + 1 :]
            done = sum(isinstance(i, FunctionCallOutput) for i in turn)
            if done >= 2:
                items = (AssistantMessage(text="done"),)
            else:
                path = f"s{done + 1}.txt"
                call = FunctionCall(
                    call_id=f"c{len(users)}-{done}",
                    name="read",
                    arguments=json.dumps({"path": path}),
                )
                items = (call,)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)

    return brain


def body_tokens(body: dict[str, Any]) -> int:
    """What the endpoint counts of a request: its text at 4 characters a token."""
    return math.ceil(len(json.dumps(body.get("messages") or body.get("input") or [])) / 4)


async def test_a_message_too_large_for_the_window_stops_its_turn_and_nothing_above_is_sent(
    tmp_path: Path, wire: Any, fault_run: Any, brains: Any
) -> None:
    tools = ToolRegistry([brains.read_tool(1_000)])
    settings = {"context_window": WINDOW, "max_output_tokens": RESERVE}
    with anyio.fail_after(60):
        async with fault_run(tmp_path, *wire, brain=two_reads(), tools=tools, **settings) as run:
            for n in range(3):
                assert isinstance(await run.turn(f"turn {n}: read s1 and s2"), TurnResult)
            big = "read s1 and s2, with these notes: " + "a line of context. " * 610
            stopped = await run.turn(big)
            schemas = tool_schema_tokens(run.runtime.tools.specs())
            bodies = list(run.server.requests)
    assert isinstance(stopped, ContextLengthExceeded), stopped
    assert "not sending it" in str(stopped)
    # every request fits the window less the output it asks for (the JSON framing of the
    # messages counts against this bound too: it is a loose upper figure)
    for body in bodies:
        assert body_tokens(body) + schemas <= WINDOW, body_tokens(body)
    # the turn is closed as stopped, with the figures in its error record
    kinds = [(type(r).__name__, getattr(r, "kind", getattr(r, "phase", ""))) for r in run.log]
    assert ("ErrorRecord", "context_overflow") in kinds
    assert kinds[-1] == ("TurnRecord", "stopped")
    assert isinstance(run.log[-1], TurnRecord) and isinstance(run.log[-2], ErrorRecord)
