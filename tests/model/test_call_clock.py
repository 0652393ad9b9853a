"""A call's clock: the request's deadline and a stream's idle time, each ending a wait with
the reason it ran out, none cancelling outside a wait."""

from __future__ import annotations

import asyncio

import pytest
from stowage.model._call_clock import CallClock


async def test_the_deadline_holds_across_waits() -> None:
    async with asyncio.timeout(10):
        clock = CallClock(deadline=0.3)
        with pytest.raises(TimeoutError):
            for _ in range(100):  # each wait within the limit, all of them past it
                async with clock:
                    await asyncio.sleep(0.05)
    assert clock.expired == "deadline"


async def test_idle_time_restarts_with_each_wait() -> None:
    """A stream's idle limit counts from the start of each read."""
    async with asyncio.timeout(10):
        clock = CallClock(deadline=10, idle=0.5)
        for _ in range(3):  # 3 x 0.25 s: past the idle limit in all, within it each
            async with clock:
                await asyncio.sleep(0.25)
        assert clock.expired is None
        with pytest.raises(TimeoutError):
            async with clock:
                await asyncio.sleep(5)
    assert clock.expired == "idle"


async def test_nothing_is_cancelled_outside_a_wait_and_a_passed_deadline_ends_the_next() -> None:
    async with asyncio.timeout(10):
        clock = CallClock(deadline=0.2, idle=0.2)
        async with clock:
            pass
        await asyncio.sleep(0.5)  # the caller's own work, past every limit: not cancelled
        with pytest.raises(TimeoutError):
            async with clock:
                await asyncio.sleep(5)
    assert clock.expired == "deadline"


async def test_a_cancellation_from_elsewhere_is_not_a_timeout() -> None:
    async def waits(clock: CallClock) -> None:
        async with clock:
            await asyncio.sleep(5)

    async with asyncio.timeout(10):
        clock = CallClock(deadline=10, idle=5)
        task = asyncio.create_task(waits(clock))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert clock.expired is None
