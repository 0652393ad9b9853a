"""Workers on a store seeded with many idle sessions (``scripts/seed_store.py``): whether
claims, appends and CPU per round stay flat as the store grows.

    python scripts/seed_store.py --sessions 10000 --schema scale_10k
    python scripts/bench_scale.py --schema scale_10k --busy 10000 --workers 1,2,4

For each worker count, that many ``stowage worker`` processes against the fake OpenAI server
(a process of its own) and the seeded schema:

``burst``: the workers start and settle, are paused (SIGSTOP) while ``--busy`` seeded sessions
each get a message queued (one UPDATE, one NOTIFY: a burst of arrivals), then go on. Messages/s
and rounds/s from the first claim to the last answer (the workers' own log times), rounds/s per
worker, their CPU per round from where it stood idle, and the time each claim statement took
(``claim_ms`` of ``session_claimed``), p50 and p99 over the sessions claimed.

``paced``: once every lease of the burst is given back, ``--paced`` other sessions get one
message each through ``Client.send``, at half the burst's rate (at most ``--paced-rate``): the
claim latency, from just before the send to the worker's ``session_claimed``, p50 and p99.

``statements``: a worker in this process (the scripted model, no HTTP) answers ``--counted``
messages queued to seeded sessions, with every statement its asyncpg connections send counted
(``bench_workers``' wrapper): statements per round, by kind.

Then the tables' and indexes' sizes. ``--json`` writes everything; the seeded schema is kept
(each run adds a turn to the sessions it used).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_workers as bw  # a sibling script, as is seed_store
from seed_store import index_sizes, session_id, sizes

DEFAULT_DSN = os.environ.get(
    "STOWAGE_SCALE_PG", "postgresql://postgres@127.0.0.1:5432/stowage_scale"
)


class _Fleet(bw._Workers):
    """``bench_workers``' worker processes with the workspace tools the seeded logs used."""

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"{self.schema}-{len(self.procs)}.log"
        command = [
            *bw._stowage(), "worker", "--store", self.args.dsn, "--schema", self.schema,
            "--model", "fake-model", "--base-url", self.url, "--api-key", "sk-bench",
            "--log-format", "json", "--log-level", "info",
            "--lease-ttl", "30", "--poll-interval", "1", "--idle-timeout", "1",
            "--concurrency", str(self.args.concurrency), *extra,
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, cwd=self.workspace, stdout=subprocess.DEVNULL, stderr=out
            )
        self.procs.append(proc)
        return proc


def _events(logs: Path, schema: str, event: str) -> list[tuple[int, float, dict[str, Any]]]:
    """(worker index, epoch seconds, line) of each ``event`` in the workers' JSON logs."""
    found = []
    for path in sorted(logs.glob(f"{schema}-*.log")):
        index = int(path.stem.rsplit("-", 1)[1])
        for line in path.read_text().splitlines():
            if line.startswith("{") and f'"event": "{event}"' in line:
                body = json.loads(line)
                stamp = body["timestamp"].replace("Z", "+00:00")
                found.append((index, datetime.fromisoformat(stamp).timestamp(), body))
    return found


