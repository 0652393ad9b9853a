"""Workers sharing one PostgreSQL store: throughput by worker count, CPU per round against
``stowage load``, takeover time, statements per round.

    python scripts/bench_workers.py --sessions 64 --messages 3 --workers 1,2,4 --json bench.json

``throughput``: for each worker count, a fresh schema and that many ``stowage worker``
processes against the fake OpenAI server (a process of its own). The workers start and settle
(connected, nothing to do), are paused (SIGSTOP) while sessions x messages are queued
(``send --create``), then go on: messages/s and rounds/s from the first claim to the last
answer (their own log times), and their CPU per round from where it stood idle. The workers run
``stowage load``'s tools (two that return 2 KB) and its context window, so that:

``in_process``: ``stowage load`` with the same sessions x turns, the same fake server, tools,
window and logging, in one process with no database: the CPU per round the one-worker figure
is held against (the goal: at most 1.3 times it).

``takeover``: a worker whose model is slow is SIGKILLed mid-turn while a second one waits; the
seconds from the kill to the answer (goal: under the lease TTL + 2 s), over ``--takeovers`` runs.

``round trips``: a worker in this process (the scripted model, no HTTP) answers sessions x
messages, with every statement its asyncpg connections send counted by a wrapper on the
connection's ``execute``/``fetch*`` (``pg_stat_statements`` is not loaded on most servers, and
it would count other clients too): statements and transactions per round (goal: at most 1.5
statements), and round trips per append.

Needs PostgreSQL (``--dsn``, default the tests' ``postgresql://postgres@127.0.0.1:5432/test``);
every schema it makes is dropped afterwards.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

DEFAULT_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _stowage() -> list[str]:
    from stowage.cli._main import build_parser

    wired = "worker" in build_parser().format_help()
    return [sys.executable, "-m", "stowage.cli" if wired else "stowage.cli._worker"]


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


_FAKE_PIDS: dict[str, int] = {}  # url -> pid of the fake server serving it


@contextmanager
def _fake_server(latency: float) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage.testing.fake_server", "--port", "0",
         "--latency", str(latency), "--forget-requests"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("listening "):
            raise SystemExit(f"the fake server did not start: {line!r}")
        url = line.removeprefix("listening ")
        _FAKE_PIDS[url] = proc.pid
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _sql(dsn: str, query: str, *args: Any) -> list[Any]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def _answered(dsn: str, schema: str) -> int:
    rows = await _sql(
        dsn, f"SELECT count(*) AS n FROM \"{schema}\".stowage_messages WHERE status = 'answered'"
    )
    return int(rows[0]["n"])


async def _logged(dsn: str, schema: str) -> int:
    rows = await _sql(dsn, f'SELECT count(*) AS n FROM "{schema}".stowage_messages')
    return int(rows[0]["n"])


async def _rounds(dsn: str, schema: str) -> int:
    rows = await _sql(
        dsn,
        f'SELECT count(*) AS n FROM "{schema}".stowage_records '
        'WHERE body LIKE \'%"type":"round_committed"%\'',
    )
    return int(rows[0]["n"])


async def _until(check: Any, every: float = 0.05) -> None:
    """Ask ``check`` (a coroutine function) until it is true: what it looks at (a database row,
    a log file) only other processes change, so there is nothing here to wait on."""
    for _ in range(int(3600 / every)):
        if await check():
            return
        await anyio.sleep(every)
    raise TimeoutError(f"{check} never held")


async def _drop(dsn: str, schema: str) -> None:
    await _sql(dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# the tools the workers run: two without arguments returning 2 KB each, as ``stowage load``'s
# own, so that the worker's CPU per round and load's differ by the worker, not by the tools
_BENCH_TOOLS = """
import pydantic
from stowage.tools import FunctionTool, ToolRegistry


class NoArguments(pydantic.BaseModel):
    pass


