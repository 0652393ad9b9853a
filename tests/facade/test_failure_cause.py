"""When one actor of a session fails, the others are cancelled; the asker is told what
stopped the session (the failure), never the cancellation that followed it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import stowage.actors._summary_jobs
from stowage import Runtime, SessionFailed, Settings
from stowage.model._scripted import ScriptedModel


async def test_a_failing_compactor_is_named_to_the_asker_not_the_cancellation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: object, job: object, accounting: object) -> object:
        raise TypeError("a bug in the summarizer")

    monkeypatch.setattr(stowage.actors._summary_jobs.Summarizer, "plan", broken)
    settings = Settings(
        store=tmp_path, model="scripted", context_window=3000, max_output_tokens=300
    )
    with anyio.fail_after(30), pytest.raises(SessionFailed) as failed:
        async with Runtime(settings, gateway=ScriptedModel()) as rt:
            session = await rt.create("s1")
            for _ in range(20):  # until a compaction is asked for
                await session.send("read the files in this directory please " * 20)
    assert "TypeError('a bug in the summarizer')" in str(failed.value)
    assert "Cancelled" not in str(failed.value)