def _postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL server process (the whole cluster: other clients'
    work counts too, so it is an upper bound of the workers' share)."""
    import psutil

    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in ("postgres", "postmaster"):
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
    return total


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _queued(conn: Any, schema: str) -> int:
    return int(
        await conn.fetchval(
            f"SELECT count(*) FROM \"{schema}\".stowage_sessions WHERE inbox <> '[]'::jsonb"
        )
    )


async def _leases_held(conn: Any, schema: str) -> int:
    return int(
        await conn.fetchval(
            f'SELECT count(*) FROM "{schema}".stowage_sessions '
            "WHERE lease_owner IS NOT NULL AND lease_expires > now()"
        )
    )


async def _wait(check: Any, every: float = 0.5) -> None:
    for _ in range(int(3600 / every)):
        if await check():
            return
        await anyio.sleep(every)
    raise TimeoutError(f"{check} never held")


async def _burst(conn: Any, args: argparse.Namespace, first: int, tag: str) -> None:
    """Queue one message for each of ``--busy`` sessions from ``first``, in one statement."""
    from stowage.storage._pg_inbox import channel_name

    ids = [session_id((first + n) % args.stored) for n in range(args.busy)]
    await conn.execute(
        f'UPDATE "{args.schema}".stowage_sessions AS s SET inbox = s.inbox || '
        "jsonb_build_array(jsonb_build_object('message_id', $2 || s.session_id, "
        "'text', 'what changed since?', 'pinned', false, 'sent', now())) "
        "WHERE s.session_id = ANY($1::text[])",
        ids,
        tag,
    )
    await conn.execute("SELECT pg_notify($1, 'burst')", channel_name(args.schema, "inbox"))


def _clear_logs(logs: Path, schema: str) -> None:
    for old in logs.glob(f"{schema}-*.log"):
        old.unlink()


async def _run(args: argparse.Namespace, workers: int, url: str, logs: Path) -> dict[str, Any]:
    import asyncpg
    from stowage.worker import Client

    schema = args.schema
    conn = await asyncpg.connect(args.dsn)
    _clear_logs(logs, schema)
    fleet = _Fleet(args, schema, url, logs)
    try:
        for _ in range(workers):
            fleet.start()
        idle_cpu = await fleet.idle()

        async def drained() -> bool:
            return await _queued(conn, schema) == 0

        burst: dict[str, Any] = {}
        claimed: list[tuple[int, float, dict[str, Any]]] = []
        if args.busy:
            fleet.pause(signal.SIGSTOP)
            try:
                await _burst(conn, args, 0, f"burst{workers}-{time.time_ns()}-")
                server_cpu = bw._cpu_seconds(bw._FAKE_PIDS[url])
                pg_cpu = _postgres_cpu()
                wal = await conn.fetchval("SELECT pg_current_wal_lsn()")
            finally:
                fleet.pause(signal.SIGCONT)

            await _wait(drained)
            worker_cpu = sum(bw._cpu_seconds(p.pid) for p in fleet.procs) - sum(idle_cpu)
            server_cpu = bw._cpu_seconds(bw._FAKE_PIDS[url]) - server_cpu
            pg_cpu = _postgres_cpu() - pg_cpu
            wal_bytes = await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)", wal)
            claimed = _events(logs, schema, "session_claimed")
            answered = _events(logs, schema, "message_answered")
            dropped = _events(logs, schema, "message_dropped")
            first, last = min(t for _, t, _ in claimed), max(t for _, t, _ in answered)
            seconds = last - first
            rounds = sum(int(body.get("rounds") or 0) for _, _, body in answered)
            per_worker = Counter[int]()
            for index, _, body in answered:
                per_worker[index] += int(body.get("rounds") or 0)
            claim_ms = [float(body["claim_ms"]) for _, _, body in claimed if "claim_ms" in body]
            burst = {
                "messages": len(answered),
                "dropped": len(dropped),
                "rounds": rounds,
                "seconds": round(seconds, 2),
                "messages_per_s": round(len(answered) / seconds, 1),
                "rounds_per_s": round(rounds / seconds, 1),
                "rounds_per_s_per_worker": [
                    round(per_worker[i] / seconds, 1) for i in range(workers)
                ],
                "worker_cpu_ms_per_round": round(1000 * worker_cpu / rounds, 3),
                "fake_server_cpu_ms_per_round": round(1000 * server_cpu / rounds, 3),
                # the whole cluster's, other clients included: upper bounds
                "postgres_cpu_ms_per_round": round(1000 * pg_cpu / rounds, 3),
                "wal_bytes_per_round": round(float(wal_bytes) / rounds),
                "claim_statement_ms_p50": round(_pct(claim_ms, 0.5), 2),
                "claim_statement_ms_p99": round(_pct(claim_ms, 0.99), 2),
            }

        async def released() -> bool:
            return await _leases_held(conn, schema) == 0

        await _wait(released)
        # paced arrivals, below what the fleet can do: the claim latency a sender sees
        rate = min(args.paced_rate, burst.get("messages_per_s", 2 * args.paced_rate) / 2)
        sent: dict[str, float] = {}
        async with Client(args.dsn, schema=schema) as client:
            began = time.time()
            for n in range(args.paced):
                due = began + n / rate
                await anyio.sleep(max(0.0, due - time.time()))
                sid = session_id((args.paced_from + n) % args.stored)
                sent[sid] = time.time()
                await client.send(sid, "and now?")
        await _wait(drained)
        latencies, statement_ms = [], []
        paced_from = min(sent.values(), default=0.0)
        for _, at, body in sorted(_events(logs, schema, "session_claimed"), key=lambda e: e[1]):
            if at >= paced_from and body["session"] in sent:
                latencies.append(1000 * (at - sent.pop(body["session"])))
                statement_ms.append(float(body.get("claim_ms", "nan")))
        paced = {
            "messages": args.paced,
            "rate_per_s": round(rate, 1),
            "claimed": len(latencies),
            "claim_latency_ms_p50": round(_pct(latencies, 0.5), 2),
            "claim_latency_ms_p99": round(_pct(latencies, 0.99), 2),
            "claim_latency_ms_mean": round(statistics.fmean(latencies), 2) if latencies else None,
            "claim_statement_ms_p50": round(_pct(statement_ms, 0.5), 2),
            "claim_statement_ms_p99": round(_pct(statement_ms, 0.99), 2),
        }
        codes = fleet.stop()
    finally:
        for proc in fleet.procs:
            if proc.poll() is None:
                proc.kill()
        await conn.close()
    return {"workers": workers, "burst": burst, "paced": paced, "exit_codes": codes}


