"""Re-grounding: every Nth full compaction is summarized from the log's original records."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import anyio
from stowage import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    ModelResponse,
    Runtime,
    Settings,
    UserMessage,
)
from stowage.core import CompactionRecord
from stowage.model._brain import is_summary_request, scripted_usage
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore

_spec = importlib.util.spec_from_file_location(
    "policy_session", Path(__file__).with_name("test_policy_session.py")
)
assert _spec is not None and _spec.loader is not None
policy_session = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(policy_session)


class Forgetful:
    """Two reads a turn, then an answer; every summary keeps nothing but its own number."""

    def __init__(self) -> None:
        self.summaries = 0
        self.calls = 0

    def __call__(self, request: ModelRequest) -> ModelResponse:
        items: tuple[AssistantMessage | FunctionCall, ...]
        if is_summary_request(request):
            self.summaries += 1
            items = (AssistantMessage(text=f"SUMMARY {self.summaries}"),)
        else:
            last = max(i for i, item in enumerate(request.input) if isinstance(item, UserMessage))
            if sum(isinstance(i, FunctionCall) for i in request.input[last:]) < 2:
                self.calls += 1
                n = self.calls
                items = (FunctionCall(call_id=f"c{n}", name="big", arguments=json.dumps({"n": n})),)
            else:
                items = (AssistantMessage(text="done"),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)


def texts(request: ModelRequest) -> str:
    return "\n".join(
        getattr(item, "text", None) or getattr(item, "output", "") for item in request.input
    )


async def run(
    tmp_path: Path, turns: int, **changes: object
) -> tuple[ScriptedModel, list[CompactionRecord]]:
    model = ScriptedModel(brain=Forgetful())
    settings = Settings(
        store=tmp_path, model="scripted", context_window=4000, max_output_tokens=500,
        user_budget_chars=300, background_compaction=False, soft_mark=0.6, compact_mark=0.6,
        target_after=0.3, **changes,
    )  # fmt: skip
    with anyio.fail_after(60):
        async with Runtime(settings, gateway=model, tools=policy_session.big_tools(2000)) as rt:
            session = await rt.create("s1", system="be brief")
            for n in range(turns):
                await session.send(f"turn {n}: remember the code word FACT-{n}")
    disk = JsonlStore(tmp_path)
    try:
        records = (await disk.read("s1")).records
    finally:
        await disk.aclose()
    return model, [r for r in records if isinstance(r, CompactionRecord)]


async def test_every_second_full_compaction_is_summarized_from_the_original_records(
    tmp_path: Path,
) -> None:
    model, compactions = await run(tmp_path, turns=8, reground_every=2)
    fulls = [c for c in compactions if c.kind == "full"]
    assert len(fulls) >= 4
    assert [c.regrounded for c in fulls[:4]] == [False, True, False, True]
    summaries = [r for r in model.requests if is_summary_request(r)]
    _, second, third, fourth = summaries[:4]
    # the second reads what the first summary dropped, whole: the first turn's words and
    # outputs, not "SUMMARY 1"
    assert not any(isinstance(i, CompactionSummary) and i.text == "SUMMARY 1" for i in second.input)
    assert "FACT-0" in texts(second)
    # its outputs are whole where they fit the summary budget, the newest first
    shown = [i.output for i in second.input if isinstance(i, FunctionCallOutput)]
    whole = ["[output stored as artifact" not in o for o in shown]
    assert any(whole) and whole == sorted(whole)
    # the usual way: from the summary before it
    assert [i.text for i in third.input if isinstance(i, CompactionSummary)] == ["SUMMARY 2"]
    # the fourth starts from the second's summary (its anchor) and reads everything after it
    anchors = [i.text for i in fourth.input if isinstance(i, CompactionSummary)]
    assert anchors == ["SUMMARY 2"]
    after = fulls[1].covers_through
    assert after > 0


async def test_without_the_setting_no_compaction_is_regrounded(tmp_path: Path) -> None:
    _, compactions = await run(tmp_path, turns=6)
    assert compactions and not any(c.regrounded for c in compactions)


async def test_a_manual_compaction_can_be_regrounded(tmp_path: Path) -> None:
    model = ScriptedModel(brain=Forgetful())
    settings = Settings(store=tmp_path, model="scripted", context_window=4000, max_output_tokens=500,
                        user_budget_chars=300, background_compaction=False, soft_mark=0.6,
                        compact_mark=0.6, target_after=0.3)  # fmt: skip
    async with Runtime(settings, gateway=model, tools=policy_session.big_tools(2000)) as rt:
        session = await rt.create("s1", system="be brief")
        for n in range(6):
            await session.send(f"turn {n}: remember the code word FACT-{n}")
        assert any(isinstance(i, CompactionSummary) for i in session.state.items)
        # a turn since the last compaction: a summary now replaces more than itself (none
        # that frees nothing is written)
        await session.send("turn 6: and then the last one")
        assert await session.compact(reground=True)
        assert session.state.reground_base > 0 and session.state.fulls_since_reground == 0
    summary = [r for r in model.requests if is_summary_request(r)][-1]
    assert "FACT-0" in texts(summary)
    assert not any(isinstance(i, CompactionSummary) for i in summary.input)
