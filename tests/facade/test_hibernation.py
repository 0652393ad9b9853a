"""Hibernation: an idle session leaves memory and comes back from its log unchanged."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from stowage import (
    Event,
    Runtime,
    SessionClosed,
    SessionHibernated,
    SessionRehydrated,
    Settings,
    replay,
)
from stowage.model._scripted import ScriptedModel


def settings(tmp_path: Path) -> Settings:
    return Settings(store=tmp_path, workspace=Path(__file__).parent, compact_threshold=1500)


async def test_hibernate_then_rehydrate_gives_the_same_history(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        events: list[Event] = []
        async with Runtime(settings(tmp_path), gateway=ScriptedModel(tool_rounds=2)) as rt:
            rt.subscribe(events.append)
            for turn in range(4):
                await rt.send("h1", f"turn {turn}: list and read files")
            before = rt.sessions["h1"].history
            assert rt.sessions["h1"].state.compactions >= 1  # the tail replay starts mid-log
            assert await rt.hibernate("h1")
            assert "h1" not in rt.sessions and "h1" in rt.hibernated
            woken = await rt.open("h1")
            assert woken.history == before
            result = await rt.send("h1", "one more turn")
            assert result.stopped == "answered"
            after = rt.sessions["h1"].history
            full = await rt.store.read("h1")
        assert replay("h1", full.records).items == after
        assert [
            type(e) for e in events if isinstance(e, SessionHibernated | SessionRehydrated)
        ] == [
            SessionHibernated,
            SessionRehydrated,
        ]


async def test_a_session_idle_for_the_timeout_hibernates_on_its_own(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        hibernated = anyio.Event()

        def on_event(event: Event) -> None:
            if isinstance(event, SessionHibernated) and event.session_id == "idle":
                hibernated.set()

        async with Runtime(
            settings(tmp_path), gateway=ScriptedModel(tool_rounds=1), idle_timeout=0.05
        ) as rt:
            rt.subscribe(on_event)
            first = await rt.send("idle", "hello")
            await hibernated.wait()
            assert "idle" not in rt.sessions
            again = await rt.send("idle", "hello again")
        assert first.stopped == again.stopped == "answered"


async def test_a_handle_to_a_hibernated_session_says_so(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with Runtime(settings(tmp_path), gateway=ScriptedModel(tool_rounds=1)) as rt:
            session = await rt.open("old")
            await session.send("hello")
            await rt.hibernate("old")
            with pytest.raises(SessionClosed, match="hibernated"):
                await session.send("still there?")


async def test_concurrent_opens_of_one_id_share_one_session(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with Runtime(settings(tmp_path), gateway=ScriptedModel(tool_rounds=1)) as rt:
            await rt.send("same", "hello")
            await rt.hibernate("same")
            opened = []

            async def open_it() -> None:
                opened.append(await rt.open("same"))

            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(open_it)
        assert len({id(session) for session in opened}) == 1


async def test_a_hibernated_session_keeps_nothing_but_its_id(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with Runtime(settings(tmp_path), gateway=ScriptedModel(tool_rounds=1)) as rt:
            await rt.send("gone", "hello")
            session = rt.sessions["gone"]
            await rt.hibernate("gone")
            assert session.stopped
            assert rt.sessions == {} and rt.hibernated == {"gone"}
            assert rt._opening == {} and rt._hibernating == {}