async def _statements(args: argparse.Namespace) -> dict[str, Any]:
    """``bench_workers``' statement count, on seeded sessions of the schema."""
    import asyncpg
    from stowage import RoundCommitted, Settings, TurnFinished
    from stowage.core import Event, configure_logging
    from stowage.storage import PostgresStore
    from stowage.testing import ScriptedModel
    from stowage.worker import Worker, WorkerOptions

    configure_logging("console", "warning")
    counted = bw._Counted()
    counted.install()
    rounds = turns = 0
    done = anyio.Event()

    def on_event(event: Event) -> None:
        nonlocal rounds, turns
        if isinstance(event, RoundCommitted):
            rounds += 1
        elif isinstance(event, TurnFinished):
            turns += 1
            if turns == args.counted:
                done.set()

    holder = tempfile.TemporaryDirectory(prefix="stowage-scale-ws-")
    workspace = Path(holder.name)  # removed with ``holder`` when the count is done
    for name in ("alpha.txt", "beta.txt", "README.md"):
        (workspace / name).write_text(f"{name} holds " + "data " * 120)
    store = PostgresStore(args.dsn, schema=args.schema, lease_ttl=30)
    worker = Worker(
        store,
        Settings(workspace=workspace),
        gateway=ScriptedModel(tool_rounds=2, keep_requests=False),
        options=WorkerOptions(concurrency=args.concurrency, poll_interval=1),
        idle_timeout=0.2,
    )
    worker.runtime.subscribe(on_event)
    conn = await asyncpg.connect(args.dsn)
    try:
        counting = argparse.Namespace(**{**vars(args), "busy": args.counted})
        await _burst(conn, counting, args.busy + args.paced, f"count-{time.time_ns()}-")
    finally:
        await conn.close()
    await store.connect()  # its pool and DDL before the count: a worker does that once
    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        counted.statements.clear()
        await tg.start(worker.run)
        await done.wait()
        mine = Counter(counted.statements)
        seconds = time.perf_counter() - began
        worker.drain()
    holder.cleanup()
    total = sum(mine.values())
    return {
        "messages": args.counted,
        "rounds": rounds,
        "seconds": round(seconds, 2),
        "statements_per_round": round(total / rounds, 3),
        "transactions_per_round": round(mine["begin"] / rounds, 3),
        "statements": dict(sorted(mine.items(), key=lambda kv: -kv[1])),
    }


