"""A tool call knows how much of its output the session's window can take
(``ToolContext.output``): ``read_file`` and ``recall_artifact`` return what fits whole, and of
more a part a compaction keeps, saying where to go on, instead of an output the window cannot
hold, which would be cut to a stub or compacted away and read again until the turn stopped as
a loop."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pydantic
import pytest
from stowage import (
    AssistantMessage,
    Event,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    ModelRequest,
    ModelResponse,
    Runtime,
    Settings,
    ToolContext,
    ToolFinished,
    ToolRegistry,
    UserMessage,
)
from stowage.core import (
    PREVIEW_MIN_CHARS,
    CompactionRecord,
    HistoryEntry,
    MicrocompactRecord,
    OutputBudget,
    current_tool_context,
)
from stowage.model import is_summary_request, scripted_usage
from stowage.policy import MIN_OUTPUT_CHARS, Accounting
from stowage.storage import JsonlStore
from stowage.testing import FakeOpenAIServer
from stowage.tools import workspace_tools
from stowage.tools._recall import recall_tool

WINDOW = 4_000


def _small_window(server: FakeOpenAIServer, store: Path, **changes: Any) -> Settings:
    """A session on ``server`` with a window of ``WINDOW`` tokens."""
    return Settings(
        model="small-window",
        base_url=server.base_url,
        api_key="k",
        store=store,
        context_window=WINDOW,
        max_output_tokens=500,
        durability="none",
        **changes,
    )


def _big_file(root: Path) -> str:
    text = "".join(f"line {i:04d}: alpha beta gamma delta epsilon zeta\n" for i in range(300))
    (root / "big.txt").write_text(text)
    return text


def _reader(request: ModelRequest) -> ModelResponse:
    """As a model that decides from each request alone: it reads ``big.txt`` until an output
    of that read is in the request after the newest user message, then answers."""
    items: tuple[AssistantMessage | FunctionCall, ...]
    if is_summary_request(request):
        items = (AssistantMessage(text="Summary: big.txt was read."),)
    else:
        users = [i for i, item in enumerate(request.input) if isinstance(item, UserMessage)]
        turn = request.input[users[-1] + 1 :]
        if any(isinstance(item, FunctionCallOutput) for item in turn):
            items = (AssistantMessage(text="read it"),)
        else:
            arguments = json.dumps({"path": "big.txt"})
            items = (FunctionCall(call_id=f"r{len(users)}", name="read_file", arguments=arguments),)
    return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)


async def test_a_read_larger_than_a_small_window_returns_a_part_it_can_show(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    whole = _big_file(workspace)  # ~15,600 characters: more than the whole usable budget
    events: list[Event] = []
    with anyio.fail_after(60):
        async with FakeOpenAIServer(brain=_reader) as server:
            settings = _small_window(
                server, tmp_path / "store", workspace=workspace, tools="workspace"
            )
            async with Runtime(settings) as rt:
                rt.subscribe(events.append)
                session = await rt.create("small", system="You read files.")
                for n in range(4):
                    assert (await session.send(f"turn {n}: read big.txt")).text == "read it"
    reads = [e for e in events if isinstance(e, ToolFinished) and e.name == "read_file"]
    assert len(reads) == 4  # one read a turn: nothing was taken out of view and read again
    usable_chars = Accounting.of(settings, ()).usable * 4
    assert all(not e.is_error and e.output_chars < usable_chars for e in reads)
    # what the model was shown: the file's first part whole, and where to go on
    shown = [
        item.output
        for body in server.requests
        for item in _outputs(body)
        if item.output.startswith("line 0000")
    ]
    assert shown
    part, note = shown[0].rsplit("\n[", 1)
    assert whole.startswith(part) and len(part) < len(whole)
    assert re.search(r"call read_file with offset=\d+ to continue", note)


def _outputs(body: dict[str, object]) -> list[FunctionCallOutput]:
    messages = body.get("messages")
    assert isinstance(messages, list)
    return [
        FunctionCallOutput(call_id=m["tool_call_id"], output=m["content"])
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool" and isinstance(m.get("content"), str)
    ]


def test_whole_is_half_the_window_under_the_cap_and_a_page_what_a_compaction_keeps() -> None:
    settings = Settings(model="m", context_window=32_000, max_output_tokens=2_000)
    accounting = Accounting.of(settings, ())
    assert accounting.budget is not None
    chars = accounting.budget.usable * 4.0
    budget = accounting.output_budget(4.0)
    assert budget is not None
    cap = max(PREVIEW_MIN_CHARS, settings.tool_output_cap * chars)
    assert budget.whole == int(min(cap, chars / 2))
    assert budget.page == int(settings.reattach_share * chars)
    assert (
        budget.part(budget.whole) == budget.whole and budget.part(budget.whole + 1) == budget.page
    )
    # a large window: whole is the cap, a quarter of usable
    large = Accounting.of(Settings(model="m", context_window=400_000, max_output_tokens=8_000), ())
    assert large.budget is not None
    assert large.output_budget(4.0) == OutputBudget(
        whole=int(settings.tool_output_cap * large.budget.usable * 4.0),
        page=int(settings.reattach_share * large.budget.usable * 4.0),
    )
    tiny = Accounting.of(Settings(model="m", context_window=1_500, max_output_tokens=200), ())
    assert tiny.output_budget(0.5) == OutputBudget(whole=MIN_OUTPUT_CHARS, page=MIN_OUTPUT_CHARS)
    off = Accounting.of(Settings(model="m", context_window=32_000, tool_output_cap=0), ())
    assert off.output_budget(4.0) is None
    no_reattach = Accounting.of(Settings(model="m", context_window=32_000, reattach_share=0), ())
    got = no_reattach.output_budget(4.0)
    assert got is not None and got.page == got.whole


@pytest.mark.parametrize("budget", [None, OutputBudget(whole=3_000, page=1_200)])
async def test_recall_artifact_pages_within_the_calls_budget(budget: OutputBudget | None) -> None:
    whole = "".join(f"row {i:05d}\n" for i in range(1_000))  # 10,000 characters
    short = whole[:2_500]
    history = [
        HistoryEntry(seq=5, item=FunctionCallOutput(call_id="c", output=whole)),
        HistoryEntry(seq=6, item=FunctionCallOutput(call_id="d", output=short)),
    ]

    async def no_log() -> tuple[()]:
        return ()

    tool = recall_tool(lambda: history, no_log)
    token = current_tool_context.set(
        ToolContext(session_id="s", round=1, call_id="c", name="recall_artifact", output=budget)
    )
    try:
        page = await tool.run(tool.validate({"ref": "R5"}))
        asked_more = await tool.run(tool.validate({"ref": "R5", "offset": 100, "length": 5_000}))
        tail = await tool.run(tool.validate({"ref": "R5", "offset": 8_000}))
        fits = await tool.run(tool.validate({"ref": "R6"}))
    finally:
        current_tool_context.reset(token)
    assert fits == short  # within what the window shows whole: back whole
    if budget is None:
        assert page == whole  # it fits one page: back whole, as before
        assert asked_more.split("\n", 1)[1] == whole[100:5_100]
        assert tail.split("\n", 1)[1] == whole[8_000:]
    else:
        header, body = page.split("\n", 1)
        assert body == whole[:1_200] and "more from offset 1200" in header
        assert asked_more.split("\n", 1)[1] == whole[100:1_300]
        assert tail.split("\n", 1)[1] == whole[8_000:]  # the last 2,000: whole


async def test_read_file_pages_within_the_calls_budget(tmp_path: Path) -> None:
    whole = _big_file(tmp_path)
    registry = workspace_tools(tmp_path, settings=Settings(store=tmp_path / ".stowage"))
    tool = registry.get("read_file")
    assert tool is not None
    context = ToolContext(
        session_id="s", round=1, call_id="c", name="read_file", output=OutputBudget(5_000, 2_000)
    )
    token = current_tool_context.set(context)
    try:
        first = await tool.run(tool.validate({"path": "big.txt"}))
        offset = int(re.findall(r"offset=(\d+)", first)[0])
        second = await tool.run(tool.validate({"path": "big.txt", "offset": offset}))
        rest = await tool.run(tool.validate({"path": "big.txt", "offset": len(whole) - 4_000}))
        context.output = OutputBudget(20_000, 2_000)
        all_of_it = await tool.run(tool.validate({"path": "big.txt"}))
    finally:
        current_tool_context.reset(token)
    part, note = first.rsplit("\n[", 1)
    assert part == whole[:2_000] and offset == 2_000
    assert "at most 2,000 bytes a call" in note
    assert second.rsplit("\n[", 1)[0] == whole[2_000:4_000]
    assert rest.rsplit("\n[", 1)[0] == whole[-4_000:]  # what is left fits whole: all of it
    assert all_of_it == whole  # the file fits the window whole
    # without a budget (a call outside a session) the whole file comes back
    assert await tool.run(tool.validate({"path": "big.txt"})) == whole


async def test_search_text_stops_at_what_the_window_shows(tmp_path: Path) -> None:
    _big_file(tmp_path)  # 300 lines, each holding "alpha"
    registry = workspace_tools(tmp_path, settings=Settings(store=tmp_path / ".stowage"))
    tool = registry.get("search_text")
    assert tool is not None
    arguments = tool.validate({"pattern": "alpha", "max_results": 1000})
    token = current_tool_context.set(
        ToolContext(
            session_id="s",
            round=1,
            call_id="c",
            name="search_text",
            output=OutputBudget(whole=1_500, page=1_000),
        )
    )
    try:
        within = await tool.run(arguments)
    finally:
        current_tool_context.reset(token)
    *found, note = within.splitlines()
    assert 0 < len(found) < 300 and sum(len(line) + 1 for line in found) <= 1_500
    assert f"stopped at {len(found)} matches, what the context window shows" in note
    # outside a session: the setting's bound only (200 matches by default)
    unbounded = (await tool.run(arguments)).splitlines()
    assert len(unbounded) == 201 and "stopped at 200 matches" in unbounded[-1]


def _paging_reader(request: ModelRequest) -> ModelResponse:
    """Calls ``dump``; shown a stub, pages it back with ``recall_artifact``; then answers."""
    items: tuple[AssistantMessage | FunctionCall, ...]
    if is_summary_request(request):
        items = (AssistantMessage(text="Summary: a dump was made."),)
    else:
        users = [i for i, item in enumerate(request.input) if isinstance(item, UserMessage)]
        outputs = [i for i in request.input[users[-1] + 1 :] if isinstance(i, FunctionCallOutput)]
        stub = next((o for o in outputs if "call recall_artifact with ref" in o.output), None)
        if not outputs:
            items = (FunctionCall(call_id="d1", name="dump", arguments="{}"),)
        elif stub is not None and len(outputs) == 1:
            ref = re.search(r"artifact (R\d+)", stub.output)
            assert ref is not None
            arguments = json.dumps({"ref": ref[1]})
            items = (FunctionCall(call_id="r1", name="recall_artifact", arguments=arguments),)
        else:
            items = (AssistantMessage(text=f"done after {len(outputs)} outputs"),)
    return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)


async def test_an_output_a_small_window_could_never_hold_is_capped_not_summarized(
    tmp_path: Path,
) -> None:
    dump = "".join(f"record {i:05d} of the dump\n" for i in range(500))  # 13,000 characters

    class NoArgs(pydantic.BaseModel):
        pass

    async def make_dump(_: NoArgs) -> str:
        return dump

    tools = ToolRegistry(
        [FunctionTool(name="dump", description="d", args_model=NoArgs, fn=make_dump)]
    )
    events: list[Event] = []
    with anyio.fail_after(60):
        async with FakeOpenAIServer(brain=_paging_reader) as server:
            settings = _small_window(server, tmp_path, tools="none")
            async with Runtime(settings, tools=tools) as rt:
                rt.subscribe(events.append)
                session = await rt.create("capped", system="You dump.")
                assert (await session.send("dump it")).text == "done after 2 outputs"
    store = JsonlStore(tmp_path)
    try:
        records = (await store.read("capped")).records
    finally:
        await store.aclose()
    assert not [r for r in records if isinstance(r, CompactionRecord)]  # no summary was made
    [capped] = [r for r in records if isinstance(r, MicrocompactRecord)]
    assert "shown by reference" in capped.reason
    recalled = [e for e in events if isinstance(e, ToolFinished) and e.name == "recall_artifact"]
    budget = Accounting.of(settings, ()).output_budget(4.0)
    assert budget is not None and budget.page < len(dump)
    assert len(recalled) == 1 and recalled[0].output_chars < len(dump)
