"""Shared limits: never more in flight than configured, waiting summaries before waiting
rounds; a 429 storm is ridden out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import anyio
import pydantic
import pytest
import structlog
from stowage import (
    ConfigError,
    FunctionTool,
    ModelConnectionError,
    ModelRequest,
    ModelResponse,
    RateLimitError,
    Runtime,
    RuntimeLimits,
    Settings,
    ToolRegistry,
)
from stowage.actors._retry import backoff_delay, call_with_retries
from stowage.core import CallLimiter
from stowage.core._gateway import StreamEvent
from stowage.model._scripted import ScriptedModel


class CountingGateway:
    """Wraps a gateway; records the most calls in flight at once, by purpose."""

    def __init__(self, inner: Any, *, fail_first: int = 0, error: Exception | None = None) -> None:
        self.inner = inner
        self.in_flight = {"round": 0, "summary": 0}
        self.peak = {"round": 0, "summary": 0, "all": 0}
        self.fail_first = fail_first
        self.error = error
        self.calls = 0

    def _enter(self, purpose: str) -> None:
        self.calls += 1
        if self.calls <= self.fail_first:
            assert self.error is not None
            raise self.error
        self.in_flight[purpose] += 1
        self.peak[purpose] = max(self.peak[purpose], self.in_flight[purpose])
        self.peak["all"] = max(self.peak["all"], sum(self.in_flight.values()))

    async def create(self, request: ModelRequest) -> ModelResponse:
        self._enter(request.purpose)
        try:
            return await self.inner.create(request)  # type: ignore[no-any-return]
        finally:
            self.in_flight[request.purpose] -= 1

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self._enter(request.purpose)
        try:
            async for event in self.inner.stream(request):
                yield event
        finally:
            self.in_flight[request.purpose] -= 1

    async def aclose(self) -> None:
        await self.inner.aclose()


class NoArgs(pydantic.BaseModel):
    pass


def counting_tools(peak: dict[str, int]) -> ToolRegistry:
    running = 0

    async def work(args: NoArgs) -> str:
        nonlocal running
        running += 1
        peak["tools"] = max(peak.get("tools", 0), running)
        try:
            for _ in range(5):  # stay in flight across a few scheduling rounds
                await anyio.lowlevel.checkpoint()
            return "x" * 2000
        finally:
            running -= 1

    return ToolRegistry(
        [
            FunctionTool(name=name, description=name, args_model=NoArgs, fn=work)
            for name in ("fetch_a", "fetch_b")
        ]
    )


async def test_model_compaction_and_tool_calls_never_exceed_their_limits(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        gateway = CountingGateway(ScriptedModel(tool_rounds=2, latency=0.002))
        peak: dict[str, int] = {}
        settings = Settings(store=tmp_path, compact_threshold=1500, tools="none")
        async with (
            Runtime(
                settings,
                gateway=gateway,
                tools=counting_tools(peak),
                max_model_calls=3,
                max_compactions=2,
                max_tool_calls=2,
            ) as rt,
            anyio.create_task_group() as tg,
        ):
            for n in range(30):

                async def drive(session_id: str = f"s{n}") -> None:
                    for turn in range(3):
                        await rt.send(session_id, f"turn {turn}: fetch things")

                tg.start_soon(drive)
        # the limits held, and they were reached: the test could have seen a breach
        assert gateway.peak["all"] == 3
        assert gateway.peak["summary"] == 2
        assert peak["tools"] == 2


async def test_a_429_storm_is_ridden_out_without_counting_as_failures(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        # ten 429s in a row: far more than max_retries, which only 5xx and timeouts spend
        gateway = CountingGateway(
            ScriptedModel(tool_rounds=1),
            fail_first=10,
            error=RateLimitError("slow down", retry_after=0),
        )
        settings = Settings(store=tmp_path, tools="none", max_retries=2, auto_compact=False)
        async with Runtime(settings, gateway=gateway) as rt:
            result = await rt.send("storm", "hello")
        assert result.stopped == "answered"
        assert gateway.calls > 10


async def test_server_errors_still_fail_the_turn_after_max_retries(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        gateway = CountingGateway(
            ScriptedModel(tool_rounds=1), fail_first=10, error=ModelConnectionError("500")
        )
        settings = Settings(store=tmp_path, tools="none", max_retries=2, auto_compact=False)
        async with Runtime(settings, gateway=gateway) as rt:
            with pytest.raises(ModelConnectionError):
                await rt.send("errors", "hello")
        assert gateway.calls == 3


async def test_rate_limits_give_up_once_the_wait_budget_is_spent() -> None:
    with anyio.fail_after(10):
        calls = 0

        async def always_429() -> None:
            nonlocal calls
            calls += 1
            raise RateLimitError("slow down", retry_after=0.02)

        with pytest.raises(RateLimitError):
            await call_with_retries(
                always_429, attempts=1, log=structlog.get_logger(), what="t", rate_limit_wait=0.2
            )
        assert 2 <= calls <= 11


def test_retry_after_is_honoured_with_jitter_and_never_zero() -> None:
    delays = [backoff_delay(1, retry_after=2.0) for _ in range(200)]
    assert all(2.0 <= d <= 2.2 for d in delays)
    assert len(set(delays)) > 1
    assert all(backoff_delay(1, retry_after=0) > 0 for _ in range(50))


class TokenWatcher(ScriptedModel):
    """Records, at every streamed event of a round, how many model-call places are taken."""

    def __init__(self) -> None:
        super().__init__(tool_rounds=1, answer_chars=64)
        self.limiter: CallLimiter | None = None
        self.seen: list[int] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        assert self.limiter is not None
        async for event in super().stream(request):
            self.seen.append(self.limiter.borrowed_tokens)
            yield event


async def test_a_streamed_round_holds_its_place_until_the_stream_ends(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        gateway = TokenWatcher()
        settings = Settings(store=tmp_path, tools="none", stream=True, auto_compact=False)
        async with Runtime(
            settings, gateway=gateway, tools=counting_tools({}), max_model_calls=1
        ) as rt:
            limiter = rt.limiters["model"]
            assert isinstance(limiter, CallLimiter)
            gateway.limiter = limiter
            assert (await rt.send("streamed", "hello")).stopped == "answered"
            assert limiter.borrowed_tokens == 0  # given back when each stream ended
        assert len(gateway.seen) > 2 and set(gateway.seen) == {1}


async def test_a_waiting_summary_is_let_in_before_the_rounds_queued_ahead_of_it() -> None:
    with anyio.fail_after(10):
        limiter = CallLimiter(1)
        await limiter.acquire("round")  # the only place is taken
        entered: list[str] = []

        async def call(name: str, purpose: Literal["round", "summary"]) -> None:
            assert await limiter.acquire(purpose)  # it had to wait
            entered.append(name)
            limiter.release()

        async with anyio.create_task_group() as tg:
            for name, purpose in [
                ("round-2", "round"),
                ("round-3", "round"),
                ("summary-1", "summary"),
                ("round-4", "round"),
                ("summary-2", "summary"),
            ]:
                tg.start_soon(call, name, purpose)
                await anyio.wait_all_tasks_blocked()
            assert (limiter.waiting("round"), limiter.waiting("summary")) == (3, 2)
            limiter.release()
        # the summaries went ahead of the rounds that waited longer; each purpose in order
        assert entered == ["summary-1", "summary-2", "round-2", "round-3", "round-4"]
        assert limiter.borrowed_tokens == 0
        assert not await limiter.acquire("round")  # a free place: taken without waiting


async def test_a_cancelled_wait_gives_up_its_place_and_a_token_handed_to_it_goes_on() -> None:
    with anyio.fail_after(10):
        limiter = CallLimiter(1)
        await limiter.acquire("round")
        got: list[str] = []

        async def take(name: str) -> None:
            await limiter.acquire("round")
            got.append(name)
            limiter.release()

        # asyncio's own tasks: a cancel can land after the token was handed over but before
        # the waiter ran (anyio's scopes wait for the next checkpoint instead)
        tasks = {}
        for name in ("gone", "handed", "last"):
            tasks[name] = asyncio.create_task(take(name))
            await anyio.wait_all_tasks_blocked()
        tasks["gone"].cancel()  # cancelled while waiting: it leaves the queue
        await anyio.wait_all_tasks_blocked()
        assert limiter.waiting("round") == 2
        limiter.release()  # handed to "handed", which is cancelled before it runs
        tasks["handed"].cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        assert got == ["last"]
        assert tasks["handed"].cancelled() and tasks["gone"].cancelled()
        assert limiter.borrowed_tokens == 0 and limiter.waiting("round") == 0


def test_limits_out_of_range_are_refused_naming_the_limit_and_its_range(tmp_path: Path) -> None:
    settings = Settings(store=tmp_path, tools="none")
    with pytest.raises(ConfigError, match="max_model_calls must be >= 1"):
        Runtime(settings, max_model_calls=0)
    with pytest.raises(ConfigError, match="max_running_sessions must be >= 1"):
        Runtime(settings, limits=RuntimeLimits(max_running_sessions=0))
    with pytest.raises(ConfigError, match=r"idle_timeout must be >= 0 \(seconds; None: never\)"):
        Runtime(settings, idle_timeout=-1)
    with pytest.raises(TypeError, match="not a runtime limit: max_model_call"):
        Runtime(settings, max_model_call=3)


def test_a_runtime_reads_its_limits_from_the_one_declaration(tmp_path: Path) -> None:
    """The defaults are ``RuntimeLimits``'; a limit given by name replaces one of ``limits``,
    and ``idle_timeout=0`` (hibernate at once, as a worker may) is allowed."""
    settings = Settings(store=tmp_path, tools="none")
    assert Runtime(settings).limits == RuntimeLimits()
    rt = Runtime(settings, limits=RuntimeLimits(max_tool_calls=3), idle_timeout=0)
    assert rt.limits == RuntimeLimits(max_tool_calls=3, idle_timeout=0)
    assert rt.limiters["tools"] is not None and rt.limiters["tools"].total_tokens == 3
    assert Runtime(settings, max_model_calls=None).limiters["model"] is None


class TurnTracker(CountingGateway):
    """Also records the most sessions in a turn at once: from a turn's first round request
    to its answer (a response with no tool call), by the request's cache key (its session)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.in_turn: set[str | None] = set()
        self.most_in_turn = 0

    async def create(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "round":
            self.in_turn.add(request.cache_key)
            self.most_in_turn = max(self.most_in_turn, len(self.in_turn))
        response = await super().create(request)
        if request.purpose == "round" and not any(
            getattr(item, "call_id", None) for item in response.items
        ):
            self.in_turn.discard(request.cache_key)
        return response


async def _most_sessions_in_a_turn(tmp_path: Path, max_running: int | None) -> tuple[int, int]:
    gateway = TurnTracker(ScriptedModel(tool_rounds=2, latency=0.005))
    settings = Settings(store=tmp_path, tools="none", stream=False, auto_compact=False)
    answered = 0
    async with (
        Runtime(
            settings,
            gateway=gateway,
            tools=counting_tools({}),
            max_running_sessions=max_running,
        ) as rt,
        anyio.create_task_group() as tg,
    ):

        async def drive(session_id: str) -> None:
            nonlocal answered
            for turn in range(2):
                result = await rt.send(session_id, f"turn {turn}: fetch things")
                answered += result.stopped == "answered"

        for n in range(8):
            tg.start_soon(drive, f"r{n}")
    return gateway.most_in_turn, answered


async def test_max_running_sessions_bounds_the_turns_running_at_once(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        bounded = await _most_sessions_in_a_turn(tmp_path / "bounded", 2)
        free = await _most_sessions_in_a_turn(tmp_path / "free", None)
    # every turn ran to its answer either way; with the bound no more than 2 sessions were
    # ever in a turn, and the bound was reached; without it the same load ran more at once
    assert bounded == (2, 16)
    assert free[1] == 16
    assert free[0] > 2