async def _sizes(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    conn = await asyncpg.connect(args.dsn)
    try:
        stored = await conn.fetchval(f'SELECT count(*) FROM "{args.schema}".stowage_sessions')
        return {
            "sessions": int(stored),
            "tables": await sizes(conn, args.schema),
            "indexes": await index_sizes(conn, args.schema),
        }
    finally:
        await conn.close()


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k not in ("dsn", "json")},
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "before": await _sizes(args),
    }
    args.stored = report["before"]["sessions"]
    if args.workers:
        with (
            tempfile.TemporaryDirectory(prefix="stowage-scale-") as tmp,
            bw._fake_server(args.latency) as url,
        ):
            runs = []
            for n in args.workers.split(","):
                runs.append(await _run(args, int(n), url, Path(tmp)))
                print(json.dumps(runs[-1]), flush=True)
            report["runs"] = runs
    if args.counted:
        report["statements"] = await _statements(args)
    report["after"] = await _sizes(args)
    return report


def _print(report: dict[str, Any]) -> None:
    print(
        f"{report['before']['sessions']:,} sessions stored, {report['config']['busy']:,} busy; "
        f"{report['cpus']} CPUs, load average {report['load_average'][0]:.1f} at start"
    )
    print(
        f"{'workers':>7} {'msg/s':>7} {'rounds/s':>9} {'per worker':>18} {'CPU ms/round':>13} "
        f"{'claim stmt p50/p99 ms':>22} {'paced claim p50/p99 ms':>23}"
    )
    for run in report.get("runs", []):
        b, p = run["burst"], run["paced"]
        if b:
            print(
                f"{run['workers']:>7} {b['messages_per_s']:>7} {b['rounds_per_s']:>9} "
                f"{'/'.join(str(r) for r in b['rounds_per_s_per_worker']):>18} "
                f"{b['worker_cpu_ms_per_round']:>13} "
                f"{b['claim_statement_ms_p50']:>10} / {b['claim_statement_ms_p99']:<9} "
                f"{p['claim_latency_ms_p50']:>10} / {p['claim_latency_ms_p99']:<9}"
            )
            print(
                f"{'':>7} PostgreSQL (whole cluster) {b['postgres_cpu_ms_per_round']} ms CPU and "
                f"{b['wal_bytes_per_round']:,} WAL bytes a round"
            )
        print(
            f"{run['workers']:>7} paced at {p['rate_per_s']}/s: claim statement "
            f"{p['claim_statement_ms_p50']} / {p['claim_statement_ms_p99']} ms, send to claim "
            f"{p['claim_latency_ms_p50']} / {p['claim_latency_ms_p99']} ms (p50 / p99)"
        )
    if "statements" in report:
        s = report["statements"]
        print(
            f"\none worker in process, {s['rounds']} rounds: {s['statements_per_round']} "
            f"statements, {s['transactions_per_round']} transactions per round"
        )
        for kind, count in s["statements"].items():
            print(f"  {count:>7}  {kind}")
    for table, size in report["after"]["tables"].items():
        print(
            f"  {table:<20} {size['rows']:>12,} rows  table {size['table_bytes'] / 1e6:>10,.1f} MB"
            f"  indexes {size['index_bytes'] / 1e6:>10,.1f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--schema", default="scale_10k")
    parser.add_argument("--busy", type=int, default=10_000, help="sessions given a message")
    parser.add_argument("--workers", default="1,2,4", help="worker counts ('' for none)")
    parser.add_argument("--concurrency", type=int, default=32, help="sessions per worker")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per model request")
    parser.add_argument("--paced", type=int, default=600, help="paced messages per run")
    parser.add_argument("--paced-rate", type=float, default=20.0, help="most paced messages/s")
    parser.add_argument(
        "--paced-from", type=int, default=None, help="first paced session (default: --busy)"
    )
    parser.add_argument("--counted", type=int, default=300, help="messages counted (0: none)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.paced_from is None:
        args.paced_from = args.busy
    report = anyio.run(_main, args)
    _print(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