def registry() -> ToolRegistry:
    filler = ("lorem ipsum dolor sit amet " * 80)[:2048]
    served = 0

    def make(name: str) -> FunctionTool[NoArguments]:
        async def fetch(args: NoArguments) -> str:
            nonlocal served
            served += 1
            head = f"{name} #{served}: "
            return head + filler[len(head):]

        return FunctionTool(
            name=name, description=f"Fetch the next {name}.", args_model=NoArguments, fn=fetch
        )

    return ToolRegistry([make("fetch_blob"), make("fetch_log")])
"""


class _Workers:
    def __init__(self, args: argparse.Namespace, schema: str, url: str, logs: Path) -> None:
        self.args, self.schema, self.url, self.logs = args, schema, url, logs
        self.workspace = logs / "workspace"  # what the read-only workspace tools see
        self.workspace.mkdir(exist_ok=True)
        for name in ("alpha.txt", "beta.txt", "README.md"):
            (self.workspace / name).write_text(f"{name} holds " + "data " * 200)
        (self.workspace / "bench_tools.py").write_text(_BENCH_TOOLS)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"{self.schema}-{len(self.procs)}.log"
        command = [
            *_stowage(), "worker", "--store", self.args.dsn, "--schema", self.schema,
            "--model", "fake-model", "--base-url", self.url, "--api-key", "sk-bench",
            "--log-format", "json", "--log-level", "info",
            "--lease-ttl", str(self.args.lease_ttl), "--poll-interval", "1",
            "--concurrency", str(self.args.concurrency),
            "--context-window", str(self.args.context_window),
            "--tools-from", "bench_tools:registry", *extra,
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, cwd=self.workspace, stdout=subprocess.DEVNULL, stderr=out
            )
        self.procs.append(proc)
        return proc

    async def started(self) -> None:
        for n, _ in enumerate(self.procs):
            log = self.logs / f"{self.schema}-{n}.log"

            async def up(log: Path = log) -> bool:
                return "worker_started" in await anyio.Path(log).read_text()

            await _until(up)

    async def idle(self) -> list[float]:
        """Once every worker started and its CPU time stands still (it connected, made its
        tables, claimed nothing): their CPU seconds so far, start-up included."""
        await self.started()
        before = [_cpu_seconds(proc.pid) for proc in self.procs]
        while True:
            await anyio.sleep(0.25)
            now = [_cpu_seconds(proc.pid) for proc in self.procs]
            if all(b - a < 0.005 for a, b in zip(before, now, strict=True)):
                return now
            before = now

    def pause(self, signum: signal.Signals) -> None:
        for proc in self.procs:
            proc.send_signal(signum)

    def stop(self) -> list[int]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        return [proc.wait(timeout=60) for proc in self.procs]


def _event_times(logs: Path, schema: str, event: str) -> list[float]:
    """Wall-clock times (epoch seconds) of one event in the JSON logs of a schema's workers."""
    times = []
    for path in logs.glob(f"{schema}-*.log"):
        for line in path.read_text().splitlines():
            if line.startswith("{") and f'"event": "{event}"' in line:
                stamp = json.loads(line)["timestamp"].replace("Z", "+00:00")
                times.append(datetime.fromisoformat(stamp).timestamp())
    return times


def _claimers(logs: Path, schema: str) -> int:
    """How many of the schema's workers claimed a session."""
    return sum("session_claimed" in p.read_text() for p in logs.glob(f"{schema}-*.log"))


