"""One timer handle a call: the request's deadline, a stream's idle time and the socket's
silence, each ending a wait with the reason it ran out, none cancelling outside a wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from stowage.model._call_clock import CallClock


def _count_handles(monkeypatch: pytest.MonkeyPatch, clock: CallClock) -> list[float]:
    """Record each timer handle the clock arms on the running loop (its times), no other's."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting(when: float, callback: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        if getattr(callback, "__self__", None) is clock:
            armed.append(when)
        return call_at(when, callback, *args, **kw)

    monkeypatch.setattr(loop, "call_at", counting)
    return armed


async def test_progress_keeps_a_wait_alive_and_arms_no_handle_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bytes every 50 ms for a second keep a 400 ms silence limit from running out; the
    handle is armed again only when it fires, never on progress."""
    async with asyncio.timeout(10):
        clock = CallClock(deadline=10, silence=0.4, first_silence=0.4)
        armed = _count_handles(monkeypatch, clock)
        try:
            async with clock:
                for _ in range(20):
                    await asyncio.sleep(0.05)
                    clock.progress()
        finally:
            clock.close()
            monkeypatch.undo()
    assert clock.expired is None
    assert 1 <= len(armed) <= 4  # one, then one a silence limit: not one per progress (20)


async def test_a_silent_wait_ends_with_silence() -> None:
    async with asyncio.timeout(10):
        clock = CallClock(deadline=10, silence=0.1, first_silence=0.1)
        start = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            async with clock:
                await asyncio.sleep(5)
        clock.close()
    assert clock.expired == "silence"
    assert asyncio.get_running_loop().time() - start < 2


async def test_the_first_silence_allows_for_connecting() -> None:
    """Before the first progress the wait may be silent for ``first_silence``; after it only
    for ``silence``."""
    async with asyncio.timeout(10):
        clock = CallClock(deadline=10, silence=0.3, first_silence=1.2)
        try:
            async with clock:
                await asyncio.sleep(0.6)  # longer than silence, shorter than first_silence
                clock.progress()
                await asyncio.sleep(0.05)
            with pytest.raises(TimeoutError):
                async with clock:
                    await asyncio.sleep(5)
        finally:
            clock.close()
    assert clock.expired == "silence"


async def test_the_deadline_holds_whatever_the_progress() -> None:
    async with asyncio.timeout(10):
        clock = CallClock(deadline=0.3, silence=1, first_silence=1)
        try:
            with pytest.raises(TimeoutError):
                async with clock:
                    while True:
                        await asyncio.sleep(0.05)
                        clock.progress()
        finally:
            clock.close()
    assert clock.expired == "deadline"


async def test_idle_time_restarts_with_each_wait_and_progress_does_not_reset_it() -> None:
    """A stream's idle limit counts from the start of each read; keep-alive bytes (progress)
    inside one read do not count as an event."""
    async with asyncio.timeout(10):
        clock = CallClock(deadline=10, idle=0.5, silence=5, first_silence=5)
        try:
            for _ in range(3):  # 3 x 0.25 s: past the idle limit in all, within it each
                async with clock:
                    await asyncio.sleep(0.25)
            with pytest.raises(TimeoutError):
                async with clock:
                    while True:
                        await asyncio.sleep(0.02)
                        clock.progress()
        finally:
            clock.close()
    assert clock.expired == "idle"


async def test_nothing_is_cancelled_outside_a_wait_and_a_passed_deadline_ends_the_next() -> None:
    async with asyncio.timeout(10):
        clock = CallClock(deadline=0.2, idle=0.2)
        try:
            async with clock:
                pass
            await asyncio.sleep(0.5)  # the caller's own work, past every limit: not cancelled
            with pytest.raises(TimeoutError):
                async with clock:
                    await asyncio.sleep(5)
        finally:
            clock.close()
    assert clock.expired == "deadline"


async def test_a_cancellation_from_elsewhere_is_not_a_timeout() -> None:
    async def waits(clock: CallClock) -> None:
        async with clock:
            await asyncio.sleep(5)

    async with asyncio.timeout(10):
        clock = CallClock(deadline=10, silence=5, first_silence=5)
        task = asyncio.create_task(waits(clock))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        clock.close()
    assert clock.expired is None
