"""CPU per model call: stowage against a plain ``aiohttp`` loop speaking the same wire (the
HTTP floor, as stowage sends through aiohttp too), the same loop made durable (the floor of a
loop that loses no committed round), and optionally a plain ``httpx`` loop and a bare
``openai.AsyncOpenAI`` agent loop.

    python scripts/bench_overhead.py                       # 50 and 200 sessions
    python scripts/bench_overhead.py --sessions-sweep      # 50, 200 and 1,000 sessions
    python scripts/bench_overhead.py --concurrency 50 --wire chat --stream off
    python scripts/bench_overhead.py --also httpx,bare     # the httpx loop and the SDK too
    python scripts/bench_overhead.py --also nosync         # stowage without fsync as well
    python scripts/bench_overhead.py --best-of 2 --variant queue=/tmp/tree   # another tree

The durable loop is the aiohttp loop that journals every history item to a file per session
(one JSON line each) with one ``os.fdatasync`` before each model call and one at the end of
each turn, called inline. stowage's goal is its CPU per call within ``--target`` (1.5) times
the durable loop's; both ratios are printed side by side. ``--best-of N`` measures every
client N times, in turn, and keeps each one's least CPU; ``--variant NAME=DIR`` measures
stowage again imported from another tree (a copy of the package with a piece taken out),
printed with its ratio to stowage: what that piece buys.

All the clients run the same agent (the fake server's scripted brain: 3 tool rounds and an
answer, so 4 model calls per turn; tools return ``--tool-kb`` KB) against the same fake OpenAI
server in its own process, each measurement in a fresh client process whose CPU time (all
threads, user + system) is divided by the round calls it made. stowage runs with its JSONL store
fsyncing every batch and compaction on (``--also nosync`` measures it again with
``durability=none``: the difference is what the log's fdatasync calls cost, two a tool round;
``--also syncfs`` with ``durability=syncfs``, one sync of the filesystem per group commit);
its summary calls are extra work charged to it, not counted as calls. Every row runs the
same number of sessions (``--min-sessions``, raised to the
largest concurrency measured), so rows differ only in how many run at once. Each client is set
up and warmed (a few short sessions: lazy imports, first-use caches, the first connections)
before its clock starts; every client process runs with the GC threshold ``stowage worker``
sets. "1 concurrent session" runs the sessions one after the other.

The aiohttp loop posts the body encoded with orjson through one ``aiohttp.ClientSession`` (its
pool takes a connection in constant time, however many sessions share it), parses the answer
with orjson and reads the SSE lines itself: no SDK, no validation, no store; the same
libraries stowage uses, so the ratio is what stowage itself costs. The httpx loop posts JSON
with one pooled ``httpx.AsyncClient`` per 2 concurrent sessions (the cheapest way to use httpx
at concurrency: its pool checks every connection on each request). Printed per row: each
client's ms of CPU per call and stowage over the aiohttp floor (and over the bare SDK, when
measured); with more than one concurrency, how much stowage's and the floor's cost grew from
the fewest sessions at once to the most. stowage sends through aiohttp; run with
``STOWAGE_HTTP_CLIENT=sdk`` to measure it on the SDK's public API instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from stowage.facade import GC_YOUNG_THRESHOLD, tune_gc

_TOOLS_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
_TOOL_NAMES = ("fetch_blob", "fetch_log")
#: one agent: (index, warm-up?) -> the model calls it made
Agent = Callable[[int, bool], Awaitable[int]]
_WARM_SESSIONS = 8
_POOL_SESSIONS = 2
_SYSTEM = "You are a careful agent. Fetch what you need with the tools, then answer briefly."


def _blob(tool_kb: float, name: str, n: int) -> str:
    size = max(1, int(tool_kb * 1024))
    head = f"{name} #{n}: "
    return head + ("lorem ipsum dolor sit amet " * (size // 27 + 1))[: size - len(head)]


_CHAT_TOOLS = [
    {"type": "function",
     "function": {"name": n, "description": f"Fetch the next {n}.", "parameters": _TOOLS_SCHEMA}}
    for n in _TOOL_NAMES
]  # fmt: skip
_RESPONSES_TOOLS = [
    {"type": "function", "name": n, "description": f"Fetch the next {n}.",
     "parameters": _TOOLS_SCHEMA, "strict": False}
    for n in _TOOL_NAMES
]  # fmt: skip


def _fold(
    slots: dict[int, dict[str, str]], index: int, call_id: str | None, name: str | None,
    arguments: str | None,
) -> None:  # fmt: skip
    """Add one streamed tool-call delta to the call being assembled at ``index``."""
    slot = slots.setdefault(index, {"id": "", "name": "", "args": ""})
    slot["id"] = call_id or slot["id"]
    slot["name"] = name or slot["name"]
    slot["args"] += arguments or ""


def _assistant(text: str, slots: dict[int, dict[str, str]]) -> dict[str, Any]:
    """The assistant message a streamed chat answer makes, its tool calls included."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if slots:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["args"]}}
            for c in slots.values()
        ]  # fmt: skip
    return message


