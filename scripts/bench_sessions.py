"""Memory per live and per hibernated session, and resume time of a long log.

    python scripts/bench_sessions.py memory --sessions 2000 --turns 3
    python scripts/bench_sessions.py memory --sessions 10000 --no-trace   # resident memory only
    python scripts/bench_sessions.py memory --sessions 10000 --no-trace --at-once 100
    python scripts/bench_sessions.py sizes --sizes 25000,50000,100000 --at-once 500
    python scripts/bench_sessions.py resume --records 100000

``memory`` runs the sessions in process (scripted model, JSONL store), then measures Python
heap with tracemalloc: after the runtime started, with every session live (actors parked,
history in memory), and after hibernating them all; it prints per-session figures (the live
figure also without the history: its entries, items and strings, each object counted once),
the resident memory, the descriptors open with every session live against the process's limit,
and where the live memory goes (by source file); with ``--no-trace`` only the resident memory
and the descriptors. ``--at-once N`` runs the turns of at most N sessions at a time (all
of them at once by default): the live figure is the same, the resident one is not, as the
allocator keeps much of what the turns in flight together needed; ``--max-running N`` sends
them all at once to a runtime that runs at most N at a time. ``sizes`` grows one runtime's
live sessions to each of ``--sizes`` in turn (a turn each, ``--at-once`` at a time) and at
each size prints the resident memory per live session, the descriptors in use and the turn
throughput with all of them live (``--probe`` turns of sessions spread over them, after the
memory was read): flat is the goal. ``resume`` writes a log of
``--records`` records whose newest compaction is near the end, then times ``Runtime.resume``
(read_tail + replay + start) against a whole-log read and replay.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio


def _heap() -> int:
    """Bytes tracemalloc traces now (0 when it is off)."""
    return tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0


def _rss() -> int:
    """Resident bytes of this process (Linux: /proc/self/statm), 0 where unknown."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _descriptors() -> int:
    """Descriptors this process has open (Linux: /proc/self/fd), 0 where unknown."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _deep_size(value: Any, seen: set[int]) -> int:
    """Bytes of ``value`` and everything it holds that was not counted yet (``seen``): the
    history's entries, items, strings and containers, each object once."""
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return size
    if isinstance(value, dict):
        return size + sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return size + sum(_deep_size(v, seen) for v in value)
    fields = getattr(type(value), "__slots__", ())
    inner = [getattr(value, name) for name in fields if hasattr(value, name)]
    if hasattr(value, "__dict__"):
        inner.append(vars(value))
    return size + sum(_deep_size(v, seen) for v in inner)


def _runtime(store: str, args: argparse.Namespace, *, max_running: int = 0) -> Any:
    """The runtime sessions are measured on: a JSONL store without fsync in ``store``, the
    scripted model (two tool rounds a turn), synthetic tools of ``--tool-kb`` outputs."""
    from stowage import Runtime, Settings
    from stowage.core._logging import configure_logging
    from stowage.load._engine import synthetic_tools
    from stowage.model._scripted import ScriptedModel

    configure_logging("console", "warning")
    settings = Settings(
        store=Path(store),
        durability="none",
        tools="none",
        system="You are a careful agent.",
        compact_threshold=args.compact_threshold,
    )
    return Runtime(
        settings,
        gateway=ScriptedModel(tool_rounds=2, keep_requests=False),
        tools=synthetic_tools(args.tool_kb),
        max_running_sessions=max_running or None,
    )


async def _warm_up(rt: Any) -> None:
    """One session run and hibernated: first-use caches are not per-session memory."""
    await rt.send("warm-up", "warm up")
    await rt.hibernate("warm-up")
    gc.collect()


