"""One record per session in its runtime: one state at a time, moved only as the table allows.

Real sessions (the offline scripted model, a real JSONL store) go through open, a turn,
parking, hibernation, waking and close while the states seen are checked; the existing facade
tests are run again with every move recorded, to check each one is in ``TRANSITIONS``; and a
move outside the table raises ``IllegalTransition``.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType

import anyio
import pytest
from stowage import (
    Event,
    Runtime,
    SessionBusy,
    SessionExists,
    SessionFailed,
    SessionHibernated,
    SessionRehydrated,
    Settings,
    StoreError,
    StowageError,
)
from stowage.facade._slots import (
    LIVE_STATES,
    TRANSITIONS,
    IllegalTransition,
    SessionSlot,
    SlotState,
)
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore

S = SlotState
Move = tuple[str, SlotState, SlotState]

HERE = Path(__file__).parent


def settings(tmp_path: Path) -> Settings:
    return Settings(store=tmp_path / "st", workspace=HERE, tools="none")


def runtime(tmp_path: Path, **kw: object) -> Runtime:
    return Runtime(settings(tmp_path), gateway=ScriptedModel(tool_rounds=0), **kw)  # type: ignore[arg-type]


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> list[Move]:
    """Every move any session's record is asked to make from now on (allowed or not), in
    order, as (session id, from, to)."""
    seen: list[Move] = []
    move = SessionSlot.move

    def recording(slot: SessionSlot, to: SlotState) -> None:
        seen.append((slot.id, slot.state, to))
        move(slot, to)

    monkeypatch.setattr(SessionSlot, "move", recording)
    return seen


def of(moves: list[Move], session_id: str) -> list[tuple[SlotState, SlotState]]:
    return [(a, b) for sid, a, b in moves if sid == session_id]


def state(rt: Runtime, session_id: str) -> SlotState | None:
    slot = rt._slots.get(session_id)
    return None if slot is None else slot.state


async def until(rt: Runtime, session_id: str, wanted: SlotState) -> None:
    """Wait until the session's record is in state ``wanted`` (a turn is answered a little
    before its session parks)."""
    for _ in range(2000):
        if state(rt, session_id) is wanted:
            return
        await anyio.sleep(0.005)
    raise AssertionError(f"{session_id} still {state(rt, session_id)}, not {wanted}")


# -- (a) real sessions through their life -------------------------------------------------


async def test_open_turn_park_hibernate_wake_and_close_go_through_the_states(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        async with runtime(tmp_path) as rt:
            session = await rt.open("s")
            assert state(rt, "s") in {S.LIVE, S.PARKED}  # started; parks once recovered
            await until(rt, "s", S.PARKED)
            assert rt.sessions == {"s": session} and rt.hibernated == frozenset()

            during: list[SlotState | None] = []
            async for _ in session.stream("hello"):
                during.append(state(rt, "s"))
            assert set(during) == {S.RUNNING}  # every event of the turn came while running
            await until(rt, "s", S.PARKED)

            assert await rt.hibernate("s")
            slot = rt._slots["s"]
            assert slot.state is S.HIBERNATED and session.stopped and session.hibernated
            # nothing but the id: no handle, settings, lease or stop scope
            assert (slot.session, slot.settings, slot.lease, slot.stop) == (None,) * 4
            assert rt.sessions == {} and rt.hibernated == {"s"}

            woken = await rt.resume("s")
            assert woken is not session and state(rt, "s") in {S.LIVE, S.PARKED}
            assert rt.hibernated == frozenset()
            await woken.send("again")
            await until(rt, "s", S.PARKED)

            await rt.close("s")
            assert "s" not in rt._slots and woken.stopped and woken.failed is None
            assert rt.sessions == {}
    a_turn = [(S.LIVE, S.PARKED), (S.PARKED, S.RUNNING), (S.RUNNING, S.PARKED)]
    assert of(moves, "s") == [
        (S.CREATING, S.LIVE),
        *a_turn,
        (S.PARKED, S.CLOSING),
        (S.CLOSING, S.HIBERNATED),
        (S.HIBERNATED, S.CREATING),
        (S.CREATING, S.LIVE),
        *a_turn,
        (S.PARKED, S.CLOSING),
        (S.CLOSING, S.CLOSED),
    ]


async def test_a_session_left_live_is_closed_with_the_runtime_and_resumed_by_the_next(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        async with runtime(tmp_path) as rt:
            await rt.send("s", "hello")
        assert rt._slots == {}
        async with runtime(tmp_path) as rt:
            session = await rt.resume("s")
            assert len(session.history) > 1
    seen = of(moves, "s")
    end = seen.index((S.CLOSING, S.CLOSED)) + 1
    first, second = seen[:end], seen[end:]
    # the turn ran; its session had parked, or was still running when the runtime closed it
    assert first[:3] == [(S.CREATING, S.LIVE), (S.LIVE, S.PARKED), (S.PARKED, S.RUNNING)]
    assert first[-1] == (S.CLOSING, S.CLOSED) and first[-2][1] is S.CLOSING
    assert second == [
        (S.CREATING, S.LIVE),
        (S.LIVE, S.PARKED),
        (S.PARKED, S.CLOSING),
        (S.CLOSING, S.CLOSED),
    ]


async def test_an_idle_session_hibernates_on_its_own_and_send_wakes_it(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        hibernated = anyio.Event()
        events: list[str] = []

        def on_event(event: Event) -> None:
            if isinstance(event, SessionHibernated | SessionRehydrated):
                events.append(type(event).__name__)
            if isinstance(event, SessionHibernated):
                hibernated.set()

        async with runtime(tmp_path, idle_timeout=0.05) as rt:
            rt.subscribe(on_event)
            await rt.send("idle", "hello")
            await hibernated.wait()
            assert state(rt, "idle") is S.HIBERNATED and rt.hibernated == {"idle"}
            await rt.send("idle", "hello again")
            assert state(rt, "idle") in LIVE_STATES
        assert events[:2] == ["SessionHibernated", "SessionRehydrated"]
    assert (S.CLOSING, S.HIBERNATED) in of(moves, "idle")
    assert (S.HIBERNATED, S.CREATING) in of(moves, "idle")


async def test_an_open_refused_leaves_nothing_and_a_refused_wake_stays_hibernated(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        other = JsonlStore(tmp_path / "st")
        async with runtime(tmp_path) as rt:
            await rt.send("held", "hello")
            await rt.send("sleeper", "hello")
            await rt.close("held")
            assert await rt.hibernate("sleeper")
            held = await other.acquire("held")
            taken = await other.acquire("sleeper")
            del moves[:]
            with pytest.raises(SessionBusy):
                await rt.open("held")
            assert "held" not in rt._slots  # nothing started, nothing kept
            with pytest.raises(SessionBusy):
                await rt.send("sleeper", "wake up")
            assert state(rt, "sleeper") is S.HIBERNATED and rt.hibernated == {"sleeper"}
            assert of(moves, "held") == [(S.CREATING, S.CLOSED)]
            assert of(moves, "sleeper") == [(S.HIBERNATED, S.CREATING), (S.CREATING, S.HIBERNATED)]
            await taken.release()
            await held.release()
            assert (await rt.send("sleeper", "now")).stopped == "answered"
            assert state(rt, "sleeper") in LIVE_STATES and rt.hibernated == frozenset()
        await other.aclose()


async def test_a_session_hibernated_before_it_parks_goes_from_live_to_closing(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        async with runtime(tmp_path) as rt:
            await rt.open("quick")
            assert state(rt, "quick") is S.LIVE  # its supervisor has not run yet
            assert await rt.hibernate("quick")
            assert state(rt, "quick") is S.HIBERNATED
    assert of(moves, "quick") == [
        (S.CREATING, S.LIVE),
        (S.LIVE, S.CLOSING),
        (S.CLOSING, S.HIBERNATED),
    ]


async def test_create_of_a_live_or_hibernated_id_is_refused_and_changes_nothing(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        async with runtime(tmp_path) as rt:
            live = await rt.create("live")
            await rt.send("sleeper", "hello")
            assert await rt.hibernate("sleeper")
            del moves[:]
            with pytest.raises(SessionExists):
                await rt.create("live")
            with pytest.raises(SessionExists):
                await rt.create("sleeper")
            assert rt.sessions == {"live": live} and rt.hibernated == {"sleeper"}
            assert state(rt, "sleeper") is S.HIBERNATED
            assert of(moves, "live") == []
            assert of(moves, "sleeper") == [(S.HIBERNATED, S.CREATING), (S.CREATING, S.HIBERNATED)]


class DiskFullFor(JsonlStore):
    """A real JSONL store whose disk is 'full' for one session's appends."""

    def __init__(self, root: Path, broken: str) -> None:
        super().__init__(root)
        self.broken = broken

    async def append_batches(self, batches):  # type: ignore[no-untyped-def]
        ok = [(sid, recs) for sid, recs in batches if sid != self.broken]
        outcomes = await super().append_batches(ok)
        if len(ok) < len(batches):
            outcomes[self.broken] = StoreError(f"no space left on device writing {self.broken}")
        return outcomes


