"""``stowage context`` and ``list`` count every token once: the tool schemas are shown apart,
outside usable, and the tokens in use are the history's only, whether the provider reported
usage (which includes the schemas) or the figure is estimated. Run in process on a log in a
real JSONL store.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import anyio
import pytest
from stowage.cli._sessions import context_main, context_report, summarize
from stowage.core import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    Settings,
    SystemMessage,
    Usage,
    UserMessage,
)
from stowage.facade import recorded_budget
from stowage.storage import JsonlStore

WINDOW = 16_000
TOOLS = ("read_file", "list_dir", "search_text")
SYSTEM = "You answer questions about the repository. " * 10
USER = "What does the README say about compaction? " * 5
OUTPUT = "## Compaction policy\nBudget: usable = window - reserve - tool schemas.\n" * 20


def _log(*, reported: bool) -> list[Record]:
    """A session with the workspace tools on a 16,000-token window: one round reading a
    file; its usage (when ``reported``) counts the tool schemas, as providers do."""
    settings = Settings(model="some-model", context_window=WINDOW)
    session = SessionRecord(
        seq=1, model="some-model", context_window=WINDOW, tools=TOOLS, settings=settings.public()
    )
    tool_tokens = _tool_tokens([session])
    history_tokens = math.ceil(len(SYSTEM + USER) / 4) + 5
    usage = Usage(
        input_tokens=tool_tokens + history_tokens,
        output_tokens=20,
        total_tokens=tool_tokens + history_tokens + 20,
    )
    return [
        session,
        ItemRecord(seq=2, item=SystemMessage(text=SYSTEM)),
        ItemRecord(seq=3, item=UserMessage(text=USER)),
        ItemRecord(seq=4, item=AssistantMessage(text="Reading it."), round=1),
        ItemRecord(
            seq=5,
            item=FunctionCall(call_id="c1", name="read_file", arguments='{"path": "README.md"}'),
            round=1,
        ),
        ItemRecord(seq=6, item=FunctionCallOutput(call_id="c1", output=OUTPUT), round=1),
        RoundCommittedRecord(
            seq=7, round=1, usage=usage if reported else None, first_seq=4, last_seq=7
        ),
    ]


def _tool_tokens(records: list[Record]) -> int:
    budget = recorded_budget(records).budget
    assert budget is not None
    return budget.tool_tokens


@pytest.mark.parametrize("reported", [True, False], ids=["reported", "estimated"])
def test_context_keeps_the_tool_schemas_out_of_usable_and_out_of_use(reported: bool) -> None:
    records = _log(reported=reported)
    tool_tokens = _tool_tokens(records)
    assert tool_tokens > 300  # the three workspace tools
    report = context_report("s", records)
    assert report["tool_schemas"] == tool_tokens
    assert report["usable"] == WINDOW - report["output_reserve"] - tool_tokens
    schemas = report["parts"]["tool schemas"]
    assert schemas == {"tokens": tool_tokens, "percent_of_usable": None, "outside_usable": True}
    history = sum(p["tokens"] for p in report["parts"].values() if not p["outside_usable"])
    # in use is the history's parts (each rounded up) give or take the provider's count,
    # never history plus the schemas again
    assert report["tokens"] < tool_tokens + history - 100
    assert abs(report["tokens"] - history) <= 0.05 * history
    assert report["estimated"] is not reported and report["floored"] is False


async def test_the_context_command_shows_the_schemas_outside_usable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = _log(reported=True)
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path, durability="none")
        await store.create("s", records)
        assert await context_main(argparse.Namespace(session="s", json=False), store) == 0
    text = capsys.readouterr().out
    report = context_report("s", records)
    tools, usable, tokens = report["tool_schemas"], report["usable"], report["tokens"]
    assert f"- tool schemas {tools:,} = usable {usable:,}" in text
    assert f"in use {tokens:,} of {usable:,} tokens: {100 * tokens / usable:.0f}%" in text
    assert f"the {tools:,} tokens of tool schemas are outside usable" in text
    (line,) = [line for line in text.splitlines() if line.strip().startswith("tool schemas")]
    assert line.split()[2:] == [f"{tools:,}", "outside", "usable"]
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path, durability="none")
        assert await context_main(argparse.Namespace(session="s", json=True), store) == 0
    assert json.loads(capsys.readouterr().out)["tool_schemas"] == tools


def test_list_shows_history_against_usable_and_the_schemas_apart() -> None:
    records = _log(reported=True)
    row = summarize("s", records)
    report = context_report("s", records)
    assert row.tokens == report["tokens"] and row.usable == report["usable"]
    assert row.tool_schemas == report["tool_schemas"]
    assert row.percent_of_usable is not None and row.percent_of_usable < 15