async def _memory(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="stowage-mem-") as store:
        ids = [f"m-{n:05d}" for n in range(args.sessions)]
        async with _runtime(store, args, max_running=args.max_running) as rt:
            await _warm_up(rt)
            rss_base = _rss()
            fds_base = _descriptors()
            trace = not args.no_trace
            if trace:
                tracemalloc.start(10)
            base = _heap()
            before = tracemalloc.take_snapshot() if trace else None

            at_once = anyio.Semaphore(args.at_once or args.sessions)

            async def drive(session_id: str) -> None:
                async with at_once:
                    for turn in range(args.turns):
                        await rt.send(session_id, f"task {turn}: fetch the blob and the log")

            async with anyio.create_task_group() as tg:
                for session_id in ids:
                    tg.start_soon(drive, session_id)
            gc.collect()
            live = _heap()
            rss_live = _rss()
            fds_live = _descriptors()
            live_snapshot = tracemalloc.take_snapshot() if trace else None
            history_chars = sum(
                len(str(entry.item)) for s in rt.sessions.values() for entry in s.state.history
            )
            seen: set[int] = set()
            history_bytes = sum(_deep_size(s.state.history, seen) for s in rt.sessions.values())
            history_items = sum(len(s.state.history) for s in rt.sessions.values())
            for session_id in ids:
                await rt.hibernate(session_id)
            gc.collect()
            hibernated = _heap()
            hibernated_snapshot = tracemalloc.take_snapshot() if trace else None
            tracemalloc.stop()

    def by_file(snapshot: Any, top: int) -> list[dict[str, Any]]:
        if snapshot is None:
            return []
        return [
            {"file": str(stat.traceback[0].filename).split("site-packages/")[-1], "kb": round(stat.size_diff / 1024 / args.sessions, 2)}
            for stat in snapshot.compare_to(before, "filename")[:top]
        ]  # fmt: skip

    heap: dict[str, Any] = {
        "live_kb_per_session": round((live - base) / 1024 / args.sessions, 2),
        "hibernated_kb_per_session": round((hibernated - base) / 1024 / args.sessions, 3),
        "live_kb_beyond_history": round((live - base - history_bytes) / 1024 / args.sessions, 2),
    }
    if not trace:  # RSS only
        heap = dict.fromkeys(heap)
    return {
        "sessions": args.sessions,
        "turns": args.turns,
        "sessions_at_once": args.at_once or args.sessions,
        "max_running_sessions": args.max_running or None,
        **heap,
        "history_items_per_session": round(history_items / args.sessions, 1),
        "history_text_kb_per_session": round(history_chars / 1024 / args.sessions, 2),
        "history_kb_per_session": round(history_bytes / 1024 / args.sessions, 2),
        # the process's resident memory (with tracemalloc on, its own bookkeeping included)
        "rss_mb_before_sessions": round(rss_base / 2**20, 1),
        "rss_mb_with_live_sessions": round(rss_live / 2**20, 1),
        "rss_kb_per_live_session": round((rss_live - rss_base) / 1024 / args.sessions, 1),
        # open descriptors: a live session must not hold one of its own (issue 46)
        "descriptors_before_sessions": fds_base,
        "descriptors_with_live_sessions": fds_live,
        "descriptor_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "live_kb_per_session_by_file": by_file(live_snapshot, 12),
        "hibernated_kb_per_session_by_file": by_file(hibernated_snapshot, 8),
    }


async def _sizes(args: argparse.Namespace) -> dict[str, Any]:
    sizes = sorted({int(size) for size in args.sizes.split(",")})
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stowage-sizes-") as store:
        async with _runtime(store, args) as rt:
            await _warm_up(rt)
            rss_base = _rss()
            at_once = anyio.Semaphore(args.at_once)

            async def turns(ids: list[str], turn: int) -> float:
                async def drive(session_id: str) -> None:
                    async with at_once:
                        await rt.send(session_id, f"task {turn}: fetch the blob and the log")

                started = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for session_id in ids:
                        tg.start_soon(drive, session_id)
                return time.perf_counter() - started

            live = 0
            for size in sizes:
                grown = await turns([f"s-{n:06d}" for n in range(live, size)], 0)
                grown_turns, live = size - live, size
                gc.collect()
                rss, fds = _rss(), _descriptors()
                # the probe: turns of sessions spread over all those live, each already parked
                step = max(1, size // args.probe)
                probe = [f"s-{n:06d}" for n in range(0, size, step)][: args.probe]
                probed = await turns(probe, 1)
                row = {
                    "live_sessions": len(rt.sessions),
                    "hibernated": len(rt.hibernated - {"warm-up"}),
                    "rss_mb": round(rss / 2**20, 1),
                    "rss_kb_per_live_session": round((rss - rss_base) / 1024 / size, 1),
                    "descriptors_in_use": fds,
                    "descriptor_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                    "turns_per_second_growing": round(grown_turns / grown, 1),
                    "turns_per_second_all_live": round(len(probe) / probed, 1),
                }
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)  # progress, size by size
    return {
        "sizes": sizes,
        "turns_per_session": 1,
        "sessions_at_once": args.at_once,
        "probe_turns": args.probe,
        "rss_mb_before_sessions": round(rss_base / 2**20, 1),
        "by_size": rows,
    }


