"""Invariant 1: the compactor only ever sees committed rounds, never half a tool step."""

from __future__ import annotations

from pathlib import Path

import anyio
from stowage import FunctionCall, FunctionCallOutput, Runtime, Settings
from stowage.model._brain import transcript_items
from stowage.model._scripted import ScriptedModel


async def test_every_summary_request_holds_whole_tool_steps_only(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        (tmp_path / "data.txt").write_text("x " * 2000)
        model = ScriptedModel(tool_rounds=3)
        settings = Settings(store=tmp_path / "st", compact_threshold=900, workspace=tmp_path)
        async with Runtime(settings, gateway=model) as rt:
            session = await rt.create("inv1", system="sys")
            for n in range(5):
                await session.send(f"task {n}: read data.txt")
        summaries = [r for r in model.requests if r.purpose == "summary"]
        assert len(summaries) >= 2
        for request in summaries:
            items = transcript_items(request.input)
            calls = {i.call_id for i in items if isinstance(i, FunctionCall)}
            outputs = {i.call_id for i in items if isinstance(i, FunctionCallOutput)}
            assert calls, "the summarized snapshot should contain tool steps"
            assert calls == outputs
