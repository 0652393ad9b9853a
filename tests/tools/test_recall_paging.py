"""A huge tool output: capped to head + tail + reference before the model sees it, whole in the
log, and paged through by ``recall_artifact`` with an offset and a length."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pydantic
import pytest
from stowage import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    ModelRequest,
    ModelResponse,
    Runtime,
    Settings,
    ToolRegistry,
    UserMessage,
    replay,
)
from stowage.core import FunctionCallOutput as Output
from stowage.core import HistoryEntry, ItemRecord, MicrocompactRecord
from stowage.model._brain import is_summary_request, scripted_usage
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore
from stowage.tools import ToolError
from stowage.tools._recall import PAGE_CHARS, recall_tool

HUGE = 200_000


class DumpArgs(pydantic.BaseModel):
    n: int


def huge_output(n: int) -> str:
    return "".join(f"line {i:06d} of dump {n}\n" for i in range(HUGE // 20))[:HUGE]


def dump_tools() -> ToolRegistry:
    async def dump(args: DumpArgs) -> str:
        return huge_output(args.n)

    return ToolRegistry(
        [FunctionTool(name="dump", description="dump", args_model=DumpArgs, fn=dump)]
    )


def brain(request: ModelRequest) -> ModelResponse:
    """One dump call per turn, then an answer; summaries are short."""
    if is_summary_request(request):
        items: tuple[AssistantMessage | FunctionCall, ...] = (AssistantMessage(text="SUMMARY"),)
    else:
        last_user = max(i for i, x in enumerate(request.input) if isinstance(x, UserMessage))
        done = sum(isinstance(x, FunctionCall) for x in request.input[last_user:])
        items = (
            (FunctionCall(call_id=f"d{last_user}", name="dump", arguments=json.dumps({"n": 1})),)
            if not done
            else (AssistantMessage(text="read it"),)
        )
    return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)


async def test_a_huge_output_reaches_the_model_as_head_and_tail_and_the_log_keeps_it_whole(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        model = ScriptedModel(brain=brain)
        settings = Settings(store=tmp_path, model="scripted", context_window=32_000)
        async with Runtime(settings, gateway=model, tools=dump_tools()) as rt:
            session = await rt.create("s1", system="sys")
            assert (await session.send("dump it")).text == "read it"
        # the second round of the turn carried the output: capped, never the whole of it
        [answer_request] = [r for r in model.requests if r.purpose == "round"][1:]
        [shown] = [i for i in answer_request.input if isinstance(i, FunctionCallOutput)]
        assert len(shown.output) < 4_000
        whole = huge_output(1)
        assert shown.output.startswith(whole[:1000]) and shown.output.endswith(whole[-300:])
        assert "recall_artifact" in shown.output and "offset" in shown.output
        # no summary was asked for: capping is not a compaction
        assert not [r for r in model.requests if r.purpose == "summary"]
        store = JsonlStore(tmp_path)
        try:
            records = (await store.read("s1")).records
        finally:
            await store.aclose()
        [output_record] = [
            r for r in records if isinstance(r, ItemRecord) and isinstance(r.item, Output)
        ]
        assert isinstance(output_record.item, Output) and output_record.item.output == whole
        [capped] = [r for r in records if isinstance(r, MicrocompactRecord)]
        assert capped.stubbed == (output_record.seq,) and "cap" in capped.reason
        assert f"R{output_record.seq}" in shown.output
        assert output_record.seq in replay("s1", records).stubbed


async def test_recall_artifact_pages_through_the_original_with_offset_and_length() -> None:
    whole = huge_output(7)
    history = [HistoryEntry(seq=5, item=Output(call_id="c", output=whole))]

    async def no_log() -> tuple[()]:
        return ()

    tool = recall_tool(lambda: history, no_log)
    first = await tool.run(tool.validate({"ref": "R5", "offset": 0, "length": 1000}))
    header, body = first.split("\n", 1)
    assert body == whole[:1000]
    assert "chars 0-1000 of 200000" in header and "more from offset 1000" in header
    middle = await tool.run(tool.validate({"ref": "R5", "offset": 150_000, "length": 500}))
    assert middle.split("\n", 1)[1] == whole[150_000:150_500]
    last = await tool.run(tool.validate({"ref": "R5", "offset": 199_900}))
    assert last.split("\n", 1)[1] == whole[199_900:] and "that is the end" in last
    # without a length, one page at most
    page = await tool.run(tool.validate({"ref": "R5"}))
    assert page.split("\n", 1)[1] == whole[:PAGE_CHARS]
    with pytest.raises(ToolError, match="past the end"):
        await tool.run(tool.validate({"ref": "R5", "offset": 300_000}))
    # a short output still comes back whole, as before
    history.append(HistoryEntry(seq=9, item=Output(call_id="d", output="short")))
    assert await tool.run(tool.validate({"ref": "R9"})) == "short"