async def _write_log(store: Any, session_id: str, records: int, output_chars: int) -> int:
    from stowage import FunctionCall, FunctionCallOutput, SystemMessage, UserMessage
    from stowage.core._items import HistoryEntry
    from stowage.core._records import (
        CompactionRecord,
        ItemRecord,
        RoundCommittedRecord,
        SessionRecord,
    )

    batch: list[Any] = [
        SessionRecord(seq=1, model="m", tools=("fetch",)),
        ItemRecord(seq=2, item=SystemMessage(text="You are a careful agent.")),
    ]
    await store.create(session_id, batch)
    batch = []
    seq, round_ = 2, 0
    compact_at = records - 200  # the newest compaction: near the end, as in a long session
    last_user: HistoryEntry | None = None
    payload = "x" * output_chars
    while seq < records - 4:
        if seq + 1 >= compact_at and last_user is not None and compact_at > 0:
            seq += 1
            batch.append(
                CompactionRecord(
                    seq=seq,
                    summary="Summary of everything so far.",
                    covers_through=seq - 1,
                    retained=(
                        HistoryEntry(seq=2, item=SystemMessage(text="You are a careful agent.")),
                        last_user,
                    ),
                    reason="bench",
                    tokens_before=9000,
                    tokens_after=100,
                    removed=seq - 4,
                    round=round_,
                )
            )
            compact_at = 0
            continue
        round_ += 1
        user = UserMessage(text=f"step {round_}")
        last_user = HistoryEntry(seq=seq + 1, item=user)
        call = FunctionCall(call_id=f"c{round_}", name="fetch", arguments="{}")
        batch += [
            ItemRecord(seq=seq + 1, item=user),
            ItemRecord(seq=seq + 2, item=call, round=round_),
            ItemRecord(seq=seq + 3, item=FunctionCallOutput(call_id=f"c{round_}", output=payload), round=round_),
            RoundCommittedRecord(seq=seq + 4, round=round_, usage=None, first_seq=seq + 2, last_seq=seq + 4),
        ]  # fmt: skip
        seq += 4
        if len(batch) >= 2000:
            await store.append(session_id, batch)
            batch = []
    if batch:
        await store.append(session_id, batch)
    return seq


async def _resume(args: argparse.Namespace) -> dict[str, Any]:
    from stowage import Runtime, Settings, replay
    from stowage.core._logging import configure_logging
    from stowage.model._scripted import ScriptedModel
    from stowage.storage import JsonlStore

    configure_logging("console", "warning")
    with tempfile.TemporaryDirectory(prefix="stowage-resume-") as root:
        store = JsonlStore(root, durability="none")
        written = await _write_log(store, "long", args.records, args.output_chars)
        await store.aclose()
        size = (Path(root) / "long.jsonl").stat().st_size
        timings: list[float] = []
        for _ in range(args.repeat):
            settings = Settings(store=Path(root), tools="none")
            async with Runtime(settings, gateway=ScriptedModel()) as rt:
                started = time.perf_counter()
                session = await rt.resume("long")
                timings.append(time.perf_counter() - started)
                items = len(session.history)
        store = JsonlStore(root, durability="none")
        started = time.perf_counter()
        full = await store.read("long")
        whole = replay("long", full.records)
        whole_seconds = time.perf_counter() - started
        await store.aclose()
    return {
        "records": written,
        "log_mb": round(size / 2**20, 1),
        "resume_seconds_best": round(min(timings), 4),
        "resume_seconds_median": round(sorted(timings)[len(timings) // 2], 4),
        "history_items_after_resume": items,
        "whole_log_read_and_replay_seconds": round(whole_seconds, 3),
        "whole_log_history_items": len(whole.history),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the figures as JSON (and write them with --json)."""
    parser = argparse.ArgumentParser(prog="bench_sessions.py", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    memory = sub.add_parser("memory")
    memory.add_argument("--sessions", type=int, default=2000)
    memory.add_argument("--turns", type=int, default=3)
    memory.add_argument("--tool-kb", type=float, default=2.0)
    memory.add_argument("--compact-threshold", type=int, default=3000)
    memory.add_argument(
        "--no-trace",
        action="store_true",
        help="resident memory only, without tracemalloc (which slows thousands of sessions "
        "many times over and adds its own bookkeeping to the RSS)",
    )
    memory.add_argument(
        "--at-once",
        type=int,
        default=0,
        metavar="N",
        help="run the turns of at most N sessions at a time (default: all at once)",
    )
    memory.add_argument(
        "--max-running",
        type=int,
        default=0,
        metavar="N",
        help="the runtime's max_running_sessions (default: no bound)",
    )
    sizes = sub.add_parser("sizes")
    sizes.add_argument(
        "--sizes", default="25000,50000,100000", help="live sessions to grow to, in turn"
    )
    sizes.add_argument("--at-once", type=int, default=500, metavar="N")
    sizes.add_argument(
        "--probe",
        type=int,
        default=1000,
        metavar="N",
        help="turns timed at each size with every session live",
    )
    sizes.add_argument("--tool-kb", type=float, default=2.0)
    sizes.add_argument("--compact-threshold", type=int, default=3000)
    resume = sub.add_parser("resume")
    resume.add_argument("--records", type=int, default=100_000)
    resume.add_argument("--output-chars", type=int, default=200)
    resume.add_argument("--repeat", type=int, default=5)
    for p in (memory, sizes, resume):
        p.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    run = {"memory": _memory, "sizes": _sizes, "resume": _resume}[args.what]
    report = anyio.run(run, args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
