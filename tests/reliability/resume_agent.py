"""A session driven to ``TURNS`` turns against an OpenAI-compatible endpoint; the test kills it
with SIGKILL while a request is in flight and runs it again, which continues the open turn.

    python resume_agent.py URL STORE TURNS
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pydantic
from stowage import FunctionTool, Runtime, Settings, ToolRegistry


class ReadArgs(pydantic.BaseModel):
    n: int


async def read(args: ReadArgs) -> str:
    return f"file {args.n}: " + "lorem ipsum dolor sit amet " * 100


async def main(url: str, store: str, turns: int) -> None:
    settings = Settings(
        store=Path(store),
        model="fake-model",
        base_url=url,
        api_key="sk-test",
        tools="none",
        context_window=5000,
        max_output_tokens=500,
        user_budget_chars=2000,
        # plans are waited for: the order of requests does not depend on timing
        background_compaction=False,
    )
    tools = ToolRegistry(
        [FunctionTool(name="read", description="read file n", args_model=ReadArgs, fn=read)]
    )
    async with Runtime(settings, tools=tools) as rt:
        session = await rt.open("s1")
        if session.state.turn_open:
            await session.continue_turn()
        while session.state.turn < turns:
            n = session.state.turn + 1
            await session.send(f"task {n}: read three files and report")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
