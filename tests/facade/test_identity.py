"""A session's identity in its log: recorded at creation, used by every continuation, changed
only explicitly (a ``settings_changed`` record), never holding a secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage.core import (
    ConfigError,
    SessionRecord,
    Settings,
    SettingsChanged,
    SettingsChangedRecord,
    continue_settings,
    identity_from_records,
)
from stowage.facade import Runtime, session_identity
from stowage.storage import (
    JsonlStore,
    LogStore,
    PostgresStore,
    SqliteStore,
    decode_record,
    encode_record,
)
from stowage.testing import FakeOpenAIServer

from tests.conftest import PG_DSN


def offline(tmp_path: Path, **changes: object) -> Settings:
    return Settings(store=tmp_path, tools="none", durability="none").with_(**changes)


async def test_a_resumed_session_runs_with_its_recorded_policy_not_the_runtimes(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        created = offline(tmp_path, context_window=50_000, keep_rounds=5, soft_mark=0.6)
        async with Runtime(created) as rt:
            session = await rt.create("s1", system="be brief")
            await session.send("hello")
        async with Runtime(offline(tmp_path)) as rt:  # other defaults: they must not apply
            seen: list[SettingsChanged] = []
            rt.subscribe(lambda e: seen.append(e) if isinstance(e, SettingsChanged) else None)
            await rt.resume("s1")
            running = rt.settings_of("s1")
        assert (running.context_window, running.keep_rounds, running.soft_mark) == (
            50_000,
            5,
            0.6,
        )
        assert running.system == "be brief" and seen == []
        log = (await JsonlStore(tmp_path).read("s1")).records
        assert not [r for r in log if isinstance(r, SettingsChangedRecord)]


async def test_an_override_is_recorded_once_and_holds_for_later_continuations(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        async with Runtime(offline(tmp_path, context_window=50_000)) as rt:
            await (await rt.create("s1")).send("hello")
        seen: list[SettingsChanged] = []
        async with Runtime(offline(tmp_path), overrides={"context_window": 60_000}) as rt:
            rt.subscribe(lambda e: seen.append(e) if isinstance(e, SettingsChanged) else None)
            await (await rt.resume("s1")).send("more")
            assert rt.settings_of("s1").context_window == 60_000
        async with Runtime(offline(tmp_path)) as rt:
            await rt.resume("s1")
            assert rt.settings_of("s1").context_window == 60_000
        assert [e.changes for e in seen] == [{"context_window": [50_000, 60_000]}]
        store = JsonlStore(tmp_path)
        identity = await session_identity(store, "s1")
        assert identity.context_window == 60_000 and identity.changes == 1
        await store.aclose()


async def test_a_session_of_another_endpoint_is_refused_not_switched(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with FakeOpenAIServer() as server:
            real = offline(
                tmp_path,
                model="local-llm",
                base_url=server.base_url,
                api_key="sk-test",
                context_window=50_000,
            )
            async with Runtime(real) as rt:
                await (await rt.create("s1")).send("hello")
            async with Runtime(offline(tmp_path)) as rt:  # the offline scripted model
                with pytest.raises(ConfigError, match="local-llm"):
                    await rt.resume("s1")
            assert not rt.sessions


async def test_the_endpoints_window_is_asked_once_and_recorded(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with FakeOpenAIServer(context_window=131_072, window_field="context_length") as srv:
            settings = offline(
                tmp_path, model="local-llm", base_url=srv.base_url, api_key="sk-test"
            )
            async with Runtime(settings) as rt:
                await rt.create("s1")
                await rt.create("s2")
                assert rt.settings_of("s1").context_window == 131_072
        first = (await JsonlStore(tmp_path).read("s1")).records[0]
        assert isinstance(first, SessionRecord)
        assert first.context_window == 131_072
        assert first.settings["window_source"] == "endpoint"


async def test_a_window_too_small_is_refused_before_the_log_exists(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        small = Settings(store=tmp_path, durability="none", context_window=1800)
        async with Runtime(small) as rt:
            with pytest.raises(ConfigError) as raised:
                await rt.create("s1", system="x" * 1200)
        message = str(raised.value)
        assert "context window 1800 tokens is too small: system 300" in message
        assert "--tools none" in message
        assert not await JsonlStore(tmp_path).exists("s1")


def test_the_identity_holds_no_secret_and_a_redacted_endpoint_needs_the_real_one() -> None:
    settings = Settings(
        model="m", base_url="https://u:pw-secret@example.test/v1", api_key="sk-secret"
    )
    record = SessionRecord(seq=1, model="m", settings=settings.public())
    text = encode_record(record).decode()
    assert "pw-secret" not in text and "sk-secret" not in text
    identity = identity_from_records([record])
    # the configuration's URL redacts to the stored one: it is used, credentials and all
    merged, changes = continue_settings(settings, identity, {})
    assert merged.base_url == settings.base_url and changes == {}
    with pytest.raises(ConfigError, match="--base-url"):
        continue_settings(Settings(), identity, {})
    with pytest.raises(ConfigError, match="not a session setting"):
        continue_settings(settings, identity, {"api_key": "x"})


def test_logs_written_before_identity_read_their_watermarks() -> None:
    old = SessionRecord(
        seq=1, model="gpt-4.1", settings={"watermarks": [0.6, 0.8, 0.9, 0.4], "tools": "none"}
    )
    identity = identity_from_records([old])
    merged = identity.settings(Settings())
    assert (merged.soft_mark, merged.compact_mark, merged.hard_mark, merged.target_after) == (
        0.6,
        0.8,
        0.9,
        0.4,
    )
    assert merged.tools == "none" and identity.window_source is None


_WRITTEN = [
    SessionRecord(seq=1, model="m", settings=Settings().public()),
    SettingsChangedRecord(seq=2, changes={"context_window": [None, 9000]}, source="user"),
]


async def _round_trip(store: LogStore) -> tuple[list[Any], list[Any]]:
    """Write ``_WRITTEN`` as a session's log in ``store``; returns it read whole and read as
    resume reads it (its tail)."""
    try:
        await store.create("s1", _WRITTEN)
        whole = list((await store.read("s1", repair=False)).records)
        tail = list((await store.read_tail("s1", repair=False)).records)
    finally:
        await store.aclose()
    return whole, tail


def test_the_codec_round_trips_a_settings_changed_record() -> None:
    record = SettingsChangedRecord(seq=5, changes={"model": ["a", "b"]}, source="user")
    assert decode_record(encode_record(record)) == record
    with pytest.raises(ValueError, match="changes"):
        decode_record(
            b'{"v":1,"seq":5,"ts":"t","type":"settings_changed","changes":3,"source":"u"}'
        )


async def test_every_store_keeps_a_settings_changed_record(tmp_path: Path, pg_schema: str) -> None:
    with anyio.fail_after(30):
        for store in (
            JsonlStore(tmp_path / "jsonl"),
            SqliteStore(tmp_path / "s.db"),
            PostgresStore(PG_DSN, schema=pg_schema, max_size=2),
        ):
            assert await _round_trip(store) == (_WRITTEN, _WRITTEN)
