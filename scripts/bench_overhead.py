"""CPU per model call: a bare ``openai.AsyncOpenAI`` agent loop against stowage.

    python scripts/bench_overhead.py                       # the whole table
    python scripts/bench_overhead.py --concurrency 50 --wire chat --stream off

Both clients run the same agent (the fake server's scripted brain: 3 tool rounds and an answer,
so 4 model calls per turn; tools return ``--tool-kb`` KB) against the same fake OpenAI server in
its own process, each measurement in a fresh client process whose CPU time (all threads, user +
system) is divided by the round calls it made. stowage runs with its JSONL store fsyncing every
batch and compaction on; its summary calls are extra work charged to it, not counted as calls.
"1 concurrent session" runs the sessions one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_TOOLS_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
_TOOL_NAMES = ("fetch_blob", "fetch_log")
_SYSTEM = "You are a careful agent. Fetch what you need with the tools, then answer briefly."


def _blob(tool_kb: float, name: str, n: int) -> str:
    size = max(1, int(tool_kb * 1024))
    head = f"{name} #{n}: "
    return head + ("lorem ipsum dolor sit amet " * (size // 27 + 1))[: size - len(head)]


# -- the bare openai loop ---------------------------------------------------------------------


async def _bare_chat(client: Any, args: argparse.Namespace, index: int) -> int:
    tools = [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": f"Fetch the next {n}.",
                "parameters": _TOOLS_SCHEMA,
            },
        }
        for n in _TOOL_NAMES
    ]
    messages: list[Any] = [{"role": "system", "content": _SYSTEM}]
    calls = served = 0
    for turn in range(args.turns):
        messages.append(
            {"role": "user", "content": f"Task {turn} of agent {index}: fetch, report."}
        )
        while True:
            calls += 1
            if args.stream:
                text, tool_calls = "", {}
                stream = await client.chat.completions.create(
                    model="bench", messages=messages, tools=tools, stream=True,
                    stream_options={"include_usage": True},
                )  # fmt: skip
                async for chunk in stream:
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                        for tc in choice.delta.tool_calls or ():
                            slot = tool_calls.setdefault(
                                tc.index, {"id": "", "name": "", "args": ""}
                            )
                            slot["id"] = tc.id or slot["id"]
                            if tc.function is not None:
                                slot["name"] = tc.function.name or slot["name"]
                                slot["args"] += tc.function.arguments or ""
                message: dict[str, Any] = {"role": "assistant", "content": text or None}
                if tool_calls:
                    message["tool_calls"] = [
                        {"id": c["id"], "type": "function",
                         "function": {"name": c["name"], "arguments": c["args"]}}
                        for c in tool_calls.values()
                    ]  # fmt: skip
                messages.append(message)
                pending = [(c["id"], c["name"]) for c in tool_calls.values()]
            else:
                response = await client.chat.completions.create(
                    model="bench", messages=messages, tools=tools
                )
                reply = response.choices[0].message
                messages.append(reply)
                pending = [(tc.id, tc.function.name) for tc in reply.tool_calls or ()]
            if not pending:
                break
            for call_id, name in pending:
                served += 1
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": _blob(args.tool_kb, name, served),
                    }
                )
    return calls


async def _bare_responses(client: Any, args: argparse.Namespace, index: int) -> int:
    tools = [
        {"type": "function", "name": n, "description": f"Fetch the next {n}.",
         "parameters": _TOOLS_SCHEMA, "strict": False}
        for n in _TOOL_NAMES
    ]  # fmt: skip
    items: list[Any] = [{"role": "system", "content": _SYSTEM}]
    calls = served = 0
    for turn in range(args.turns):
        items.append({"role": "user", "content": f"Task {turn} of agent {index}: fetch, report."})
        while True:
            calls += 1
            if args.stream:
                final = None
                stream = await client.responses.create(
                    model="bench", input=items, tools=tools, stream=True
                )
                async for event in stream:
                    if event.type == "response.completed":
                        final = event.response
                assert final is not None
                response = final
            else:
                response = await client.responses.create(model="bench", input=items, tools=tools)
            items.extend(response.output)
            pending = [(o.call_id, o.name) for o in response.output if o.type == "function_call"]
            if not pending:
                break
            for call_id, name in pending:
                served += 1
                items.append(
                    {"type": "function_call_output", "call_id": call_id,
                     "output": _blob(args.tool_kb, name, served)}
                )  # fmt: skip
    return calls


async def _run_bare(args: argparse.Namespace) -> int:
    import openai

    client = openai.AsyncOpenAI(base_url=args.base_url, api_key="fake-key")  # SDK defaults
    loop = _bare_chat if args.wire == "chat" else _bare_responses
    try:
        return await _sessions(args, lambda index: loop(client, args, index))
    finally:
        await client.close()


# -- stowage ----------------------------------------------------------------------------------


async def _run_stowage(args: argparse.Namespace) -> int:
    from stowage import Event, RoundCommitted, Runtime, Settings
    from stowage.core._logging import configure_logging
    from stowage.load._engine import synthetic_tools

    configure_logging("console", "warning")
    calls = 0

    def count(event: Event) -> None:
        nonlocal calls
        if type(event) is RoundCommitted:
            calls += 1

    with tempfile.TemporaryDirectory(prefix="stowage-bench-") as store:
        settings = Settings(
            model="bench",
            base_url=args.base_url,
            api_key="fake-key",
            wire_api=args.wire,
            stream=args.stream,
            store=Path(store),
            durability="fsync",
            tools="none",
            system=_SYSTEM,
            compact_threshold=args.compact_threshold,
        )
        async with Runtime(settings, tools=synthetic_tools(args.tool_kb)) as rt:
            rt.subscribe(count)

            async def one(index: int) -> int:
                session_id = f"bench-{index:05d}"
                for turn in range(args.turns):
                    await rt.send(session_id, f"Task {turn} of agent {index}: fetch, report.")
                await rt.close(session_id)
                return 0

            await _sessions(args, one)
    return calls


# -- measuring ------------------------------------------------------------------------------


async def _sessions(args: argparse.Namespace, one: Any) -> int:
    total = max(args.concurrency, args.min_sessions)
    results: list[int] = []
    if args.concurrency == 1:
        for index in range(total):
            results.append(await one(index))
        return sum(results)
    queue = iter(range(total))

    async def worker() -> None:
        for index in queue:
            results.append(await one(index))

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return sum(results)


def _child(args: argparse.Namespace) -> None:
    run = _run_bare if args.child == "bare" else _run_stowage
    # imports and client setup are paid once per process, not per call: keep them out
    import openai  # noqa: F401
    import stowage.facade._runtime  # noqa: F401

    cpu, wall = time.process_time(), time.perf_counter()
    calls = asyncio.run(run(args))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(json.dumps({"calls": calls, "cpu_s": cpu, "wall_s": wall}))


def _measure(
    args: argparse.Namespace, mode: str, concurrency: int, wire: str, stream: bool
) -> dict[str, Any]:
    command = [
        sys.executable, __file__, "--child", mode, "--base-url", args.base_url,
        "--concurrency", str(concurrency), "--wire", wire, "--stream", "on" if stream else "off",
        "--turns", str(args.turns), "--tool-kb", str(args.tool_kb),
        "--min-sessions", str(args.min_sessions), "--compact-threshold", str(args.compact_threshold),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu_ms_per_call"] = result["cpu_s"] * 1000 / max(1, result["calls"])
    return result


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
                    bare = await asyncio.to_thread(
                        _measure, args, "bare", concurrency, wire, stream
                    )
                    ours = await asyncio.to_thread(
                        _measure, args, "stowage", concurrency, wire, stream
                    )
                    row = {
                        "sessions": concurrency,
                        "wire": wire,
                        "stream": stream,
                        "bare_ms": round(bare["cpu_ms_per_call"], 3),
                        "stowage_ms": round(ours["cpu_ms_per_call"], 3),
                        "ratio": round(ours["cpu_ms_per_call"] / bare["cpu_ms_per_call"], 3),
                        "bare_calls": bare["calls"],
                        "stowage_calls": ours["calls"],
                        "bare_wall_s": round(bare["wall_s"], 2),
                        "stowage_wall_s": round(ours["wall_s"], 2),
                    }
                    rows.append(row)
                    print(
                        f"{concurrency:>4} sessions {wire:<9} stream={'on ' if stream else 'off'} "
                        f"bare {row['bare_ms']:7.3f} ms/call  stowage {row['stowage_ms']:7.3f} ms/call  "
                        f"ratio {row['ratio']:.3f}",
                        flush=True,
                    )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write it as JSON with --json); exit 1 if a ratio exceeds --target."""
    parser = argparse.ArgumentParser(prog="bench_overhead.py", description=__doc__)
    parser.add_argument(
        "--child", choices=["bare", "stowage"], default=None, help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--base-url",
        default=None,
        help="an already running OpenAI-compatible server (default: start the fake one)",
    )
    parser.add_argument("--concurrency", type=int, default=None, help="only this many sessions")
    parser.add_argument("--wire", choices=["chat", "responses"], default=None)
    parser.add_argument("--stream", choices=["on", "off"], default=None)
    parser.add_argument("--turns", type=int, default=5, help="turns per session (4 calls each)")
    parser.add_argument("--min-sessions", type=int, default=50, help="sessions run at least")
    parser.add_argument("--tool-kb", type=float, default=1.0)
    parser.add_argument("--compact-threshold", type=int, default=2000)
    parser.add_argument("--target", type=float, default=0.5, help="the ratio to stay under")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args(argv)
    if args.child is not None:
        args.stream = args.stream == "on"
        _child(args)
        return 0
    args.concurrency_list = [args.concurrency] if args.concurrency else [1, 50, 200]
    args.wires = [args.wire] if args.wire else ["chat", "responses"]
    args.streams = [args.stream == "on"] if args.stream else [False, True]
    rows = asyncio.run(_with_server(args))
    worst = max(row["ratio"] for row in rows)
    print(f"worst ratio stowage / bare: {worst:.3f} (target <= {args.target})")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if worst <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
