"""Checked summaries in live sessions: a lossy summarizer's summary is checked against the
user's instructions and corrections it absorbs, asked for once more naming what it missed,
and what it still misses is appended; after 20 compactions every instruction is in the
request, where the unchecked session lost some. Real JSONL logs; ``show`` says how each
summary fared."""

from __future__ import annotations

import html
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
from stowage import AssistantMessage, ModelRequest, ModelResponse, Runtime, Settings
from stowage.console import StoreReader, create_app
from stowage.core import CompactionRecord
from stowage.model._brain import ScriptedBrain, is_summary_request
from stowage.model._scripted import ScriptedModel
from stowage.policy import missed_probes
from stowage.storage import JsonlStore

INSTRUCTIONS = (
    "Never run the migration on the prod replica db-7.",
    "Use Python 3.12 only, not 3.13.",
    "Actually, the timeout is 37 s, not 30 s.",
    "Always write results to out/results.csv.",
)


def verbose(brain: ScriptedBrain) -> Callable[[ModelRequest], ModelResponse]:
    """``brain`` whose answers carry long working notes, so that each compaction frees room."""

    def answer(request: ModelRequest) -> ModelResponse:
        response = brain(request)
        if is_summary_request(request):
            return response
        notes = " (working notes) checked the config again;" * 40
        return ModelResponse(items=(AssistantMessage(text=response.text + notes),))

    return answer


def request_text(request: ModelRequest) -> str:
    return "\n".join(getattr(item, "text", "") for item in request.input)


async def run(tmp_path: Path, *, checked: bool) -> tuple[ScriptedModel, list[CompactionRecord]]:
    store = tmp_path / ("checked" if checked else "plain")
    settings = Settings(
        store=store,
        tools="none",
        auto_compact=False,
        durability="none",
        user_budget_chars=0,
        check_summaries=checked,
    )
    model = ScriptedModel(brain=verbose(ScriptedBrain(tool_rounds=0, loss=0.3, seed=5)))
    with anyio.fail_after(60):
        async with Runtime(settings, gateway=model) as rt:
            session = await rt.create("s", system="be brief")
            for n in range(20):
                said = INSTRUCTIONS[n] if n < len(INSTRUCTIONS) else f"step {n}: go on."
                await session.send(said)
                assert await session.compact()
            await session.send("what must hold?")
    records = (await JsonlStore(store).read("s")).records
    return model, [r for r in records if isinstance(r, CompactionRecord)]


async def test_every_instruction_survives_20_lossy_compactions_when_checked(
    tmp_path: Path,
) -> None:
    model, compactions = await run(tmp_path, checked=True)
    assert len(compactions) == 20
    last = [r for r in model.requests if not is_summary_request(r)][-1]
    assert missed_probes(request_text(last), INSTRUCTIONS) == ()
    # the first compaction keeps the newest user message verbatim: nothing to check yet
    assert compactions[0].check is None
    checks = [c.check for c in compactions[1:]]
    assert all(c is not None for c in checks)
    # the lossy summarizer did miss some, and was asked again for them
    asked = [c for c in checks if c is not None and c.missed_first]
    assert asked and all(c.asked_again for c in asked)
    # the second ask names what was missed
    second = [
        r for r in model.requests if is_summary_request(r) and "A check found" in request_text(r)
    ]
    assert len(second) == len(asked)
    # probes are carried: the last compaction still checks the first turn's instruction
    final = checks[-1]
    assert final is not None and INSTRUCTIONS[0] in final.probes


async def test_without_the_check_a_lossy_summarizer_loses_instructions(tmp_path: Path) -> None:
    model, compactions = await run(tmp_path, checked=False)
    last = [r for r in model.requests if not is_summary_request(r)][-1]
    assert missed_probes(request_text(last), INSTRUCTIONS), "the plain summaries kept all"
    assert all(c.check is None for c in compactions)


async def test_show_and_the_console_say_how_each_summary_fared(tmp_path: Path) -> None:
    _, compactions = await run(tmp_path, checked=True)
    lines = {c.check.line for c in compactions if c.check is not None}
    assert any("asked once more" in line for line in lines)
    show = [sys.executable, "-m", "stowage.cli", "show", "s", "--store", str(tmp_path / "checked")]
    shown = (await anyio.run_process(show, check=True)).stdout.decode()
    for line in lines:
        assert f"checked: {line}" in shown
    app = create_app(StoreReader(JsonlStore(tmp_path / "checked")), store_label="test")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        page = (await client.get("/s/s")).text
    assert '<dt>checked</dt><dd class="checked">' in page
    assert any(html.escape(line) in page for line in lines)