def _answer(
    history: list[Any], pending: list[tuple[str, str]], args: argparse.Namespace, served: int,
    *, chat: bool,
) -> int:  # fmt: skip
    """Append the tools' outputs for ``pending`` calls; returns the outputs served so far."""
    for call_id, name in pending:
        served += 1
        output = _blob(args.tool_kb, name, served)
        history.append(
            {"role": "tool", "tool_call_id": call_id, "content": output}
            if chat
            else {"type": "function_call_output", "call_id": call_id, "output": output}
        )
    return served


# -- the bare openai loop ---------------------------------------------------------------------


async def _bare_chat(client: Any, args: argparse.Namespace, index: int) -> int:
    messages: list[Any] = [{"role": "system", "content": _SYSTEM}]
    calls = served = 0
    for turn in range(args.turns):
        messages.append(
            {"role": "user", "content": f"Task {turn} of agent {index}: fetch, report."}
        )
        while True:
            calls += 1
            if args.stream:
                text, slots = "", {}
                stream = await client.chat.completions.create(
                    model="bench", messages=messages, tools=_CHAT_TOOLS, stream=True,
                    stream_options={"include_usage": True},
                )  # fmt: skip
                async for chunk in stream:
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                        for tc in choice.delta.tool_calls or ():
                            function = tc.function
                            name = function.name if function is not None else None
                            arguments = function.arguments if function is not None else None
                            _fold(slots, tc.index, tc.id, name, arguments)
                messages.append(_assistant(text, slots))
                pending = [(c["id"], c["name"]) for c in slots.values()]
            else:
                response = await client.chat.completions.create(
                    model="bench", messages=messages, tools=_CHAT_TOOLS
                )
                reply = response.choices[0].message
                messages.append(reply)
                pending = [(tc.id, tc.function.name) for tc in reply.tool_calls or ()]
            if not pending:
                break
            served = _answer(messages, pending, args, served, chat=True)
    return calls


async def _bare_responses(client: Any, args: argparse.Namespace, index: int) -> int:
    items: list[Any] = [{"role": "system", "content": _SYSTEM}]
    calls = served = 0
    for turn in range(args.turns):
        items.append({"role": "user", "content": f"Task {turn} of agent {index}: fetch, report."})
        while True:
            calls += 1
            if args.stream:
                final = None
                stream = await client.responses.create(
                    model="bench", input=items, tools=_RESPONSES_TOOLS, stream=True
                )
                async for event in stream:
                    if event.type == "response.completed":
                        final = event.response
                assert final is not None
                response = final
            else:
                response = await client.responses.create(
                    model="bench", input=items, tools=_RESPONSES_TOOLS
                )
            items.extend(response.output)
            pending = [(o.call_id, o.name) for o in response.output if o.type == "function_call"]
            if not pending:
                break
            served = _answer(items, pending, args, served, chat=False)
    return calls


# -- the plain aiohttp loop (the HTTP floor) -------------------------------------------------


