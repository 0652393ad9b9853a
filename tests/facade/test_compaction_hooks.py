"""Python hooks around a compaction: ``before`` adds focus text to the summary request or
refuses a manual compaction, ``after`` observes each one that landed; a broken hook never
stops the compaction that keeps a session in its window."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
from stowage import (
    CompactionAbout,
    CompactionHooks,
    CompactionSkipped,
    CompactionVetoed,
    Event,
    HistoryCompacted,
    Runtime,
    Settings,
)
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore


def summary_texts(model: ScriptedModel) -> list[str]:
    """The text of every summary request the model got (instructions, focus, transcript)."""
    return [
        "\n".join(getattr(item, "text", "") for item in r.input)
        for r in model.requests
        if r.purpose == "summary"
    ]


async def test_before_adds_focus_and_after_observes_automatic_compactions(tmp_path: Path) -> None:
    seen: list[CompactionAbout] = []
    landed: list[HistoryCompacted] = []

    async def before(about: CompactionAbout) -> str:
        await anyio.lowlevel.checkpoint()  # an async hook is awaited
        seen.append(about)
        return f"keep the ticket numbers (round {about.round})"

    model = ScriptedModel(tool_rounds=2)
    (tmp_path / "data.txt").write_text("ticket 4411 " * 400)
    settings = Settings(store=tmp_path / "st", compact_threshold=900, workspace=tmp_path)
    hooks = CompactionHooks(before=before, after=landed.append)
    with anyio.fail_after(60):
        async with Runtime(settings, gateway=model, compaction_hooks=hooks) as rt:
            session = await rt.create("h1")
            for n in range(4):
                await session.send(f"task {n}: read data.txt")
    texts = summary_texts(model)
    assert seen and len(texts) == len(seen)
    assert all(not about.manual and about.session_id == "h1" for about in seen)
    for about, text in zip(seen, texts, strict=True):
        assert f"keep the ticket numbers (round {about.round})" in text
    assert [e.session_id for e in landed] == ["h1"] * len(landed) and landed
    log = (await JsonlStore(tmp_path / "st").read("h1")).records
    assert len([r for r in log if type(r).__name__ == "CompactionRecord"]) == len(landed)


async def test_before_vetoes_a_manual_compaction_and_cannot_veto_an_automatic_one(
    tmp_path: Path,
) -> None:
    def before(about: CompactionAbout) -> None:
        raise CompactionVetoed(f"not now ({'manual' if about.manual else 'automatic'})")

    events: list[Event] = []
    model = ScriptedModel(tool_rounds=2)
    (tmp_path / "data.txt").write_text("x " * 2000)
    settings = Settings(store=tmp_path / "st", compact_threshold=900, workspace=tmp_path)
    with anyio.fail_after(60):
        async with Runtime(
            settings, gateway=model, compaction_hooks=CompactionHooks(before=before)
        ) as rt:
            rt.subscribe(events.append)
            session = await rt.create("h2")
            for n in range(4):
                await session.send(f"task {n}: read data.txt")
            automatic = [e for e in events if isinstance(e, HistoryCompacted)]
            assert automatic, "the automatic compactions went on despite the veto"
            before_manual = len(summary_texts(model))
            assert await session.compact("everything") is False
    skipped = [e for e in events if isinstance(e, CompactionSkipped)]
    assert skipped[-1].reason == "vetoed by the before-compaction hook: not now (manual)"
    assert len(summary_texts(model)) == before_manual  # no summary was asked for
    log = (await JsonlStore(tmp_path / "st").read("h2")).records
    assert len([r for r in log if type(r).__name__ == "CompactionRecord"]) == len(automatic)


async def test_a_hook_that_raises_is_logged_and_changes_nothing(tmp_path: Path) -> None:
    def before(about: CompactionAbout) -> str:
        raise RuntimeError("hook bug")

    calls: list[int] = []

    def after(event: HistoryCompacted) -> None:
        calls.append(event.round)
        raise RuntimeError("after bug")

    model = ScriptedModel(tool_rounds=2)
    (tmp_path / "data.txt").write_text("x " * 2000)
    settings = Settings(store=tmp_path / "st", compact_threshold=900, workspace=tmp_path)
    with anyio.fail_after(60):
        async with Runtime(
            settings, gateway=model, compaction_hooks=CompactionHooks(before=before, after=after)
        ) as rt:
            session = await rt.create("h3")
            for n in range(4):
                await session.send(f"task {n}: read data.txt")
            assert await session.compact() is True
    # every compaction landed, and the failing after hook was called for each (never dropped)
    log = (await JsonlStore(tmp_path / "st").read("h3")).records
    assert len(calls) == len([r for r in log if type(r).__name__ == "CompactionRecord"]) >= 2
