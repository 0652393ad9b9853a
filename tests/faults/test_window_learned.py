"""A model whose window nothing states runs on an assumed threshold; when the provider refuses
a request as too long and says its window, the session learns it: a ``settings_changed``
record keeps it (a resume runs the watermark policy on it) and the runtime starts its next
sessions on that endpoint and model with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from stowage import ToolRegistry, TurnResult
from stowage.core import (
    ErrorRecord,
    SessionRecord,
    SettingsChanged,
    SettingsChangedRecord,
    identity_from_records,
)
from stowage.storage import JsonlStore
from stowage.testing import Fault

from .test_usage_and_windows import big_reader


async def test_a_window_the_provider_states_in_a_refusal_is_learned(
    tmp_path: Path, fault_run: Any, brains: Any
) -> None:
    with anyio.fail_after(30):
        tools = ToolRegistry([brains.read_tool(3_000)])
        async with fault_run(
            tmp_path, "chat", False, brain=big_reader(3_000), tools=tools, context_window=None
        ) as run:
            assert isinstance(await run.turn("read file1"), TurnResult)
            await run.runtime.create("before", system="You read files.")
            await run.runtime.close("before")
            # the provider states its window (no count): the request is sent again with the
            # output reserve that window allows, and goes
            run.server.inject(Fault.context_length(tokens=None, limit=6_000), when="round")
            assert isinstance(await run.turn("read file2"), TurnResult)
            # a second refusal in the same run is recovered from; nothing is learned twice
            # the provider states its window (no count): the request is sent again with the
            # output reserve that window allows, and goes
            run.server.inject(Fault.context_length(tokens=None, limit=6_000), when="round")
            assert isinstance(await run.turn("read file3"), TurnResult)
            # a new session on the same endpoint and model starts with the window
            await run.runtime.create("next-one", system="You read files.")
            await run.runtime.close("next-one")
            # and one made before, when it continues
            await run.runtime.open("before")
            await run.runtime.close("before")
    learned = [r for r in run.log if isinstance(r, SettingsChangedRecord)]
    assert [(r.changes, r.source) for r in learned] == [
        ({"context_window": [None, 6_000]}, "provider")
    ]
    [refusal, _] = [r for r in run.log if isinstance(r, ErrorRecord)]
    assert learned[0].seq == refusal.seq + 1  # written with the refusal
    assert [(e.session_id, e.changes) for e in run.events if isinstance(e, SettingsChanged)] == [
        ("faulty", {"context_window": [None, 6_000]}),
        ("before", {"context_window": [None, 6_000]}),
    ]
    # what a resume folds: the session runs with the stated window from then on
    assert identity_from_records(run.log).context_window == 6_000
    store = JsonlStore(tmp_path)
    try:
        other = (await store.read("next-one")).records
        before = (await store.read("before")).records
    finally:
        await store.aclose()
    continued = [r for r in before if isinstance(r, SettingsChangedRecord)]
    assert [(r.changes, r.source) for r in continued] == [
        ({"context_window": [None, 6_000]}, "provider")
    ]
    assert isinstance(other[0], SessionRecord) and other[0].context_window == 6_000
    assert other[0].settings["window_source"] == "provider"


async def test_a_known_window_is_not_replaced_by_a_refusal(
    tmp_path: Path, fault_run: Any, brains: Any
) -> None:
    with anyio.fail_after(30):
        tools = ToolRegistry([brains.read_tool(3_000)])
        async with fault_run(tmp_path, "chat", False, brain=big_reader(3_000), tools=tools) as run:
            # the provider states its window (no count): the request is sent again with the
            # output reserve that window allows, and goes
            run.server.inject(Fault.context_length(tokens=None, limit=6_000), when="round")
            assert isinstance(await run.turn("read file1"), TurnResult)
    assert [r for r in run.log if isinstance(r, ErrorRecord)]
    assert not [r for r in run.log if isinstance(r, SettingsChangedRecord)]
