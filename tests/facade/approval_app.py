"""Tools and phases for the approval tests that run in separate processes.

``python approval_app.py start STORE`` starts a turn that stops for approval;
``python approval_app.py approve STORE`` resumes it in a new process and approves the call.
``GUARD_MARKER`` names a file the approved tool writes its process id to. ``registry`` is also
what ``stowage ... --tools-from approval_app:registry`` loads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from stowage import (
    AssistantMessage,
    FunctionCall,
    ModelResponse,
    Runtime,
    Settings,
    ToolRegistry,
    tool,
)
from stowage.model._scripted import ScriptedModel


@tool(needs_approval=True)
def guarded(note: str = "") -> str:
    """Do something a person must allow first."""
    Path(os.environ["GUARD_MARKER"]).write_text(str(os.getpid()))
    return f"guarded ran {note}".strip()


@tool
def echo(text: str) -> str:
    """Repeat the text."""
    return f"echo: {text}"


registry = ToolRegistry([guarded, echo])
#: for the scripted model, which calls the tools in turn: the guarded one comes up every round
guarded_only = ToolRegistry([guarded])


async def main(phase: str, store: Path) -> None:
    if phase == "start":
        model = ScriptedModel.from_responses(
            [
                ModelResponse(
                    items=(
                        FunctionCall(call_id="g1", name="guarded", arguments='{"note": "n"}'),
                        FunctionCall(call_id="e1", name="echo", arguments='{"text": "x"}'),
                    )
                )
            ]
        )
    else:
        model = ScriptedModel.from_responses(
            [ModelResponse(items=(AssistantMessage(text="finished after approval"),))]
        )
    async with Runtime(Settings(store=store, tools="none"), gateway=model, tools=registry) as rt:
        if phase == "start":
            session = await rt.create("s1")
            result = await session.send("do the guarded thing")
            print(result.stopped)
        else:
            session = await rt.resume("s1")
            print(",".join(c.call_id for c in session.pending_approvals))
            result = await session.approve("g1")
            print(result.stopped, result.text, sep="|")
        print(",".join(c.call_id for c in session.pending_approvals))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], Path(sys.argv[2]))