async def _throughput(
    args: argparse.Namespace, workers: int, url: str, logs: Path
) -> dict[str, Any]:
    """Start the workers and let them settle, stop them (SIGSTOP), queue everything, let them
    go (SIGCONT): the rate is measured from the first claim to the last answer (the workers'
    own log times), and their CPU from where it stood idle, so neither queueing nor process
    start-up counts (a start-up measured in another process varied by half a ms a round)."""
    from stowage.worker import Client

    schema = f"bench_{secrets.token_hex(4)}"
    total = args.sessions * args.messages
    try:
        procs = _Workers(args, schema, url, logs)
        for _ in range(workers):
            procs.start()
        idle_cpu = await procs.idle()
        procs.pause(signal.SIGSTOP)
        try:
            async with Client(args.dsn, schema=schema) as client:
                for m in range(args.messages):
                    for s in range(args.sessions):
                        await client.send(f"s{s:04}", f"message {m}", create=True)
            server_cpu = _cpu_seconds(_FAKE_PIDS[url])
        finally:
            procs.pause(signal.SIGCONT)

        async def done() -> bool:
            return await _answered(args.dsn, schema) >= total

        await _until(done)
        worker_cpu = sum(_cpu_seconds(proc.pid) for proc in procs.procs) - sum(idle_cpu)
        server_cpu = _cpu_seconds(_FAKE_PIDS[url]) - server_cpu
        rounds = await _rounds(args.dsn, schema)
        codes = procs.stop()
        first = min(_event_times(logs, schema, "session_claimed"))
        last = max(_event_times(logs, schema, "message_answered"))
        seconds = last - first
        claimers = _claimers(logs, schema)
    finally:
        await _drop(args.dsn, schema)
    return {
        "workers": workers,
        "startup_cpu_s": round(sum(idle_cpu) / workers, 2),
        "workers_that_claimed": claimers,
        "messages": total,
        "rounds": rounds,
        "seconds": round(seconds, 2),
        "messages_per_s": round(total / seconds, 1),
        "rounds_per_s": round(rounds / seconds, 1),
        "worker_cpu_ms_per_round": round(1000 * worker_cpu / rounds, 2),
        "fake_server_cpu_ms_per_round": round(1000 * server_cpu / rounds, 2),
        "exit_codes": codes,
    }


def _load_cpu(args: argparse.Namespace, url: str, logs: Path) -> dict[str, Any]:
    """``stowage load`` with the same sessions x turns against the same fake server, the same
    context window and the same logging (JSON at info, as the workers log): the runtime's CPU
    per round in one process, with no database (its JSONL store, fsync), which is what the
    worker's CPU per round is held against."""
    out = logs / "load.json"
    command = [
        *_stowage(), "load", "--sessions", str(args.sessions), "--turns", str(args.messages),
        "--base-url", url, "--context-window", str(args.context_window),
        "--log-format", "json", "--log-level", "info", "--no-progress", "--json", str(out),
    ]  # fmt: skip
    with (logs / "load.log").open("wb") as log:
        done = subprocess.run(
            command, cwd=logs, stdout=subprocess.DEVNULL, stderr=log, check=False, timeout=900
        )
    if not out.exists():
        tail = (logs / "load.log").read_text()[-2000:]
        raise SystemExit(f"stowage load wrote no report (exit {done.returncode}): {tail}")
    report = json.loads(out.read_text())
    return {
        "rounds": report["rounds"],
        "cpu_ms_per_round": report["cpu_ms_per_round"],
        "rounds_per_s": report["throughput_rounds_per_s"],
    }


async def _takeover(args: argparse.Namespace, slow: str, fast: str, logs: Path) -> float:
    from stowage.worker import Client

    schema = f"bench_{secrets.token_hex(4)}"
    try:
        doomed = _Workers(args, schema, slow, logs)
        rescuer = _Workers(args, schema, fast, logs)
        async with Client(args.dsn, schema=schema) as client:
            sent = await client.send("s1", "take over me", create=True)
            victim = doomed.start("--idle-timeout", "0")

            async def in_flight() -> bool:
                return await _logged(args.dsn, schema) >= 1

            await _until(in_flight)  # the victim logged the input; its model call is slow
            rescuer.start("--idle-timeout", "0", "--poll-interval", "0.25")
            await rescuer.started()  # it claims nothing: the victim's lease is live
            victim.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            await client.answer("s1", sent.message_id)
            seconds = time.perf_counter() - killed
        victim.wait()
        rescuer.stop()
    finally:
        await _drop(args.dsn, schema)
    return seconds


_IN_APPEND = contextvars.ContextVar("in_append", default=False)


