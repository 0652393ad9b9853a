"""The descriptor budget: a session is refused with ``DescriptorLimitReached`` (naming the limit
and the fix) once the process's open descriptors come within the reserve of ``RLIMIT_NOFILE``,
never failing at random with ``EMFILE``; the rule on its own, then a runtime under a real,
lowered limit."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from stowage import DescriptorLimitReached, Runtime, Settings
from stowage.facade import DescriptorUse
from stowage.facade._descriptors import (
    _PER_START,
    check_room,
    reserve_for,
    starts_before_recount,
)
from stowage.model._scripted import ScriptedModel


@given(in_use=st.integers(0, 10**6), limit=st.integers(1, 10**6))
def test_a_session_is_refused_exactly_when_the_reserve_would_be_touched(
    in_use: int, limit: int
) -> None:
    use = DescriptorUse(in_use=in_use, limit=limit)
    reserve = reserve_for(limit)
    assert reserve >= 64 and reserve >= limit // 10
    if in_use + reserve < limit:
        check_room("s", use)
        return
    with pytest.raises(DescriptorLimitReached) as refused:
        check_room("s", use)
    message = str(refused.value)
    assert f"{in_use} file descriptors open" in message and f"is {limit}" in message
    assert "ulimit -n" in message and "idle_timeout" in message
    assert (refused.value.in_use, refused.value.limit) == (in_use, limit)


@given(in_use=st.none() | st.integers(0, 10**6), limit=st.none() | st.integers(1, 10**6))
def test_an_unknown_figure_refuses_nothing(in_use: int | None, limit: int | None) -> None:
    if in_use is None or limit is None:
        check_room("s", DescriptorUse(in_use=in_use, limit=limit))


@given(in_use=st.integers(0, 10**6), limit=st.integers(1, 10**6))
def test_the_starts_between_counts_cannot_use_up_the_room_a_count_saw(
    in_use: int, limit: int
) -> None:
    """Starting as many sessions as allowed, each opening its share, never reaches the reserve
    unseen; and a count that refuses allows no start before the next count."""
    use = DescriptorUse(in_use=in_use, limit=limit)
    starts = starts_before_recount(use)
    reserve = reserve_for(limit)
    if in_use + reserve >= limit:
        with pytest.raises(DescriptorLimitReached):
            check_room("s", use)
        assert starts == 0
    else:
        assert in_use + int(starts) * _PER_START + reserve <= limit


@contextmanager
def soft_limit(limit: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def fill_to(count: int, held: list[int]) -> None:
    """Open /dev/null until the process has ``count`` descriptors open."""
    while len(os.listdir("/proc/self/fd")) - 1 < count:
        held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))


async def test_a_runtime_near_its_limit_refuses_new_and_woken_sessions_and_reports_it(
    tmp_path: Path,
) -> None:
    settings = Settings(store=tmp_path / "st", tools="none", durability="none")
    held: list[int] = []
    with anyio.fail_after(30):
        async with Runtime(settings, gateway=ScriptedModel(tool_rounds=0)) as rt:
            await rt.send("early", "hello")
            assert await rt.hibernate("early")
            limit = rt.descriptors.in_use + 300  # type: ignore[operator]
            try:
                with soft_limit(limit):
                    seen = rt.descriptors
                    fill_to(limit - 64 + 4, held)  # into the reserve, short of the limit
                    with pytest.raises(DescriptorLimitReached) as new:
                        await rt.create("late")
                    with pytest.raises(DescriptorLimitReached):
                        await rt.open("early")  # a wake from hibernation starts a session
                    assert rt.sessions == {} and rt.hibernated == {"early"}
                    assert not (tmp_path / "st" / "late.jsonl").exists()  # nothing written
                    for fd in held:
                        os.close(fd)
                    held.clear()
                    await rt.send("late", "hello")  # room again
                    await rt.send("early", "again")
            finally:
                for fd in held:
                    os.close(fd)
    assert seen.limit == limit and seen.reserve == 64
    assert new.value.limit == limit and new.value.in_use >= limit - 64