async def _aiohttp_events(response: Any) -> AsyncIterator[Any]:
    """Every ``data:`` payload of a server-sent event stream, parsed (``[DONE]`` ends it)."""
    import orjson

    async for line in response.content:
        if line.startswith(b"data:"):
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            yield orjson.loads(data)


async def _aiohttp_post(session: Any, path: str, body: dict[str, Any]) -> Any:
    import orjson

    async with session.post(path, data=orjson.dumps(body)) as response:
        response.raise_for_status()
        return orjson.loads(await response.read())


class _Journal:
    """The durable loop's log: a file per session, every history item appended as one JSON
    line, made durable by one ``fdatasync`` before each model call and one at the end of each
    turn (called inline: the cheapest a loop that loses no committed round can do)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._written = 0

    def commit(self, history: list[Any]) -> None:
        """Append the items added since the last commit and make them durable."""
        import orjson

        new = history[self._written :]
        self._written = len(history)
        os.write(self._fd, b"".join(orjson.dumps(item) + b"\n" for item in new))
        os.fdatasync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


async def _aiohttp_chat(
    session: Any, args: argparse.Namespace, index: int, journal: _Journal | None = None
) -> int:
    messages: list[Any] = [{"role": "system", "content": _SYSTEM}]
    calls = served = 0
    for turn in range(args.turns):
        messages.append(
            {"role": "user", "content": f"Task {turn} of agent {index}: fetch, report."}
        )
        while True:
            calls += 1
            if journal is not None:
                journal.commit(messages)
            body: dict[str, Any] = {"model": "bench", "messages": messages, "tools": _CHAT_TOOLS}
            if args.stream:
                import orjson

                body |= {"stream": True, "stream_options": {"include_usage": True}}
                text, slots = "", {}
                async with session.post(
                    args.base_url.rstrip("/") + "/chat/completions", data=orjson.dumps(body)
                ) as response:
                    response.raise_for_status()
                    async for chunk in _aiohttp_events(response):
                        for choice in chunk.get("choices") or ():
                            delta = choice.get("delta") or {}
                            text += delta.get("content") or ""
                            for tc in delta.get("tool_calls") or ():
                                function = tc.get("function") or {}
                                _fold(slots, tc["index"], tc.get("id"), function.get("name"),
                                      function.get("arguments"))  # fmt: skip
                message = _assistant(text, slots)
            else:
                message = (
                    await _aiohttp_post(
                        session, args.base_url.rstrip("/") + "/chat/completions", body
                    )
                )["choices"][0]["message"]
            messages.append(message)
            pending = [(c["id"], c["function"]["name"]) for c in message.get("tool_calls") or ()]
            if not pending:
                break
            served = _answer(messages, pending, args, served, chat=True)
        if journal is not None:
            journal.commit(messages)
    return calls


async def _aiohttp_responses(
    session: Any, args: argparse.Namespace, index: int, journal: _Journal | None = None
) -> int:
    items: list[Any] = [{"role": "system", "content": _SYSTEM}]
    calls = served = 0
    for turn in range(args.turns):
        items.append({"role": "user", "content": f"Task {turn} of agent {index}: fetch, report."})
        while True:
            calls += 1
            if journal is not None:
                journal.commit(items)
            body: dict[str, Any] = {"model": "bench", "input": items, "tools": _RESPONSES_TOOLS}
            if args.stream:
                import orjson

                body["stream"] = True
                final: Any = None
                async with session.post(
                    args.base_url.rstrip("/") + "/responses", data=orjson.dumps(body)
                ) as response:
                    response.raise_for_status()
                    async for event in _aiohttp_events(response):
                        if event.get("type") == "response.completed":
                            final = event["response"]
                assert final is not None
            else:
                final = await _aiohttp_post(session, args.base_url.rstrip("/") + "/responses", body)
            output = final["output"]
            items.extend(output)
            pending = [(o["call_id"], o["name"]) for o in output if o["type"] == "function_call"]
            if not pending:
                break
            served = _answer(items, pending, args, served, chat=False)
        if journal is not None:
            journal.commit(items)
    return calls


@contextlib.asynccontextmanager
async def _aiohttp_client(args: argparse.Namespace) -> AsyncIterator[Agent]:
    import aiohttp

    # full URLs, not ``base_url`` (a base with a path needs aiohttp 3.10; the floor is lower)
    session = aiohttp.ClientSession(
        headers={"Authorization": "Bearer fake-key", "Content-Type": "application/json"},
        connector=aiohttp.TCPConnector(limit=1000),
    )
    loop = _aiohttp_chat if args.wire == "chat" else _aiohttp_responses
    try:
        if args.child != "durable":
            yield lambda index, _warm: loop(session, args, index)
            return
        with tempfile.TemporaryDirectory(prefix="stowage-bench-loop-") as store:

            async def durable(index: int, warm: bool) -> int:
                journal = _Journal(Path(store) / f"{'warm' if warm else 'bench'}-{index:05d}.jsonl")
                try:
                    return await loop(session, args, index, journal)
                finally:
                    journal.close()

            yield durable
    finally:
        await session.close()


# -- stowage's gateway alone (no runtime, no store) ---------------------------------------------


async def _gateway_loop(gateway: Any, args: argparse.Namespace, index: int) -> int:
    from stowage.core import (
        FunctionCallOutput,
        ModelRequest,
        ResponseDone,
        SystemMessage,
        ToolSpec,
        UserMessage,
    )

    tools = tuple(
        ToolSpec(name=n, description=f"Fetch the next {n}.", parameters=_TOOLS_SCHEMA)
        for n in _TOOL_NAMES
    )
    items: list[Any] = [SystemMessage(text=_SYSTEM)]
    calls = served = 0
    for turn in range(args.turns):
        items.append(UserMessage(text=f"Task {turn} of agent {index}: fetch, report."))
        while True:
            calls += 1
            request = ModelRequest(model="bench", input=tuple(items), tools=tools)
            if args.stream:
                response = None
                async for event in gateway.stream(request):
                    if type(event) is ResponseDone:
                        response = event.response
                assert response is not None
            else:
                response = await gateway.create(request)
            items.extend(response.items)
            if not response.calls:
                break
            for call in response.calls:
                served += 1
                output = _blob(args.tool_kb, call.name, served)
                items.append(FunctionCallOutput(call_id=call.call_id, output=output))
    return calls


@contextlib.asynccontextmanager
async def _gateway_client(args: argparse.Namespace) -> AsyncIterator[Agent]:
    from stowage.model._openai_gateway import OpenAIGateway

    gateway = OpenAIGateway(base_url=args.base_url, api_key="fake-key", wire_api=args.wire)
    try:
        yield lambda index, _warm: _gateway_loop(gateway, args, index)
    finally:
        await gateway.aclose()


# -- the plain httpx loop ---------------------------------------------------------------------


async def _sse_json(response: Any) -> Any:
    """Every ``data:`` payload of a server-sent event stream, parsed (``[DONE]`` ends it)."""
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data == "[DONE]":
                return
            yield json.loads(data)


async def _httpx_chat(client: Any, args: argparse.Namespace, index: int) -> int:
    messages: list[Any] = [{"role": "system", "content": _SYSTEM}]
    calls = served = 0
    for turn in range(args.turns):
        messages.append(
            {"role": "user", "content": f"Task {turn} of agent {index}: fetch, report."}
        )
        while True:
            calls += 1
            body: dict[str, Any] = {"model": "bench", "messages": messages, "tools": _CHAT_TOOLS}
            if args.stream:
                body |= {"stream": True, "stream_options": {"include_usage": True}}
                text, slots = "", {}
                async with client.stream("POST", "/chat/completions", json=body) as response:
                    response.raise_for_status()
                    async for chunk in _sse_json(response):
                        for choice in chunk.get("choices") or ():
                            delta = choice.get("delta") or {}
                            text += delta.get("content") or ""
                            for tc in delta.get("tool_calls") or ():
                                function = tc.get("function") or {}
                                _fold(slots, tc["index"], tc.get("id"), function.get("name"),
                                      function.get("arguments"))  # fmt: skip
                message = _assistant(text, slots)
            else:
                response = await client.post("/chat/completions", json=body)
                response.raise_for_status()
                message = response.json()["choices"][0]["message"]
            messages.append(message)
            pending = [(c["id"], c["function"]["name"]) for c in message.get("tool_calls") or ()]
            if not pending:
                break
            served = _answer(messages, pending, args, served, chat=True)
    return calls


async def _httpx_responses(client: Any, args: argparse.Namespace, index: int) -> int:
    items: list[Any] = [{"role": "system", "content": _SYSTEM}]
    calls = served = 0
    for turn in range(args.turns):
        items.append({"role": "user", "content": f"Task {turn} of agent {index}: fetch, report."})
        while True:
            calls += 1
            body: dict[str, Any] = {"model": "bench", "input": items, "tools": _RESPONSES_TOOLS}
            if args.stream:
                body["stream"] = True
                final: Any = None
                async with client.stream("POST", "/responses", json=body) as response:
                    response.raise_for_status()
                    async for event in _sse_json(response):
                        if event.get("type") == "response.completed":
                            final = event["response"]
                assert final is not None
            else:
                response = await client.post("/responses", json=body)
                response.raise_for_status()
                final = response.json()
            output = final["output"]
            items.extend(output)
            pending = [(o["call_id"], o["name"]) for o in output if o["type"] == "function_call"]
            if not pending:
                break
            served = _answer(items, pending, args, served, chat=False)
    return calls


@contextlib.asynccontextmanager
async def _httpx_client(args: argparse.Namespace) -> AsyncIterator[Agent]:
    import httpx

    # one pooled client per 2 concurrent sessions: httpx's pool checks each of its connections
    # on every request, so a client shared by many sessions costs more per call the more
    # sessions there are; small pools are the cheapest way to use it (stowage's gateway shards
    # its calls the same way, 4 in flight a pool)
    clients = [
        httpx.AsyncClient(
            base_url=args.base_url, headers={"Authorization": "Bearer fake-key"}, timeout=60
        )
        for _ in range(-(-args.concurrency // _POOL_SESSIONS))
    ]
    loop = _httpx_chat if args.wire == "chat" else _httpx_responses
    try:
        yield lambda index, _warm: loop(clients[index % len(clients)], args, index)
    finally:
        for client in clients:
            await client.aclose()


@contextlib.asynccontextmanager
async def _bare_client(args: argparse.Namespace) -> AsyncIterator[Agent]:
    import openai

    client = openai.AsyncOpenAI(base_url=args.base_url, api_key="fake-key")  # SDK defaults
    loop = _bare_chat if args.wire == "chat" else _bare_responses
    try:
        yield lambda index, _warm: loop(client, args, index)
    finally:
        await client.close()


# -- stowage ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _stowage_client(args: argparse.Namespace) -> AsyncIterator[Agent]:
    from stowage import Event, HistoryCompacted, RoundCommitted, Runtime, Settings
    from stowage.core._logging import configure_logging
    from stowage.load._engine import synthetic_tools

    configure_logging("console", "warning")
    with tempfile.TemporaryDirectory(prefix="stowage-bench-") as store:
        settings = Settings(
            model="bench",
            base_url=args.base_url,
            api_key="fake-key",
            wire_api=args.wire,
            stream=args.stream,
            store=Path(store),
            durability={"nosync": "none", "syncfs": "syncfs"}.get(args.child, "fsync"),
            tools="none",
            system=_SYSTEM,
            compact_threshold=args.compact_threshold,
        )
        async with Runtime(settings, tools=synthetic_tools(args.tool_kb)) as rt:
            calls: dict[str, int] = {}
            compactions: dict[str, int] = {}

            def count(event: Event) -> None:
                if type(event) is RoundCommitted:
                    calls[event.session_id] = calls.get(event.session_id, 0) + 1
                elif type(event) is HistoryCompacted:
                    compactions[event.session_id] = compactions.get(event.session_id, 0) + 1

            rt.subscribe(count)

            async def one(index: int, warm: bool) -> int:
                session_id = f"{'warm' if warm else 'bench'}-{index:05d}"
                for turn in range(args.turns):
                    await rt.send(session_id, f"Task {turn} of agent {index}: fetch, report.")
                await rt.close(session_id)
                done = compactions.pop(session_id, 0)
                if not warm:
                    args.compactions += done
                return calls.pop(session_id, 0)

            yield one


# -- measuring ------------------------------------------------------------------------------


async def _sessions(args: argparse.Namespace, one: Agent, *, warm: bool = False) -> int:
    """Run the sessions (``args.concurrency`` at a time, at least ``args.min_sessions``, or a
    few short ones to warm up); returns the model calls they made."""
    concurrency = min(args.concurrency, _WARM_SESSIONS) if warm else args.concurrency
    total = concurrency if warm else max(args.concurrency, args.min_sessions)
    results: list[int] = []
    queue = iter(range(total))

    async def worker() -> None:
        for index in queue:
            results.append(await one(index, warm))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sum(results)


async def _measured(args: argparse.Namespace) -> dict[str, float]:
    """Set the client up, warm it, then measure the CPU time (user + system, all threads) and
    the wall time of the sessions, and count their model calls."""
    setup = {
        "aiohttp": _aiohttp_client,
        "durable": _aiohttp_client,
        "bare": _bare_client,
        "gateway": _gateway_client,
        "httpx": _httpx_client,
        "stowage": _stowage_client,
        "nosync": _stowage_client,
        "syncfs": _stowage_client,
    }
    async with setup["stowage" if args.child.startswith("variant:") else args.child](args) as one:
        await _sessions(args, one, warm=True)  # lazy imports, first-use caches, connections
        profiler = cProfile.Profile(time.process_time) if args.profile is not None else None
        cpu, wall = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        calls = await _sessions(args, one)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"calls": calls, "cpu_s": cpu, "wall_s": wall, "compactions": args.compactions}


def _child(args: argparse.Namespace) -> None:
    if args.gc_threshold:  # as `stowage worker` and `stowage load` run; the same for every client
        tune_gc(args.gc_threshold)
    print(json.dumps(asyncio.run(_measured(args))))


def _measure(
    args: argparse.Namespace, mode: str, concurrency: int, wire: str, stream: bool
) -> dict[str, Any]:
    env = None
    if mode.startswith("variant:"):  # stowage again, imported from another tree
        env = {**os.environ, "PYTHONPATH": args.variants[mode.removeprefix("variant:")]}
    command = [
        sys.executable, __file__, "--child", mode, "--base-url", args.base_url,
        "--concurrency", str(concurrency), "--wire", wire, "--stream", "on" if stream else "off",
        "--turns", str(args.turns), "--tool-kb", str(args.tool_kb),
        "--min-sessions", str(args.min_sessions), "--compact-threshold", str(args.compact_threshold),
        "--gc-threshold", str(args.gc_threshold),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu_ms_per_call"] = result["cpu_s"] * 1000 / max(1, result["calls"])
    return result


def _row(
    ms: dict[str, float], runs: dict[str, dict[str, Any]], sessions: int, wire: str,
    stream: bool,
) -> dict[str, Any]:  # fmt: skip
    """One configuration's figures: each client's ms of CPU per call, stowage over the plain
    loop (``ratio_to_floor``) and over the durable loop (``ratio_to_durable``), each extra
    stowage mode over the plain loop and each variant over stowage."""
    row: dict[str, Any] = {"sessions": sessions, "wire": wire, "stream": stream}
    for mode in ("aiohttp", "durable", "gateway", "httpx", "bare", "stowage", "nosync", "syncfs"):
        row[f"{mode}_ms"] = round(ms[mode], 3) if mode in ms else None
    for mode in ("gateway", "nosync", "syncfs"):
        row[f"{mode}_ratio"] = round(ms[mode] / ms["aiohttp"], 3) if mode in ms else None
    row["ratio"] = round(ms["stowage"] / ms["bare"], 3) if "bare" in ms else None
    row["ratio_to_floor"] = round(ms["stowage"] / ms["aiohttp"], 3)
    row["ratio_to_durable"] = round(ms["stowage"] / ms["durable"], 3)
    row["variants"] = {
        mode.removeprefix("variant:"): {
            "ms": round(ms[mode], 3), "to_stowage": round(ms[mode] / ms["stowage"], 3)
        }
        for mode in ms
        if mode.startswith("variant:")
    }  # fmt: skip
    row["calls"] = {mode: run["calls"] for mode, run in runs.items()}
    row["wall_s"] = {mode: round(run["wall_s"], 2) for mode, run in runs.items()}
    return row


def _line(row: dict[str, Any], ms: dict[str, float]) -> str:
    """The row as one printed line."""
    parts = [
        f"{row['sessions']:>5} sessions {row['wire']:<9} stream={'on ' if row['stream'] else 'off'}",
        f"aiohttp {ms['aiohttp']:6.3f}  durable {ms['durable']:6.3f}",
    ]
    labels = {"gateway": "gateway", "httpx": "httpx", "bare": "openai"}
    parts += [f"{label} {ms[mode]:6.3f}" for mode, label in labels.items() if mode in ms]
    parts.append(f"stowage {ms['stowage']:6.3f} ms/call")
    for mode, label in (("syncfs", "with syncfs"), ("nosync", "without fsync")):
        if mode in ms:
            parts.append(f"{label} {ms[mode]:6.3f} ({row[f'{mode}_ratio']:.2f}x)")
    for name, variant in row["variants"].items():
        parts.append(f"{name} {variant['ms']:6.3f} ({variant['to_stowage']:.2f}x stowage)")
    if row["ratio"] is not None:
        parts.append(f"stowage/openai {row['ratio']:.2f}")
    parts.append(
        f"stowage/aiohttp {row['ratio_to_floor']:.2f}  stowage/durable {row['ratio_to_durable']:.2f}"
    )
    return "  ".join(parts)


async def _with_server(args: argparse.Namespace) -> list[dict[str, Any]]:
    from stowage.load._endpoint import fake_server_process

    rows: list[dict[str, Any]] = []
    server = (
        contextlib.nullcontext(args.base_url)
        if args.base_url is not None
        else fake_server_process(tool_rounds=3)
    )
    async with server as base_url:
        args.base_url = base_url
        for concurrency in args.concurrency_list:
            for wire in args.wires:
                for stream in args.streams:
                    runs: dict[str, dict[str, Any]] = {}
                    for _ in range(args.best_of):  # in turn, so drift touches every client
                        for mode in args.modes:
                            run = await asyncio.to_thread(
                                _measure, args, mode, concurrency, wire, stream
                            )
                            if mode not in runs or run["cpu_s"] < runs[mode]["cpu_s"]:
                                runs[mode] = run
                    ms = {mode: run["cpu_ms_per_call"] for mode, run in runs.items()}
                    row = _row(ms, runs, concurrency, wire, stream)
                    rows.append(row)
                    print(_line(row, ms), flush=True)
    return rows


def _growth(rows: list[dict[str, Any]]) -> list[str]:
    """Per wire and stream mode: how the cost per call grew from the fewest sessions measured
    to the most, for stowage and for the HTTP floor."""
    lines = []
    for wire, stream in sorted({(r["wire"], r["stream"]) for r in rows}):
        same = sorted((r for r in rows if r["wire"] == wire and r["stream"] == stream),
                      key=lambda r: r["sessions"])  # fmt: skip
        if len(same) < 2 or same[0]["sessions"] == 1:
            same = [r for r in same if r["sessions"] > 1]
        if len(same) < 2:
            continue
        low, high = same[0], same[-1]
        lines.append(
            f"{wire:<9} stream={'on ' if stream else 'off'} {low['sessions']} -> {high['sessions']} "
            f"sessions: stowage {high['stowage_ms'] / low['stowage_ms'] - 1:+.0%}, "
            f"aiohttp {high['aiohttp_ms'] / low['aiohttp_ms'] - 1:+.0%}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write it as JSON with --json); exit 1 if stowage's cost over the
    durable loop exceeds --target in a row."""
    parser = argparse.ArgumentParser(prog="bench_overhead.py", description=__doc__)
    parser.add_argument(
        "--child",
        default=None,
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--base-url",
        default=None,
        help="an already running OpenAI-compatible server (default: start the fake one)",
    )
    parser.add_argument("--concurrency", type=int, default=None, help="only this many sessions")
    parser.add_argument(
        "--sessions-sweep", action="store_true", help="50, 200 and 1,000 concurrent sessions"
    )
    parser.add_argument("--wire", choices=["chat", "responses"], default=None)
    parser.add_argument("--stream", choices=["on", "off"], default=None)
    parser.add_argument("--turns", type=int, default=5, help="turns per session (4 calls each)")
    parser.add_argument("--min-sessions", type=int, default=50, help="sessions run at least")
    parser.add_argument("--tool-kb", type=float, default=1.0)
    parser.add_argument("--compact-threshold", type=int, default=2000)
    parser.add_argument(
        "--target", type=float, default=1.5, help="the ratio to the durable loop to stay under"
    )
    parser.add_argument(
        "--best-of",
        type=int,
        default=1,
        help="measure every client this many times, in turn, and keep each one's least CPU",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="stowage again, imported from DIR (put first on PYTHONPATH: a tree laid out as "
        "the installed package, stowage/ with its actors/ and storage/), printed as NAME with "
        "its ratio to stowage; repeatable",
    )
    parser.add_argument(
        "--gc-threshold",
        type=int,
        default=GC_YOUNG_THRESHOLD,
        help="young-generation GC threshold of every client process, set with stowage.tune_gc "
        "as `stowage worker` does (0: Python's thresholds)",
    )
    parser.add_argument(
        "--also",
        default="",
        help="more clients to measure, comma-separated: gateway (stowage's OpenAIGateway "
        "alone, the same agent loop as the floor's: what the HTTP layer costs), httpx (the "
        "plain httpx loop), bare (the bare openai loop, the slowest), nosync (stowage with "
        "durability=none: the same runtime without an fdatasync per write, so the difference "
        "is what syncing the log costs), syncfs (stowage with durability=syncfs: a group "
        "commit of several logs synced by one syncfs)",
    )
    # the bare openai loop is measured only when --also names it; the flag that left it out
    # is still taken, so older command lines run
    parser.add_argument("--no-bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="with --child: write cProfile stats of the measured sessions here",
    )
    args = parser.parse_args(argv)
    if args.child is not None:
        args.stream = args.stream == "on"
        args.compactions = 0  # full compactions of the measured stowage sessions
        _child(args)
        return 0
    sweep = [50, 200, 1000] if args.sessions_sweep else [50, 200]
    args.concurrency_list = [args.concurrency] if args.concurrency else sweep
    # every row runs the same sessions, so that only how many run at once differs between rows
    args.min_sessions = max(args.min_sessions, *args.concurrency_list)
    args.wires = [args.wire] if args.wire else ["chat", "responses"]
    args.streams = [args.stream == "on"] if args.stream else [False, True]
    also = [m for m in args.also.split(",") if m]
    if unknown := set(also) - {"gateway", "httpx", "bare", "nosync", "syncfs"}:
        parser.error(
            "--also takes gateway, httpx, bare, nosync and syncfs, not "
            + ", ".join(sorted(unknown))
        )
    args.variants = dict(v.split("=", 1) for v in args.variant)
    args.modes = ("aiohttp", "durable", *also, "stowage", *(f"variant:{n}" for n in args.variants))
    rows = asyncio.run(_with_server(args))
    for line in _growth(rows):
        print(line)
    sdk = [row["ratio"] for row in rows if row["ratio"] is not None]
    if sdk:
        print(f"worst ratio stowage / openai: {max(sdk):.3f}")
    floor = max(row["ratio_to_floor"] for row in rows)
    durable = max(row["ratio_to_durable"] for row in rows)
    print(f"worst ratio stowage / aiohttp (the HTTP floor): {floor:.3f}")
    print(f"worst ratio stowage / durable aiohttp loop: {durable:.3f} (target <= {args.target})")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if durable <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