class _Counted:
    """Every statement the asyncpg connections of this process send, by kind, and those sent
    from inside ``append_batches`` (its task is marked with a context variable)."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        self.in_appends = 0

    def kind(self, query: str) -> str:
        q = " ".join(query.split()).upper()
        for prefix, name in (
            ("BEGIN", "begin"), ("COMMIT", "commit"), ("ROLLBACK", "rollback"),
            ("SELECT SESSION_ID, LAST_SEQ", "append: lock sessions"),
            ("INSERT INTO", "insert"), ("UPDATE", "update"), ("WITH FREE", "claim"),
            ("WITH DONE", "append: answered"), ("SELECT M.SESSION_ID", "append: known ids"),
            ("SELECT S.INBOX", "peek inbox"), ("SELECT PG_NOTIFY", "notify"),
        ):  # fmt: skip
            if q.startswith(prefix):
                if name in ("insert", "update"):
                    table = next((t for t in ("RECORDS", "SESSIONS", "MESSAGES") if t in q), "")
                    return f"{name} {table.lower()}".strip()
                return name
        return "other: " + q[:40].lower()

    def install(self) -> None:
        from asyncpg.connection import Connection

        counted = self
        for method in ("execute", "fetch", "fetchrow", "fetchval"):
            original = getattr(Connection, method)

            def wrapper(
                self: Any, query: str, *a: Any, __original: Any = original, **k: Any
            ) -> Any:
                counted.statements[counted.kind(query)] += 1
                if _IN_APPEND.get():
                    counted.in_appends += 1
                return __original(self, query, *a, **k)

            setattr(Connection, method, wrapper)


async def _round_trips(args: argparse.Namespace) -> dict[str, Any]:
    from stowage import RoundCommitted, Settings, TurnFinished
    from stowage.core import Event, configure_logging
    from stowage.storage import PostgresStore
    from stowage.testing import ScriptedModel
    from stowage.worker import Client, Worker, WorkerOptions

    configure_logging("console", "warning")
    counted = _Counted()
    counted.install()
    appends: Counter[str] = Counter()
    original = PostgresStore.append_batches

    async def append_batches(self: PostgresStore, batches: Any) -> Any:
        appends["transactions"] += 1
        appends["batches"] += len(batches)
        marked = _IN_APPEND.set(True)
        try:
            return await original(self, batches)
        finally:
            _IN_APPEND.reset(marked)

    PostgresStore.append_batches = append_batches  # type: ignore[method-assign]
    schema = f"bench_{secrets.token_hex(4)}"
    total = args.sessions * args.messages
    rounds = turns = 0
    all_answered = anyio.Event()

    def on_event(event: Event) -> None:  # no polling: its queries would count as the worker's
        nonlocal rounds, turns
        if isinstance(event, RoundCommitted):
            rounds += 1
        elif isinstance(event, TurnFinished):
            turns += 1
            if turns == total:
                all_answered.set()

    try:
        store = PostgresStore(args.dsn, schema=schema, lease_ttl=args.lease_ttl)
        workspace = Path(tempfile.mkdtemp(prefix="stowage-bench-ws-"))
        for name in ("alpha.txt", "beta.txt", "README.md"):
            (workspace / name).write_text(f"{name} holds " + "data " * 200)
        worker = Worker(
            store,
            Settings(workspace=workspace),
            gateway=ScriptedModel(tool_rounds=2),
            options=WorkerOptions(concurrency=args.concurrency, poll_interval=1),
            idle_timeout=0.2,
        )
        worker.runtime.subscribe(on_event)
        async with Client(args.dsn, schema=schema) as client:
            for m in range(args.messages):
                for s in range(args.sessions):
                    await client.send(f"s{s:04}", f"message {m}", create=True)
            counted.statements.clear()  # from here on: the worker's own
            counted.in_appends = 0
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                await all_answered.wait()
                mine = Counter(counted.statements)
                in_appends = counted.in_appends
                worker.drain()
    finally:
        PostgresStore.append_batches = original  # type: ignore[method-assign]
        await _drop(args.dsn, schema)
    statements = sum(mine.values())
    transactions = mine["begin"]
    return {
        "messages": total,
        "rounds": rounds,
        "statements_per_round": round(statements / rounds, 2),
        "transactions_per_round": round(transactions / rounds, 2),
        "append_transactions": appends["transactions"],
        "batches_appended": appends["batches"],
        "batches_per_append_transaction": round(appends["batches"] / appends["transactions"], 2),
        "append_transactions_per_round": round(appends["transactions"] / rounds, 2),
        "round_trips_per_append_transaction": round(in_appends / appends["transactions"], 2),
        "statements": dict(sorted(mine.items(), key=lambda kv: -kv[1])),
    }


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k not in ("dsn", "json")},
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="stowage-bench-") as tmp:
        logs = Path(tmp)
        with _fake_server(args.latency) as url:
            report["throughput"] = [
                await _throughput(args, int(n), url, logs) for n in args.workers.split(",")
            ]
            report["in_process"] = _load_cpu(args, url, logs)
        with _fake_server(5.0) as slow, _fake_server(0.0) as fast:
            times = [await _takeover(args, slow, fast, logs) for _ in range(args.takeovers)]
        report["takeover"] = {
            "lease_ttl": args.lease_ttl,
            "seconds": [round(t, 2) for t in times],
            "max_seconds": round(max(times), 2),
            "goal_seconds": args.lease_ttl + 2,
        }
    report["round_trips"] = await _round_trips(args)
    return report


def _print(report: dict[str, Any]) -> None:
    print(f"{report['cpus']} CPUs, load average {report['load_average'][0]:.1f} at start")
    print(
        f"{'workers':>8} {'claimed':>8} {'messages':>9} {'seconds':>8} {'msg/s':>8} "
        f"{'rounds/s':>9} {'worker CPU ms/round':>20} {'server CPU ms/round':>20}"
    )
    for row in report["throughput"]:
        print(
            f"{row['workers']:>8} {row['workers_that_claimed']:>8} {row['messages']:>9} "
            f"{row['seconds']:>8} "
            f"{row['messages_per_s']:>8} {row['rounds_per_s']:>9} "
            f"{row['worker_cpu_ms_per_round']:>20} {row['fake_server_cpu_ms_per_round']:>20}"
        )
    one = next((row for row in report["throughput"] if row["workers"] == 1), None)
    load = report["in_process"]
    if one is not None:
        ratio = one["worker_cpu_ms_per_round"] / load["cpu_ms_per_round"]
        print(
            f"\nCPU per round, same sessions x turns, same fake server: one worker "
            f"{one['worker_cpu_ms_per_round']} ms (PostgreSQL) vs stowage load "
            f"{load['cpu_ms_per_round']} ms (in process, JSONL): {ratio:.2f}x"
        )
    take = report["takeover"]
    print(
        f"\ntakeover after SIGKILL (lease TTL {take['lease_ttl']} s, goal < {take['goal_seconds']} s): "
        f"{', '.join(f'{s:.2f}' for s in take['seconds'])} s"
    )
    trips = report["round_trips"]
    print(
        f"\nPostgreSQL, one worker, {trips['rounds']} rounds: {trips['statements_per_round']} "
        f"statements and {trips['transactions_per_round']} transactions per round; "
        f"{trips['append_transactions_per_round']} append transactions per round, "
        f"{trips['batches_per_append_transaction']} batches per append transaction, "
        f"{trips['round_trips_per_append_transaction']} round trips per append transaction"
    )
    for kind, count in trips["statements"].items():
        print(f"  {count:>7}  {kind}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--messages", type=int, default=3, help="messages per session")
    parser.add_argument("--workers", default="1,2,4", help="worker counts to compare")
    parser.add_argument("--concurrency", type=int, default=16, help="sessions per worker")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per model request")
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    parser.add_argument(
        "--context-window",
        type=int,
        default=5000,
        help="the model window of the workers and of stowage load (load's default: both "
        "compact alike, and neither asks the server)",
    )
    parser.add_argument("--takeovers", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = anyio.run(_main, args)
    _print(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
