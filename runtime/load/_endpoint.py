"""The model endpoint of a load run: the fake server in its own process, or in-process doubles."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from anyio.abc import Process
from stowage.core import (
    ConfigError,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ModelConnectionError,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    RateLimitError,
    StreamEvent,
)

from ._faults import parse_fault_rates

__all__ = [
    "FaultyGateway",
    "MeteredGateway",
    "WireCheck",
    "fake_server_process",
    "fetch_server_stats",
    "orphan_items",
    "parse_rates",
]


def parse_rates(spec: str) -> dict[str, float]:
    """Fault rates from ``"429:0.05,500:0.02,slow:0.01"``. Raises ``ConfigError`` if bad."""

    try:
        return parse_fault_rates(spec)
    except ValueError as exc:
        raise ConfigError(f"--faults: {exc}") from None


def orphan_items(items: Sequence[Item]) -> list[str]:
    """Ids of calls with no output after them and outputs with no call before, in order."""
    answered = {item.call_id for item in items if isinstance(item, FunctionCallOutput)}
    orphans = [
        i.call_id for i in items if isinstance(i, FunctionCall) and i.call_id not in answered
    ]
    made: set[str] = set()
    for item in items:
        if isinstance(item, FunctionCall):
            made.add(item.call_id)
        elif isinstance(item, FunctionCallOutput) and item.call_id not in made:
            orphans.append(item.call_id)
    return orphans


@dataclass(eq=False, kw_only=True)
class WireCheck:
    """What the endpoint saw: requests by purpose, faults injected, requests with orphans."""

    requests: int = 0
    rounds: int = 0
    summaries: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    orphan_requests: int = 0
    orphan_examples: list[list[str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The same shape as the fake server's ``GET /_fake/stats``."""
        return {
            "requests": self.requests,
            "rounds": self.rounds,
            "summaries": self.summaries,
            "faults": dict(self.faults),
            "orphan_requests": self.orphan_requests,
            "orphan_examples": list(self.orphan_examples),
        }


class FaultyGateway:
    """An in-process endpoint that checks requests like the fake server and fails some."""

    def __init__(
        self,
        inner: ModelGateway,
        *,
        rates: dict[str, float],
        slow_delay: float = 1.0,
        retry_after: float = 0.2,
        seed: int | None = None,
    ) -> None:
        self.inner = inner
        self.rates = dict(rates)
        self.slow_delay = slow_delay
        self.retry_after = retry_after
        self.check = WireCheck()
        self._random = random.Random(seed)

    async def _admit(self, request: ModelRequest) -> None:
        check = self.check
        check.requests += 1
        if request.purpose == "summary":
            check.summaries += 1
        else:
            check.rounds += 1
        orphans = orphan_items(request.input)
        if orphans:
            check.orphan_requests += 1
            if len(check.orphan_examples) < 10:
                check.orphan_examples.append(orphans[:5])
        draw = self._random.random()
        for name, rate in self.rates.items():
            if draw < rate:
                check.faults[name] = check.faults.get(name, 0) + 1
                if name == "429":
                    raise RateLimitError("injected rate limit", retry_after=self.retry_after)
                if name == "slow":
                    await anyio.sleep(self.slow_delay)
                    return
                raise ModelConnectionError(f"injected server error {name}")
            draw -= rate

    async def create(self, request: ModelRequest) -> ModelResponse:
        """Raises the injected error, or what ``inner`` raises."""
        await self._admit(request)
        return await self.inner.create(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Raises as ``create`` does, before any event."""
        await self._admit(request)
        async for event in self.inner.stream(request):
            yield event

    async def aclose(self) -> None:
        """Close ``inner``."""
        await self.inner.aclose()


class MeteredGateway:
    """Times summary calls (the compaction latency of a load run) and passes everything on."""

    def __init__(self, inner: ModelGateway) -> None:
        self.inner = inner
        self.summary_seconds: list[float] = []

    async def create(self, request: ModelRequest) -> ModelResponse:
        """Raises what ``inner`` raises."""
        if request.purpose != "summary":
            return await self.inner.create(request)
        started = time.perf_counter()
        response = await self.inner.create(request)
        self.summary_seconds.append(time.perf_counter() - started)
        return response

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Raises what ``inner`` raises."""
        return self.inner.stream(request)

    async def aclose(self) -> None:
        """Close ``inner``."""
        await self.inner.aclose()


async def _first_line(process: Process) -> str:
    assert process.stdout is not None
    buffer = b""
    while b"\n" not in buffer:
        try:
            buffer += await process.stdout.receive()
        except anyio.EndOfStream:
            break
    return buffer.split(b"\n", 1)[0].decode(errors="replace").strip()


@asynccontextmanager
async def fake_server_process(
    *,
    latency: float = 0.0,
    tool_rounds: int = 2,
    faults: str = "",
    slow_delay: float = 1.0,
    retry_after: float = 0.2,
    seed: int | None = None,
) -> AsyncIterator[str]:
    """The fake server in its own process: yields its base URL, stops it on exit."""
    command = [
        sys.executable,
        "-m",
        "stowage.testing.fake_server",
        "--port",
        "0",
        "--latency",
        str(latency),
        "--tool-rounds",
        str(tool_rounds),
        "--slow-delay",
        str(slow_delay),
        "--retry-after",
        str(retry_after),
        "--forget-requests",
    ]
    if faults:
        command += ["--faults", faults]
    if seed is not None:
        command += ["--seed", str(seed)]
    process = await anyio.open_process(command, stderr=None)
    try:
        with anyio.fail_after(30):
            line = await _first_line(process)
        if not line.startswith("listening "):
            raise ConfigError(f"the fake server did not start: {line!r}")
        yield line.removeprefix("listening ")
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            await process.aclose()


async def fetch_server_stats(base_url: str) -> dict[str, Any]:
    """The fake server's ``GET /_fake/stats``. Raises ``ModelConnectionError`` if it cannot."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.get(f"{root}/_fake/stats")
            response.raise_for_status()
            data: dict[str, Any] = response.json()
    except httpx.HTTPError as exc:
        raise ModelConnectionError(f"cannot read the fake server's stats: {exc}") from exc
    return data
