"""Every round records what its request was built from, and the log rebuilds it."""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import replace
from pathlib import Path

import anyio
from stowage import (
    FunctionCallOutput,
    HistoryCompacted,
    Microcompacted,
    Runtime,
    Settings,
)
from stowage.core import ItemRecord, RoundCommittedRecord, request_bytes
from stowage.model._brain import is_summary_request
from stowage.model._scripted import ScriptedModel
from stowage.policy import check_requests
from stowage.storage import JsonlStore

_spec = importlib.util.spec_from_file_location(
    "policy_session", Path(__file__).with_name("test_policy_session.py")
)
assert _spec is not None and _spec.loader is not None
policy_session = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(policy_session)


async def run_session(tmp_path: Path) -> tuple[ScriptedModel, list[object], list[object]]:
    model = ScriptedModel(brain=policy_session.agent_brain())
    events: list[object] = []
    settings = Settings(
        store=tmp_path,
        model="scripted",
        context_window=4000,
        max_output_tokens=500,
        user_budget_chars=2000,
        soft_mark=0.5,
        compact_mark=0.7,
        micro_min_free=0.0,
    )
    with anyio.fail_after(30):
        async with Runtime(settings, gateway=model, tools=policy_session.big_tools(1000)) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", system="be brief", objective="read everything")
            for n in range(6):
                await session.send(f"task {n}: " + "details " * 100)
    store = JsonlStore(tmp_path)
    try:
        records = list((await store.read("s1")).records)
    finally:
        await store.aclose()
    return model, events, records


async def test_each_round_records_the_hash_of_the_request_it_sent_and_the_log_rebuilds_it(
    tmp_path: Path,
) -> None:
    model, events, records = await run_session(tmp_path)
    assert any(isinstance(e, HistoryCompacted) for e in events)
    assert any(isinstance(e, Microcompacted) for e in events)
    sent = [r for r in model.requests if not is_summary_request(r)]
    commits = [r for r in records if isinstance(r, RoundCommittedRecord)]
    assert len(commits) == len(sent) > 10
    for commit, request in zip(commits, sent, strict=True):
        assert commit.manifest is not None
        assert commit.manifest.sha256 == hashlib.sha256(request_bytes(request)).hexdigest()
        names = [s.name for s in commit.manifest.sections]
        assert names[:2] == ["system", "protected"] and names[-1] == "tools"
    report = check_requests("s1", records)
    assert report.ok, report.problems
    assert report.checked == len(commits) and report.unrecorded == 0


async def test_a_changed_record_is_named_by_round_and_section(tmp_path: Path) -> None:
    _, _, records = await run_session(tmp_path)
    # an output the next rounds' requests carried, changed after the fact
    at = next(
        i
        for i, r in enumerate(records)
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    )
    record = records[at]
    assert isinstance(record, ItemRecord) and isinstance(record.item, FunctionCallOutput)
    changed = replace(record, item=replace(record.item, output="something else"))
    report = check_requests("s1", [*records[:at], changed, *records[at + 1 :]])
    assert not report.ok
    assert report.problems[0].startswith(f"round {record.round + 1}: the request differs")
    assert "(history, seqs" in report.problems[0]
