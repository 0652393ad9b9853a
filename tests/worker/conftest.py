"""Fixtures of the worker tests: a PostgreSQL schema per test, the fake OpenAI server in its own
process, ``stowage worker`` processes, and what the logs say about messages.

Needs PostgreSQL at ``STOWAGE_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
skipped when none answers, except under CI (``CI`` set), where its absence is a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from stowage.cli._main import build_parser
from stowage.core import ItemRecord, Record, TurnRecord, UserMessage
from stowage.policy import check_log
from stowage.storage import PostgresStore

DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def schema(pg_schema: str) -> str:
    """A fresh schema name; the schema is dropped after the test."""
    return pg_schema


async def sql(query: str, *args: Any) -> list[asyncpg.Record]:
    """Run one query on a connection of its own (the tests' view from outside the store)."""
    conn = await asyncpg.connect(DSN, timeout=5)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def held_leases(schema: str) -> list[str]:
    """Ids of the sessions whose lease someone holds (released leases have no owner)."""
    rows = await sql(
        f'SELECT session_id FROM "{schema}".stowage_sessions WHERE lease_owner IS NOT NULL'
    )
    return sorted(row["session_id"] for row in rows)


async def leases_held_by(schema: str, pids: list[int]) -> list[str]:
    """Ids of the sessions whose lease a process among ``pids`` still holds."""
    rows = await sql(
        f'SELECT session_id FROM "{schema}".stowage_sessions '
        "WHERE lease_owner IS NOT NULL AND lease_pid = ANY($1::int[])",
        pids,
    )
    return sorted(row["session_id"] for row in rows)


async def message_counts(schema: str) -> Counter[str]:
    """How many messages are in each status (``queued``: in an inbox, not logged yet)."""
    rows = await sql(
        f'SELECT status, count(*) AS n FROM "{schema}".stowage_messages GROUP BY status'
    )
    counts: Counter[str] = Counter({row["status"]: row["n"] for row in rows})
    queued = await sql(
        f'SELECT count(*) AS n FROM "{schema}".stowage_sessions AS s, '
        "jsonb_array_elements(s.inbox) AS e WHERE NOT EXISTS (SELECT 1 FROM "
        f'"{schema}".stowage_messages AS m WHERE m.session_id = s.session_id '
        "AND m.message_id = e->>'message_id')"
    )
    counts["queued"] = queued[0]["n"]
    return counts


@dataclass
class LogVerdict:
    """What the logs of a store say about the messages sent to it."""

    #: message id -> user items that carry it, over all logs
    logged: Counter[str] = field(default_factory=Counter)
    #: message id -> 1 when the turn it started finished (it was answered)
    answered: Counter[str] = field(default_factory=Counter)
    #: session id -> the problems ``stowage check`` finds
    problems: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: dict[str, tuple[str, ...]] = field(default_factory=dict)


def turns_of(records: tuple[Record, ...]) -> tuple[Counter[str], Counter[str]]:
    """Message ids logged, and message ids whose turn finished, in one log."""
    logged: Counter[str] = Counter()
    answered: Counter[str] = Counter()
    open_message: str | None = None
    for record in records:
        if isinstance(record, ItemRecord) and isinstance(record.item, UserMessage):
            open_message = record.item.message_id
            if open_message is not None:
                logged[open_message] += 1
        elif isinstance(record, TurnRecord) and record.phase == "finished":
            if open_message is not None:
                answered[open_message] += 1
            open_message = None
    return logged, answered


async def verdict(schema: str) -> LogVerdict:
    """Read every log of the schema, count message ids and run ``stowage check`` on each."""
    store = PostgresStore(DSN, schema=schema, max_size=4)
    out = LogVerdict()
    try:
        for session_id in await store.list_sessions():
            full = await store.read(session_id, repair=False)
            tail = await store.read_tail(session_id, repair=False)
            logged, answered = turns_of(full.records)
            out.logged.update(logged)
            out.answered.update(answered)
            report = check_log(session_id, full.records, tail.records)
            if report.problems:
                out.problems[session_id] = report.problems
            if report.notes:
                out.notes[session_id] = report.notes
    finally:
        await store.aclose()
    return out


# -- processes --------------------------------------------------------------------------------


def stowage_command() -> list[str]:
    """``python -m stowage.cli`` once ``worker``/``send`` are wired into it; until then the
    module that defines them runs them on its own."""
    wired = "worker" in build_parser().format_help()
    return [sys.executable, "-m", "stowage.cli" if wired else "stowage.cli._worker"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A small directory for the workspace tools of the workers."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("alpha.txt", "beta.txt"):
        (work / name).write_text(f"{name} holds " + "data " * 50)
    return work


@pytest.fixture
def fake_server(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[Callable[..., str]]:
    """Start fake OpenAI servers in processes of their own: ``url = fake_server(latency=0.01)``
    (``tool_rounds``: rounds of tool calls per turn before the answer)."""
    procs: list[subprocess.Popen[str]] = []

    def start(*, latency: float = 0.0, tool_rounds: int = 2) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stowage.testing.fake_server", "--port", "0",
             "--latency", str(latency), "--tool-rounds", str(tool_rounds), "--forget-requests"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("listening "), line
        return line.removeprefix("listening ")

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
            if proc.stdout:
                proc.stdout.close()


@dataclass
class Workers:
    """``stowage worker`` processes against one schema and one fake server; logs in ``logs``."""

    schema: str
    url: str
    cwd: Path
    logs: Path
    env: dict[str, str]
    extra: tuple[str, ...] = ()
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        n = len(self.procs)
        args = [
            *stowage_command(), "worker", "--store", DSN, "--schema", self.schema,
            "--model", "fake-model", "--base-url", self.url, "--api-key", "sk-test-secret",
            "--log-format", "json", "--log-level", "info",
            *self.extra, *extra,
        ]  # fmt: skip
        with (self.logs / f"worker-{n}.log").open("wb") as log:
            proc = subprocess.Popen(
                args, cwd=self.cwd, env=self.env, stdout=subprocess.DEVNULL, stderr=log
            )
        self.procs.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [proc for proc in self.procs if proc.poll() is None]

    async def started(self) -> None:
        """Until every live worker has said ``worker_started`` (it handles SIGTERM from then
        on; before, a signal ends the interpreter while it imports)."""

        async def up() -> bool:
            for n, proc in enumerate(self.procs):
                log = await anyio.Path(self.logs / f"worker-{n}.log").read_text()
                if proc.poll() is None and "worker_started" not in log:
                    return False
            return True

        await poll_until(up)

    def stop_all(self) -> None:
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def log_text(self) -> str:
        return "".join(p.read_text() for p in sorted(self.logs.glob("worker-*.log")))


@pytest.fixture
def workers_for(
    tmp_path: Path, workspace: Path, cli_env: dict[str, str]
) -> Iterator[Callable[..., Workers]]:
    """``workers = workers_for(schema, url, "--lease-ttl", "2")``; every process is stopped after."""
    made: list[Workers] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def make(schema: str, url: str, *extra: str) -> Workers:
        workers = Workers(
            schema=schema, url=url, cwd=workspace, logs=logs, env=cli_env, extra=extra
        )
        made.append(workers)
        return workers

    try:
        yield make
    finally:
        for workers in made:
            for proc in workers.alive():
                proc.kill()
            for proc in workers.procs:
                proc.wait(timeout=10)


async def poll_until(check: Callable[[], Any], *, every: float = 0.1, limit: int = 600) -> Any:
    """Ask ``check`` (a coroutine function) until it answers something true; returns that.

    For state that only another process changes (a database row, a process exiting): there
    is nothing in this process to wait on. The caller's ``fail_after`` bounds it in time.
    """
    for _ in range(limit):
        found = await check()
        if found:
            return found
        await anyio.sleep(every)
    raise AssertionError(f"{check} never held")
