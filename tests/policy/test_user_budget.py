"""On a small window the kept user words are capped by the window, and the cap is recorded."""

from __future__ import annotations

from pathlib import Path

import anyio
from stowage import Runtime, Settings, UserMessage, replay
from stowage.core._records import CompactionRecord
from stowage.model._scripted import ScriptedModel
from stowage.policy._check import check_log
from stowage.storage import JsonlStore


async def test_small_window_compactions_keep_user_words_within_a_quarter_of_usable(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        (tmp_path / "data.txt").write_text("numbers " * 400)
        settings = Settings(
            model="small-model",
            store=tmp_path / "st",
            workspace=tmp_path,
            context_window=4000,
            max_output_tokens=400,
        )
        async with Runtime(settings, gateway=ScriptedModel(tool_rounds=2)) as rt:
            session = await rt.create("small", system="sys")
            for n in range(8):
                await session.send(f"request {n}: " + "please keep this exact wording " * 12)
        store = JsonlStore(tmp_path / "st")
        full = await store.read("small")
        tail = await store.read_tail("small")
        await store.aclose()
        compactions = [r for r in full.records if isinstance(r, CompactionRecord)]
        assert compactions, "the small window should have forced compactions"
        for record in compactions:
            assert record.user_budget_chars is not None
            assert record.user_budget_chars < settings.user_budget_chars
            users = [e.item for e in record.retained if isinstance(e.item, UserMessage)]
            older = users[:-1]  # the newest is always kept, even alone over budget
            assert sum(len(u.text) for u in older) <= record.user_budget_chars
        assert check_log("small", full.records, tail.records).ok
        assert replay("small", tail.records).history == replay("small", full.records).history
