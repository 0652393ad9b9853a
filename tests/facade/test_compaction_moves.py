"""Compaction that moves: a session compacted by its provider (the Responses wire's encrypted
item) continues on the Chat wire, then on Anthropic's, over real HTTP to the fake server. Its
first turn on a wire that cannot carry the item summarizes what the item covers locally, from
the log; the record says so; ``check`` is clean after each switch."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from stowage import Runtime, Settings
from stowage.core import CompactionRecord, SettingsChangedRecord
from stowage.policy._check import check_log
from stowage.storage import JsonlStore
from stowage.testing import FakeOpenAIServer

FIRST = "Never run the migration on the prod replica db-7."
FILLER = " The parser reads the config and the schema, then writes the report." * 30


def settings(tmp_path: Path, base_url: str) -> Settings:
    return Settings(
        model="fake-model",
        base_url=base_url,
        api_key="k",
        wire_api="responses",
        compaction="provider",
        store=tmp_path / "store",
        tools="none",
        auto_compact=False,
        durability="none",
        user_budget_chars=0,
        context_window=64_000,
    )


async def records(tmp_path: Path) -> list[object]:
    return list((await JsonlStore(tmp_path / "store").read("m")).records)


async def checked(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "store")
    full, tail = await store.read("m"), await store.read_tail("m")
    report = check_log("m", full.records, tail.records)
    assert report.ok, report


async def test_a_provider_compacted_session_moves_to_chat_then_anthropic(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with FakeOpenAIServer() as server:
            base = settings(tmp_path, server.base_url)
            async with Runtime(base) as rt:
                session = await rt.create("m", system="be brief")
                for text in (FIRST, "second step.", "third step."):
                    await session.send(text + FILLER)
                assert await session.compact()
            first = [r for r in await records(tmp_path) if isinstance(r, CompactionRecord)]
            assert len(first) == 1 and first[0].provider_item is not None
            await checked(tmp_path)

            server.requests.clear()
            # a runtime on the chat wire continues it (the CLI: resume --wire-api chat)
            async with Runtime(base.with_(wire_api="chat", compaction="auto")) as rt:
                session = await rt.resume("m")
                answer = await session.send("go on")
            assert answer.text
            log = await records(tmp_path)
            changed = [r for r in log if isinstance(r, SettingsChangedRecord)][-1]
            assert changed.changes["compaction"] == ["provider", "auto"]
            moved = [r for r in log if isinstance(r, CompactionRecord)][-1]
            assert moved is not first[0]
            assert "cannot go to the chat wire" in moved.reason
            assert moved.provider_item is None and moved.regrounded
            # made from the log's original records: the first message is back in the summary
            assert FIRST in moved.summary
            sent = [json.dumps(body) for body in server.requests]
            assert not any('"type": "compaction"' in body for body in sent)
            assert FIRST in sent[-1], "the chat request lost what the provider's item held"
            await checked(tmp_path)

            server.requests.clear()
            async with Runtime(base.with_(wire_api="anthropic", compaction="local")) as rt:
                session = await rt.resume("m")
                assert (await session.send("and now?")).text
            # nothing left to move: the local summary goes on the Anthropic wire as it is
            assert len([r for r in await records(tmp_path) if isinstance(r, CompactionRecord)]) == 2
            assert FIRST in json.dumps(server.requests[-1])
            await checked(tmp_path)