async def test_a_session_that_fails_ends_failed_and_is_forgotten(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        store = DiskFullFor(tmp_path / "st", broken="bad")
        async with Runtime(
            settings(tmp_path), store=store, gateway=ScriptedModel(tool_rounds=0)
        ) as rt:
            bad = await rt.create("bad")
            with pytest.raises(SessionFailed):
                await bad.send("hello")
            assert bad.failed is not None and "bad" not in rt._slots
            assert (await rt.send("good", "hello")).stopped == "answered"
    assert of(moves, "bad")[-2:] == [(S.RUNNING, S.CLOSING), (S.CLOSING, S.FAILED)]


async def test_running_sessions_never_exceed_max_running_sessions(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        running: list[int] = []
        async with runtime(tmp_path, max_running_sessions=2) as rt:

            def count(_: object) -> None:
                running.append(sum(s.state is S.RUNNING for s in rt._slots.values()))

            rt.subscribe(count)
            async with anyio.create_task_group() as tg:
                for n in range(6):
                    tg.start_soon(rt.send, f"r{n}", "hello")
        assert running and max(running) <= 2
        assert all(of(moves, f"r{n}")[-1] == (S.CLOSING, S.CLOSED) for n in range(6))


async def test_concurrent_opens_and_creates_of_one_id_wait_for_the_first(
    tmp_path: Path, moves: list[Move]
) -> None:
    with anyio.fail_after(30):
        async with runtime(tmp_path) as rt:
            opened: list[object] = []
            refused: list[StowageError] = []

            async def open_it() -> None:
                opened.append(await rt.open("same"))

            async def create_it() -> None:
                try:
                    opened.append(await rt.create("same"))
                except StowageError as exc:  # the log exists: one of them made it
                    refused.append(exc)

            async with anyio.create_task_group() as tg:
                for n in range(6):
                    tg.start_soon(create_it if n % 3 == 0 else open_it)
            assert len({id(s) for s in opened}) == 1 and len(opened) + len(refused) == 6
    # one open made it; the others waited for it, none opened the log again
    assert of(moves, "same").count((S.CREATING, S.LIVE)) == 1


# -- (b) every move the runtime makes in the existing facade tests is in the table ---------


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_states_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tmp_path_tests(module: ModuleType) -> Iterator[Callable[[Path], Awaitable[None]]]:
    """The module's async tests that take nothing but ``tmp_path``."""
    for name, test in vars(module).items():
        if (
            name.startswith("test_")
            and inspect.iscoroutinefunction(test)
            and list(inspect.signature(test).parameters) == ["tmp_path"]
        ):
            yield test


#: facade tests whose flows cover the table: turns, compactions, resumes, hibernation (by
#: hand, idle, concurrent wakes), busy refusals, failed sessions, lost leases, approvals
BORROWED = ["test_hibernation", "test_session_loop", "test_leases", "test_approvals"]


@pytest.mark.parametrize("name", BORROWED)
async def test_every_move_of_the_facade_tests_is_in_the_table(
    name: str, tmp_path: Path, moves: list[Move]
) -> None:
    module = _load(name)
    tests = list(_tmp_path_tests(module))
    assert tests, f"{name} has no tests taking tmp_path alone"
    for n, test in enumerate(tests):
        where = tmp_path / str(n)
        where.mkdir()
        cwd = Path.cwd()
        try:
            await test(where)
        except (Exception, BaseExceptionGroup, pytest.fail.Exception, pytest.skip.Exception):
            # its own run in the suite judges it; the moves it made are checked here
            pass
        finally:
            os.chdir(cwd)
    illegal = [(sid, a, b) for sid, a, b in moves if b not in TRANSITIONS[a]]
    assert moves and illegal == []


# -- (c) the table itself, and a move outside it -------------------------------------------


def test_the_table_names_every_state_and_the_gone_states_lead_nowhere() -> None:
    assert set(TRANSITIONS) == set(SlotState)
    assert all(targets <= set(SlotState) for targets in TRANSITIONS.values())
    assert TRANSITIONS[S.CLOSED] == TRANSITIONS[S.FAILED] == frozenset()
    # every state is reached from another (creating again when a hibernated one wakes)
    assert set().union(*TRANSITIONS.values()) == set(SlotState)
    assert all(state not in TRANSITIONS[state] for state in SlotState)
    assert {S.LIVE, S.PARKED, S.RUNNING} == LIVE_STATES


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], S.RUNNING),  # creating -> running: it never started
        ([S.LIVE], S.RUNNING),  # live -> running: it parks first
        ([S.LIVE, S.PARKED], S.HIBERNATED),  # parked -> hibernated: it closes first
        ([S.LIVE, S.CLOSING, S.CLOSED], S.LIVE),  # closed is the end
        ([S.LIVE, S.CLOSING, S.FAILED], S.CREATING),  # so is failed
        ([S.LIVE, S.CLOSING, S.HIBERNATED], S.LIVE),  # a wake opens first
        ([S.CLOSED], S.CLOSED),  # no move to the same state
    ],
)
async def test_a_move_outside_the_table_raises_illegal_transition(
    path: list[SlotState], illegal: SlotState
) -> None:
    slot = SessionSlot("s-1")
    for to in path:
        slot.move(to)
    before = slot.state
    with pytest.raises(IllegalTransition) as raised:
        slot.move(illegal)
    assert isinstance(raised.value, RuntimeError) and not isinstance(raised.value, StowageError)
    error = raised.value
    assert (error.session_id, error.from_state, error.to_state) == ("s-1", before, illegal)
    assert "s-1" in str(error) and before.value in str(error) and illegal.value in str(error)
    assert slot.state is before  # nothing changed


async def test_leaving_creating_wakes_the_opens_that_wait() -> None:
    slot = SessionSlot("s-1")
    woke = anyio.Event()

    async def waiter() -> None:
        await slot.wait_opened()
        woke.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.sleep(0.01)
            assert not woke.is_set()
            slot.move(S.CLOSED)
        assert woke.is_set()
