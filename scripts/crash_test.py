"""Crash test: SIGKILL ``stowage run``/``resume`` at random moments, then prove nothing was lost.

    python scripts/crash_test.py --kills 200 --store /tmp/crash-logs
    python scripts/crash_test.py --kills 50 --store sqlite:////tmp/crash.db --seed 7
    python scripts/crash_test.py --kills 50 --store postgresql://postgres@127.0.0.1:5432/test

Multi-turn sessions with tools and frequent compaction run through the real command line
(``python -m stowage.cli``, one process per turn) against the fake OpenAI server in its own
process (one per worker, with latency while a kill is armed). Half the sessions use the seed's
threshold rule (``--compact-threshold``), half the watermarks on a small ``--context-window``;
both wire APIs are used. The tools are the workspace tools over a temporary workspace of files
this script writes, plus ``slow_scan`` (``--tools-from``), which sleeps, so kills land while a
tool runs. A session ends after ``--turns-per-session`` turns and a new one starts.

Each attempt aims at one moment and kills there, at a random offset inside it:

- ``summary``: a summary request reached the server (no ``tools`` in its body); aimed at only
  when the log says a compaction is due, after one plain turn if need be (attempts and resumes
  alternate, and a session that compacts every other turn would otherwise always compact in
  its resumes);
- ``tool``: ``slow_scan`` wrote its start mark;
- ``answer``: the answer appeared on the process's stdout (streamed; the round and the turn
  are being committed, or the process is exiting);
- ``request``: a round request reached the server;
- ``random``: anywhere from the second half of startup (reading and repairing the log) on.

When the aimed-at moment does not come, the process is mostly killed while its answer commits
(``fallback``). Where the kill actually landed is classified from what was seen at that instant
(a tool running, answer text shown, a request in flight, nothing requested yet, or in between).

After every kill:

1. ``stowage check ID`` must exit 0. A torn last line is the one thing a crash may leave: a
   ``check`` that repairs it (the old behaviour) must say so and exit 0; a read-only check (one
   that has ``--repair``) reports it, and then the resume must cut it and ``check`` must be
   clean afterwards. SIGKILL cannot tear a JSONL line (a batch is one ``write``), so with JSONL
   ``--tear`` of the kills leave the first bytes of a next record, as a power cut would.
2. The session is resumed (``stowage resume ID MESSAGE``, a full turn); it must exit 0, and the
   log must then check clean (in this process: the same ``check_log`` and torn-line test as
   ``stowage check``; with the command itself after a torn tail). With PostgreSQL the killed
   writer's lease outlives it (a TTL, 30 s by default): the resume is tried after
   ``--lease-wait`` and again until ``--busy-timeout``, while the worker goes on with its other
   sessions.
3. The acknowledged-turn audit: every turn whose answer a process printed in full (the answer
   and the newline written after the turn returned: the user saw it) must be in the log as a
   finished turn with that answer: for the killed process, and for every earlier one.

Each session is checked once more when it ends, and the fake servers are asked whether any
request carried a tool call without its output (``orphan requests``). The figures are printed
(and written with ``--json``, with every attempt and kill); exit 0 when kills done == asked and
nothing failed, 1 on a failure or a shortfall, 2 when the run could not start (for instance a
``--store`` URL that the command line does not honour). Everything is bounded: each process by
``--attempt-timeout``, the run by ``--max-seconds``; SIGTERM stops it like Ctrl-C, servers and
children included. A failed run keeps its files (each failing step's output and, with JSONL, the
log as it stood) and says where.

With PostgreSQL a fresh database is created on the same server for the run and dropped after
it (``--no-fresh-database`` uses the given one; session ids are unique per run either way).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
from stowage.core import SessionNotFound, StowageError
from stowage.policy import check_log
from stowage.storage import encode_record, open_store

# -- the kill targets and the phases a kill is seen to land in -------------------------------

#: what a kill attempt waits for before it draws its moment, with its weight
TARGETS: dict[str, float] = {
    "summary": 0.30,  # a summary request arrived at the server: kill while it is in flight
    "tool": 0.25,  # slow_scan started: kill while it sleeps
    "answer": 0.20,  # the answer appeared on stdout: kill while it streams and commits
    "request": 0.10,  # a round request arrived: kill while it is in flight
    "random": 0.15,  # anywhere from the start of the process (startup, resume, writes)
}
#: the phases a kill is classified into, from what was observed at the moment of the kill
PHASES = ("summary", "tool", "answer", "model-request", "startup", "between")

MODEL = "crash-model"
API_KEY = "sk-crash-test"
BUSY = re.compile(r"\bbusy\b|is being written by")
EXIT_BUSY = 4  # stowage's exit status for a session whose writer lease another holds
TORN = re.compile(r"torn|repaired", re.IGNORECASE)

TOOLS_MODULE = textwrap.dedent(
    '''
    """Tools of the crash test: the workspace tools, and slow_scan, which sleeps."""

    import os
    import time
    from pathlib import Path

    import anyio
    import pydantic
    from stowage.tools import FunctionTool, ToolRegistry, workspace_tools


    class ScanArgs(pydantic.BaseModel):
        pattern: str = "*"


    def _mark(word):
        path = os.environ.get("CRASH_TOOL_MARK")
        if path:
            with open(path, "a") as f:
                f.write(f"{word} {os.getpid()} {time.time():.6f}\\n")


    async def slow_scan(args):
        _mark("start")
        await anyio.sleep(float(os.environ.get("CRASH_TOOL_SECONDS", "0.3")))
        root = Path.cwd()
        lines = [
            f"{p.relative_to(root)} {p.stat().st_size} bytes: {p.read_text()[:60]!r}"
            for p in sorted(root.rglob("*.txt"))
        ]
        _mark("end")
        return "scan of the workspace\\n" + "\\n".join(lines)


    def registry():
        tools = ToolRegistry([
            FunctionTool(
                name="slow_scan",
                description="Scan the workspace slowly and summarize every text file.",
                args_model=ScanArgs,
                fn=slow_scan,
            )
        ])
        for tool in workspace_tools(Path.cwd()):
            tools.add(tool)
        return tools
    '''
)

WORKSPACE = {
    "README.md": "Lighthouse inventory workspace. Files: alpha.txt, beta.txt, notes/gamma.txt.\n",
    "alpha.txt": "alpha: the lighthouse keeps 40 lamps, 12 lenses and 3 spare generators. " * 12,
    "beta.txt": "beta: inventory of the lighthouse stores, rope 200 m, oil 80 l, bread. " * 12,
    "notes/gamma.txt": "gamma: the keeper's notes on the lighthouse inventory and the tides. " * 12,
}

# -- report --------------------------------------------------------------------------------


@dataclass
class Report:
    store: str
    store_kind: str
    kills_asked: int
    seed: int
    workers: int
    check_mode: str = ""
    kills: int = 0
    kills_by_phase: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    kills_by_target: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys([*TARGETS, "fallback"], 0)
    )
    checks: int = 0
    checks_failed: int = 0
    verifications: int = 0
    verifications_failed: int = 0
    acknowledged_turns: int = 0
    acknowledged_turns_lost: int = 0
    resumes: int = 0
    resumes_failed: int = 0
    resumes_waited_busy: int = 0
    runs_completed: int = 0
    runs_failed: int = 0
    runs_hung: int = 0
    killed_after_acknowledgement: int = 0
    answers_shown_unacknowledged: int = 0
    answers_shown_unacknowledged_in_log: int = 0
    killed_before_session_existed: int = 0
    torn_tails_seen: int = 0
    torn_tails_made: int = 0
    interrupted_tool_outputs: int = 0
    compactions: int = 0
    sessions: int = 0
    requests: int = 0
    summary_requests: int = 0
    orphan_requests: int = 0
    elapsed_seconds: float = 0.0
    cpu_seconds_script: float = 0.0
    cpu_seconds_children: float = 0.0
    processes: int = 0
    timed_out: bool = False
    failures: list[dict[str, Any]] = field(default_factory=list)
    kill_log: list[dict[str, Any]] = field(default_factory=list)
    attempt_log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.kills == self.kills_asked
            and not self.timed_out
            and self.checks_failed == 0
            and self.verifications_failed == 0
            and self.acknowledged_turns_lost == 0
            and self.resumes_failed == 0
            and self.runs_failed == 0
            and self.runs_hung == 0
            and self.orphan_requests == 0
            and not self.failures
        )

    def lines(self) -> list[str]:
        phases = " ".join(f"{k}={v}" for k, v in self.kills_by_phase.items())
        targets = " ".join(f"{k}={v}" for k, v in self.kills_by_target.items())
        return [
            f"crash test: store {self.store_kind} ({self.store}), seed {self.seed}, "
            f"{self.workers} workers, check {self.check_mode}, {self.elapsed_seconds:.1f} s "
            f"(CPU: {self.cpu_seconds_script:.0f} s script, {self.cpu_seconds_children:.0f} s in "
            f"{self.processes} stowage processes and the servers)",
            f"kills: {self.kills} of {self.kills_asked}",
            f"checks failed: {self.checks_failed} of {self.checks}",
            f"in-process checks after a resume failed: {self.verifications_failed} of "
            f"{self.verifications}",
            f"acknowledged turns lost: {self.acknowledged_turns_lost} of {self.acknowledged_turns}",
            f"resumes failed: {self.resumes_failed} of {self.resumes}"
            f" ({self.resumes_waited_busy} waited for a dead writer's lease)",
            f"runs failed: {self.runs_failed} (not killed, exit != 0); hung: {self.runs_hung}",
            f"orphan requests: {self.orphan_requests} of {self.requests}"
            f" ({self.summary_requests} summary requests)",
            f"kills by phase: {phases}",
            f"kills by target: {targets}",
            f"killed after the answer was acknowledged: {self.killed_after_acknowledgement}; "
            f"answer shown but not acknowledged: {self.answers_shown_unacknowledged} "
            f"({self.answers_shown_unacknowledged_in_log} of them finished in the log anyway)",
            f"torn tails: {self.torn_tails_seen} left by a kill, {self.torn_tails_made} made "
            f"(JSONL, --tear); interrupted tool outputs written on resume: "
            f"{self.interrupted_tool_outputs}; killed before the session existed: "
            f"{self.killed_before_session_existed}",
            f"sessions: {self.sessions}, compactions in their logs: {self.compactions}",
            f"timed out: {'yes' if self.timed_out else 'no'}",
            "result: " + ("OK" if self.ok else "FAILED"),
        ]


# -- stores --------------------------------------------------------------------------------


def store_kind(spec: str) -> str:
    scheme, sep, _ = spec.partition("://")
    if not sep:
        return "jsonl"
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("postgresql", "postgres"):
        return "postgresql"
    raise SystemExit(f"crash_test: unsupported --store {spec!r}")


def absolute_store(spec: str) -> str:
    """The spec with a relative path made absolute: the children run in the workspace."""
    kind = store_kind(spec)
    if kind == "jsonl":
        return str(Path(spec).resolve())
    if kind == "sqlite":
        rest = spec.split("://", 1)[1]
        path = Path(rest[1:]).resolve()  # sqlite:///rel -> rel, sqlite:////abs -> /abs
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    return spec


def _with_database(dsn: str, name: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def create_database(dsn: str, name: str) -> str:
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    async def run() -> None:
        conn = await asyncpg.connect(dsn, timeout=5)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    anyio.run(run)
    return _with_database(dsn, name)


def drop_database(dsn: str, name: str) -> None:
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(dsn, timeout=5)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    anyio.run(run)


def read_log(spec: str, session_id: str) -> tuple[list[dict[str, Any]], bool] | None:
    """The session's records as JSON dicts and whether its tail is torn, read without the
    writer lease (nothing is changed); ``None`` when the session does not exist."""

    async def run() -> tuple[list[dict[str, Any]], bool] | None:
        store = open_store(spec)
        try:
            read = await store.read(session_id, repair=False)
        except SessionNotFound:
            return None
        finally:
            await store.aclose()
        return [json.loads(encode_record(r)) for r in read.records], read.torn_tail is not None

    return anyio.run(run)


def verify_log(spec: str, session_id: str) -> list[str]:
    """What ``stowage check`` would call a problem, found in this process (no lease, no change):
    ``check_log`` on the whole log and the resume tail, and a torn last line."""

    async def run() -> list[str]:
        store = open_store(spec)
        try:
            full = await store.read(session_id, repair=False)
            tail = await store.read_tail(session_id, repair=False)
        finally:
            await store.aclose()
        problems = list(check_log(session_id, full.records, tail.records).problems)
        if full.torn_tail is not None:
            problems.append(f"torn last line: {full.torn_tail}")
        return problems

    return anyio.run(run)


# -- processes -----------------------------------------------------------------------------


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _die_with_parent() -> None:
    """In the child: SIGTERM it when this script dies, however it dies (Linux only)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class FakeServer:
    """The fake OpenAI server in its own process; latency is changed over HTTP."""

    def __init__(self, root: Path, index: int, latency: float, seed: int) -> None:
        self.record = root / f"requests-{index}.jsonl"
        self.stderr_path = root / f"server-{index}.err"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stowage.testing.fake_server", "--port", "0",
             "--record", str(self.record), "--latency", str(latency),
             "--forget-requests", "--seed", str(seed)],
            stdout=subprocess.PIPE, stderr=self._stderr, env=child_env({}),
            preexec_fn=_die_with_parent,
        )  # fmt: skip
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("listening "):
            self.close()
            raise SystemExit(f"crash_test: the fake server did not start: {line!r}")
        self.url = line.removeprefix("listening ")
        self.root = self.url.removesuffix("/v1")
        self.latency = latency

    def _call(self, path: str, data: dict[str, Any] | None = None) -> Any:
        body = json.dumps(data).encode() if data is not None else None
        request = urllib.request.Request(
            self.root + path, data=body, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def set_latency(self, seconds: float) -> None:
        if seconds != self.latency:
            self._call("/_fake/faults", {"latency": seconds})
            self.latency = seconds

    def stats(self) -> dict[str, Any]:
        return self._call("/_fake/stats")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._stderr.close()


class Tail:
    """New complete lines of a file that another process appends to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self._partial = b""

    def lines(self) -> list[bytes]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size <= self.offset:
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        self.offset += len(data)
        data = self._partial + data
        *done, self._partial = data.split(b"\n")
        return done


# -- sessions and workers ------------------------------------------------------------------

MODES = (
    ("threshold", "chat"),
    ("window", "responses"),
    ("threshold", "responses"),
    ("window", "chat"),
)


@dataclass
class Session:
    id: str
    mode: str
    wire: str
    turns: int = 0
    exists: bool = False
    #: acknowledged turns: (user message, answer printed)
    acked: list[tuple[str, str]] = field(default_factory=list)
    lost: set[str] = field(default_factory=set)
    pending_resume: bool = False
    resume_due: float = 0.0
    killed_at: float = 0.0
    recheck: bool = False
    broken: bool = False
    retired: bool = False
    compaction_due: bool = False


class Shared:
    """State the workers share: the kill budget and the report, under one lock."""

    def __init__(self, report: Report, deadline: float, run_id: str) -> None:
        self.report = report
        self.run_id = run_id
        self.deadline = deadline
        self.lock = threading.Lock()
        self.reserved = 0
        self.stop = threading.Event()

    def next_session(self) -> Session:
        with self.lock:
            n = self.report.sessions
            self.report.sessions += 1
        mode, wire = MODES[n % len(MODES)]
        return Session(id=f"{self.run_id}-{n}", mode=mode, wire=wire)

    def reserve_kill(self) -> bool:
        with self.lock:
            if self.report.kills + self.reserved >= self.report.kills_asked:
                return False
            self.reserved += 1
            return True

    def release_kill(self, *, done: bool) -> None:
        with self.lock:
            self.reserved -= 1
            if done:
                self.report.kills += 1

    def kills_left(self) -> bool:
        with self.lock:
            return self.report.kills + self.reserved < self.report.kills_asked

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self.report, name, getattr(self.report, name) + n)

    def fail(self, kind: str, session: Session, detail: str, **extra: Any) -> None:
        with self.lock:
            self.report.failures.append(
                {
                    "kind": kind,
                    "session": session.id,
                    "turn": session.turns,
                    "detail": detail[-4000:],
                    **extra,
                }
            )
        print(
            f"FAILURE {kind} session {session.id} turn {session.turns}: {detail[-600:]}",
            file=sys.stderr,
        )


@dataclass
class Settings:
    store: str
    kind: str
    latency: float
    recover_latency: float
    tool_seconds: float
    recover_tool_seconds: float
    lease_wait: float
    busy_timeout: float
    attempt_timeout: float
    threshold: int
    window: int
    check_read_only: bool
    fallback: float
    tear: float
    turns_per_session: int
    tools_dir: Path
    workspace: Path
    root: Path


class Worker:
    def __init__(
        self,
        index: int,
        cfg: Settings,
        shared: Shared,
        server: FakeServer,
        per_worker: int,
        seed: int,
    ) -> None:
        self.index = index
        self.cfg = cfg
        self.shared = shared
        self.server = server
        self.per_worker = per_worker
        self.sessions: list[Session] = []
        self.rng = random.Random(seed)
        self.mark = cfg.root / f"tool-marks-{index}.txt"
        self.mark.touch()
        self.logs = cfg.root / f"worker-{index}"
        self.logs.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: BaseException | None = None
        self.startup = 1.0  # seconds from exec to the first request, learnt as it goes
        self.tear_credit = self.rng.random()

    def new_session(self) -> Session:
        return self.shared.next_session()

    # -- the command line

    def cli_args(self, session: Session, message: str) -> list[str]:
        head = (
            ["resume", session.id, message]
            if session.exists
            else ["run", "--session", session.id, message]
        )
        if session.mode == "threshold":
            mode = ["--compact-threshold", str(self.cfg.threshold)]
        else:
            # a target above the 0.50 default: the no-model fallback after a full compaction
            # makes the scripted model redo its turn, and the loop guard then stops the turn
            mode = ["--context-window", str(self.cfg.window), "--max-output-tokens", "400",
                    "--target-after", "0.75"]  # fmt: skip
        return [
            *head, "--store", self.cfg.store, "--model", MODEL, "--base-url", self.server.url,
            "--api-key", API_KEY, "--wire-api", session.wire, "--tools-from", "crash_tools:registry",
            *mode,
        ]  # fmt: skip

    def env(self, tool_seconds: float) -> dict[str, str]:
        path = os.pathsep.join(
            p for p in (str(self.cfg.tools_dir), os.environ.get("PYTHONPATH")) if p
        )
        return child_env(
            {
                "PYTHONPATH": path,
                "CRASH_TOOL_MARK": str(self.mark),
                "CRASH_TOOL_SECONDS": str(tool_seconds),
            }
        )

    def run_cli(
        self, args: list[str], *, tool_seconds: float, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        self.shared.add(processes=1)
        timeout = max(5.0, min(timeout, self.shared.deadline + 30 - time.monotonic()))
        return subprocess.run(
            [sys.executable, "-m", "stowage.cli", *args],
            cwd=self.cfg.workspace, env=self.env(tool_seconds), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def check(self, session: Session, when: str) -> tuple[int, str]:
        self.shared.add(checks=1)
        try:
            done = self.run_cli(
                ["check", session.id, "--store", self.cfg.store], tool_seconds=0, timeout=120
            )
        except subprocess.TimeoutExpired:
            return 124, f"stowage check {session.id} timed out ({when})"
        output = done.stdout + done.stderr
        if done.returncode != 0:
            self.keep_evidence(session, f"check-{when.replace(' ', '-')}", output)
        return done.returncode, output

    def keep_evidence(self, session: Session, what: str, text: str) -> None:
        """Keep what a failed step said, and a JSONL log as it stood then, for reproduction."""
        stem = self.logs / f"{session.id}-{session.turns}-{what}"
        stem.with_suffix(".txt").write_text(text)
        if self.cfg.kind == "jsonl":
            log = Path(self.cfg.store) / f"{session.id}.jsonl"
            with contextlib.suppress(OSError):
                shutil.copyfile(log, stem.with_suffix(".jsonl"))

    # -- the audit

    def audit(self, session: Session, when: str) -> list[dict[str, Any]] | None:
        """Every acknowledged turn of ``session`` must be a finished turn with its answer."""
        read = read_log(self.cfg.store, session.id)
        if read is None:
            if session.acked:
                self.shared.fail(
                    "log missing",
                    session,
                    f"{when}: no log, {len(session.acked)} acknowledged turns",
                )
            return None
        records, _ = read
        session.compaction_due = compaction_due(records, session, self.cfg.window)
        for message, answer in session.acked:
            if message in session.lost:
                continue
            problem = finished_turn_problem(records, message, answer)
            if problem is not None:
                session.lost.add(message)
                self.shared.add(acknowledged_turns_lost=1)
                self.shared.fail(
                    "acknowledged turn lost", session, f"{when}: {message!r}: {problem}"
                )
        return records

    def plain_turn(self, session: Session) -> bool:
        """One turn that is not killed. A threshold session compacts about every other turn,
        and attempts and resumes alternate: without a turn in between now and then, every
        compaction would fall into a resume, where no kill is armed. False if it failed."""
        session.turns += 1
        message = f"turn {session.turns} of {session.id}: count the lighthouse lamps"
        self.server.set_latency(self.cfg.recover_latency)
        try:
            done = self.run_cli(
                self.cli_args(session, message), tool_seconds=0.01, timeout=self.cfg.attempt_timeout
            )
        except subprocess.TimeoutExpired:
            self.shared.add(runs_hung=1)
            self.shared.fail("run hung", session, f"no exit after {self.cfg.attempt_timeout} s")
            session.broken = True
            return False
        if done.returncode != 0:
            self.shared.add(runs_failed=1)
            self.shared.fail("run failed", session, f"exit {done.returncode}: {done.stderr}")
            session.broken = True
            return False
        session.exists = True
        self.shared.add(runs_completed=1, acknowledged_turns=1)
        session.acked.append((message, done.stdout.strip()))
        self.audit(session, "after a plain turn")
        return session.compaction_due

    # -- one turn that is meant to be killed

    def attempt(self, session: Session) -> None:
        cfg, rng = self.cfg, self.rng
        target = aimed = rng.choices(list(TARGETS), weights=list(TARGETS.values()))[0]
        if (
            target == "summary"
            and not session.compaction_due
            and (session.mode == "window" or not self.plain_turn(session))
        ):
            if session.broken:  # the plain turn failed (reported)
                self.shared.release_kill(done=False)
                return
            target = aimed = rng.choice(["tool", "answer", "request", "random"])
        session.turns += 1
        message = f"turn {session.turns} of {session.id}: check the lighthouse inventory"
        self.server.set_latency(cfg.latency)
        requests, marks = Tail(self.server.record), Tail(self.mark)
        out_path = self.logs / f"{session.id}-{session.turns}.out"
        err_path = self.logs / f"{session.id}-{session.turns}.err"
        args = self.cli_args(session, message)
        with out_path.open("wb") as out, err_path.open("wb") as err:
            start = time.monotonic()
            self.shared.add(processes=1)
            self.proc = proc = subprocess.Popen(
                [sys.executable, "-m", "stowage.cli", *args], cwd=cfg.workspace,
                env=self.env(cfg.tool_seconds), stdout=out, stderr=err,
            )  # fmt: skip
            kill_at: float | None = None
            if target == "random":  # the second half of startup (reading the log) or after
                kill_at = start + rng.uniform(0.5, 1.0) * self.startup + rng.uniform(0, 1.2)
            tools_running = 0
            last_request: tuple[str, float] | None = None
            hung = False
            phase = ""
            while True:
                now = time.monotonic()
                for line in requests.lines():
                    kind = "model-request" if b'"tools":' in line else "summary"
                    if last_request is None:  # learn how long a process takes to start
                        self.startup = 0.8 * self.startup + 0.2 * (now - start)
                    last_request = (kind, now)
                    if kill_at is None and (
                        (target == "summary" and kind == "summary")
                        or (target == "request" and kind == "model-request")
                    ):
                        kill_at = now + rng.uniform(0, cfg.latency)
                for line in marks.lines():
                    tools_running += 1 if line.startswith(b"start") else -1
                    if kill_at is None and target == "tool" and line.startswith(b"start"):
                        kill_at = now + rng.uniform(0, cfg.tool_seconds)
                shown = out_path.stat().st_size
                if kill_at is None and shown > 0:
                    if target == "answer":
                        kill_at = now + rng.uniform(0, 0.02)
                    elif (
                        target != "random"
                        and not (target == "summary" and session.compaction_due)
                        and rng.random() < cfg.fallback
                    ):
                        # the targeted moment never came in this turn: rather than let the
                        # turn finish, kill while the answer commits (but a compaction that
                        # is due comes after the answer round: wait for its summary request)
                        target = "fallback"
                        kill_at = now + rng.uniform(0, 0.02)
                if proc.poll() is not None:
                    break
                if kill_at is not None and now >= kill_at:
                    if tools_running > 0:
                        phase = "tool"
                    elif shown > 0:
                        phase = "answer"
                    elif last_request is not None and now - last_request[1] < cfg.latency:
                        phase = last_request[0]
                    elif last_request is None:
                        phase = "startup"
                    else:
                        phase = "between"
                    proc.send_signal(signal.SIGKILL)
                    if proc.wait() != -signal.SIGKILL:
                        phase = ""  # it had exited on its own just before: not a kill
                    break
                if now - start > cfg.attempt_timeout or self.shared.stop.is_set():
                    hung = not self.shared.stop.is_set()
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    break
                time.sleep(0.003)
            self.proc = None
        with self.shared.lock:
            self.shared.report.attempt_log.append({
                "session": session.id, "turn": session.turns, "aimed_at": aimed,
                "compaction_due": session.compaction_due, "phase": phase or None,
                "exit": proc.returncode,
            })  # fmt: skip
        stdout = out_path.read_text(errors="replace")
        acked = stdout.endswith("\n") and stdout.strip() != ""
        if hung:
            self.shared.release_kill(done=False)
            self.shared.add(runs_hung=1)
            self.shared.fail(
                "run hung", session, f"no exit after {cfg.attempt_timeout} s", argv=args
            )
            session.broken = True
            return
        if not phase:  # it finished before the moment came: a completed turn
            self.shared.release_kill(done=False)
            if self.shared.stop.is_set():
                return
            if proc.returncode != 0:
                self.shared.add(runs_failed=1)
                self.shared.fail(
                    "run failed",
                    session,
                    f"exit {proc.returncode}: {err_path.read_text()}",
                    argv=args,
                )
                session.broken = True
                return
            session.exists = True
            self.shared.add(runs_completed=1, acknowledged_turns=1)
            session.acked.append((message, stdout.strip()))
            return
        # killed
        self.shared.release_kill(done=True)
        with self.shared.lock:
            report = self.shared.report
            report.kills_by_phase[phase] += 1
            report.kills_by_target[target] += 1
            report.kill_log.append({
                "session": session.id, "turn": session.turns, "target": target, "phase": phase,
                "after_seconds": round(time.monotonic() - start, 3), "acknowledged": acked,
            })  # fmt: skip
        if acked:
            self.shared.add(killed_after_acknowledgement=1, acknowledged_turns=1)
            session.acked.append((message, stdout.strip()))
        self.after_kill(session, shown_unacked=bool(stdout) and not acked, message=message)

    def after_kill(self, session: Session, *, shown_unacked: bool, message: str) -> None:
        session.killed_at = time.monotonic()
        read = read_log(self.cfg.store, session.id)
        if read is None:
            if session.exists:
                self.shared.fail("log missing", session, "the session's log is gone after a kill")
                session.broken = True
                return
            self.shared.add(killed_before_session_existed=1)
        else:
            session.exists = True
            records, torn = read
            if torn:
                self.shared.add(torn_tails_seen=1)
            elif self.cfg.kind == "jsonl" and records:
                self.tear_credit += self.cfg.tear  # a quota, not a draw: --tear 0.2 tears 1 in 5
                if self.tear_credit >= 1:
                    self.tear_credit -= 1
                    self.tear(session, records[-1])
            if shown_unacked:
                self.shared.add(answers_shown_unacknowledged=1)
                if finished_turn_problem(records, message, None) is None:
                    self.shared.add(answers_shown_unacknowledged_in_log=1)
            rc, output = self.check(session, "after the kill")
            problems = [line for line in output.splitlines() if line.startswith("problem:")]
            if TORN.search(output):
                session.recheck = True  # the resume must repair it: checked again after it
            if rc != 0:
                if self.cfg.check_read_only and problems and all(TORN.search(p) for p in problems):
                    pass  # a read-only check reports a torn last line and leaves it
                else:
                    self.shared.add(checks_failed=1)
                    self.shared.fail(
                        "check failed", session, f"after the kill: exit {rc}: {output}"
                    )
            self.audit(session, "after the kill")
        session.pending_resume = True
        session.resume_due = session.killed_at + self.cfg.lease_wait

    def tear(self, session: Session, last: dict[str, Any]) -> None:
        """Leave what a crash in the middle of a write leaves: the first bytes of the next
        record and no newline. SIGKILL cannot do it here (a batch is one ``write``), a power
        cut or a full disk can; the resume must cut it and ``check`` must then be clean."""
        line = json.dumps({**last, "seq": last["seq"] + 1}).encode()
        with (Path(self.cfg.store) / f"{session.id}.jsonl").open("ab") as f:
            f.write(line[: self.rng.randrange(1, len(line))])
        self.shared.add(torn_tails_made=1)

    # -- the resume after a kill

    def recover(self, session: Session) -> None:
        cfg = self.cfg
        session.turns += 1
        message = f"turn {session.turns} of {session.id}: resume after the crash and report"
        self.server.set_latency(cfg.recover_latency)
        args = self.cli_args(session, message)
        try:
            done = self.run_cli(
                args, tool_seconds=cfg.recover_tool_seconds, timeout=cfg.attempt_timeout
            )
            rc, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = 124, "", f"no exit after {cfg.attempt_timeout} s"
        busy = rc == EXIT_BUSY or (rc != 0 and BUSY.search(err) is not None)
        if busy and time.monotonic() < session.killed_at + cfg.busy_timeout:
            session.turns -= 1  # that message never became a turn; try again shortly
            self.shared.add(resumes_waited_busy=1)
            session.resume_due = time.monotonic() + 3.0
            return
        self.shared.add(resumes=1)
        session.pending_resume = False
        if rc != 0:
            self.shared.add(resumes_failed=1)
            self.shared.fail("resume failed", session, f"exit {rc}: {err}", argv=args)
            session.broken = True
            return
        session.exists = True
        self.shared.add(acknowledged_turns=1)
        session.acked.append((message, out.strip()))
        if session.recheck:  # a torn tail was there: the resume must have cut it
            session.recheck = False
            rc, output = self.check(session, "after the resume")
            if rc != 0:
                self.shared.add(checks_failed=1)
                self.shared.fail("check failed", session, f"after the resume: exit {rc}: {output}")
        else:
            self.shared.add(verifications=1)
            problems = verify_log(cfg.store, session.id)
            if problems:
                self.shared.add(verifications_failed=1)
                self.shared.fail("log unsound after the resume", session, "; ".join(problems))
        self.audit(session, "after the resume")

    def retire(self, session: Session) -> None:
        """The last check and audit of a session that takes no more turns."""
        session.retired = True
        if not session.exists or session.broken:
            return
        rc, output = self.check(session, "at its end")
        if rc != 0:
            self.shared.add(checks_failed=1)
            self.shared.fail("check failed", session, f"at its end: exit {rc}: {output}")
        records = self.audit(session, "at its end") or []
        self.shared.add(
            compactions=sum(r["type"] == "compaction" for r in records),
            interrupted_tool_outputs=sum(
                r["type"] == "item"
                and r["item"]["type"] == "function_call_output"
                and "interrupted" in r["item"]["output"][:40]
                for r in records
            ),
        )

    def run(self) -> None:
        try:
            self._loop()
            for session in self.sessions:
                if not session.retired and not session.pending_resume:
                    self.retire(session)
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.shared.stop.set()
        finally:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def _loop(self) -> None:
        shared = self.shared
        while not shared.stop.is_set():
            now = time.monotonic()
            if now > shared.deadline:
                with shared.lock:
                    shared.report.timed_out = True
                return
            for session in self.sessions:
                if (
                    not session.retired
                    and not session.pending_resume
                    and session.turns >= self.cfg.turns_per_session
                ):
                    self.retire(session)
            live = [s for s in self.sessions if not s.broken and not s.retired]
            if len(live) < self.per_worker and shared.kills_left():
                session = self.new_session()
                self.sessions.append(session)
                live.append(session)
            due = [s for s in live if s.pending_resume and now >= s.resume_due]
            if due:
                self.recover(min(due, key=lambda s: s.resume_due))
                continue
            pending = [s for s in live if s.pending_resume]
            idle = [s for s in live if not s.pending_resume]
            if not shared.kills_left() or not idle:
                if not pending:
                    return
                time.sleep(min(0.5, max(0.0, min(s.resume_due for s in pending) - now)))
                continue
            session = self.rng.choice(idle)
            if not shared.reserve_kill():
                continue
            self.attempt(session)


def compaction_due(records: list[dict[str, Any]], session: Session, window: int) -> bool:
    """Whether the next turn of ``session`` will likely compact, from its log: a threshold
    session compacts in about every other turn, a watermark one once its usage nears the
    compact mark (about 0.65 of a small window here, after the output and tool reserves)."""
    if session.mode == "threshold":
        since = 0
        for record in reversed(records):
            if record["type"] == "compaction":
                return since >= 1
            if record["type"] == "turn" and record["phase"] == "started":
                since += 1
        return True
    usage = next(
        (r["usage"]["total_tokens"] for r in reversed(records)
         if r["type"] == "round_committed" and r.get("usage")),
        0,
    )  # fmt: skip
    return usage >= 0.58 * window


def finished_turn_problem(
    records: list[dict[str, Any]], message: str, answer: str | None
) -> str | None:
    """``None`` when the log holds ``message`` as a finished turn (whose last answer is
    ``answer``, unless that is ``None``), else what is missing."""
    start = next(
        (n for n, r in enumerate(records)
         if r["type"] == "item" and r["item"]["type"] == "user" and r["item"].get("text") == message),
        None,
    )  # fmt: skip
    if start is None:
        return "its user message is not in the log"
    turn = None
    last_answer = None
    for record in records[start + 1 :]:
        if record["type"] == "turn" and record["phase"] == "started" and turn is None:
            turn = record["turn"]
        elif record["type"] == "item" and record["item"]["type"] == "user":
            break
        elif record["type"] == "item" and record["item"]["type"] == "assistant":
            last_answer = record["item"].get("text")
        elif record["type"] == "turn" and record["phase"] == "finished" and record["turn"] == turn:
            if answer is not None and (last_answer or "").strip() != answer:
                return f"finished with answer {last_answer!r}, the user saw {answer!r}"
            return None
    return "no 'finished' turn record after it" if turn is not None else "no 'started' turn record"


# -- the run -------------------------------------------------------------------------------


def check_is_read_only(env: dict[str, str]) -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "stowage.cli", "check", "--help"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    return "--repair" in done.stdout


def probe(worker: Worker, session: Session) -> str | None:
    """One plain turn: the command line must write to ``--store`` (a URL too); else why not."""
    session.turns += 1
    message = f"turn {session.turns} of {session.id}: list the lighthouse files"
    worker.server.set_latency(worker.cfg.recover_latency)
    done = worker.run_cli(worker.cli_args(session, message), tool_seconds=0.01, timeout=120)
    if done.returncode != 0:
        return f"stowage run exited {done.returncode}: {done.stderr.strip()[-2000:]}"
    if read_log(worker.cfg.store, session.id) is None:
        strays = [str(p) for p in worker.cfg.workspace.rglob(f"{session.id}.jsonl")]
        return (
            f"stowage run exited 0 but wrote nothing to --store {worker.cfg.store}"
            + (f"; it wrote {', '.join(strays)} instead" if strays else "")
            + " (run/resume do not honour a store URL)"
        )
    session.exists = True
    session.acked.append((message, done.stdout.strip()))
    worker.shared.add(runs_completed=1, acknowledged_turns=1)
    return None


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="crash_test.py",
        description=__doc__.split("\n\n")[0],
    )
    add = p.add_argument
    add("--kills", type=int, required=True, help="SIGKILLs to land")
    add("--store", required=True, help="DIR, sqlite:///path or postgresql://...")
    add("--seed", type=int, default=None, help="random seed (none: a random one, printed)")
    add("--json", type=Path, default=None, help="write the report here")
    add(
        "--workers",
        type=int,
        default=3,
        help="turns killed at once, one fake server each (default %(default)s)",
    )
    add("--sessions-per-worker", type=int, default=None, help="none: 2, PostgreSQL 10")
    add(
        "--latency",
        type=float,
        default=0.15,
        help="model latency (s) while a kill is armed (default %(default)s)",
    )
    add(
        "--recover-latency",
        type=float,
        default=0.0,
        help="model latency (s) for resumes (default %(default)s)",
    )
    add(
        "--tool-seconds",
        type=float,
        default=0.3,
        help="slow_scan's sleep while a kill is armed (default %(default)s)",
    )
    add(
        "--compact-threshold",
        type=int,
        default=800,
        help="of the threshold-mode sessions (default %(default)s)",
    )
    add(
        "--context-window",
        type=int,
        default=4500,
        help="of the watermark-mode sessions (default %(default)s)",
    )
    add(
        "--turns-per-session",
        type=int,
        default=16,
        help="then a new session starts (default %(default)s)",
    )
    add(
        "--fallback",
        type=float,
        default=0.9,
        help="chance to kill while the answer commits when the targeted moment never came (default %(default)s)",
    )
    add(
        "--lease-wait",
        type=float,
        default=None,
        help="seconds before resuming a killed session (none: 0, PostgreSQL 31, its lease TTL)",
    )
    add(
        "--busy-timeout",
        type=float,
        default=None,
        help="give up on a dead writer's lease after this (none: 20 s, PostgreSQL 75 s)",
    )
    add(
        "--tear",
        type=float,
        default=0.1,
        help="JSONL: share of kills after which a torn last line is left, as a power cut would (default %(default)s)",
    )
    add(
        "--attempt-timeout",
        type=float,
        default=60.0,
        help="one stowage process at most (s) (default %(default)s)",
    )
    add(
        "--max-seconds",
        type=float,
        default=570.0,
        help="the whole run at most (s) (default %(default)s)",
    )
    add("--no-fresh-database", action="store_true", help="PostgreSQL: use the given database")
    add("--keep", action="store_true", help="keep the temporary files (and database)")
    args = p.parse_args(argv)
    if args.kills < 0 or args.workers < 1:
        p.error("--kills must be >= 0 and --workers >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # stop like Ctrl-C: servers and children too
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    started = time.monotonic()
    kind = store_kind(args.store)
    store = absolute_store(args.store)
    run_id = f"c{seed}x{os.getpid()}{random.Random().randrange(1 << 16):04x}"
    report = Report(
        store=args.store, store_kind=kind, kills_asked=args.kills, seed=seed, workers=args.workers
    )
    database = None
    if kind == "postgresql" and not args.no_fresh_database:
        database = f"stowage_crash_{run_id}".lower()
        try:
            store = create_database(store, database)
        except Exception as exc:
            print(f"crash_test: cannot create database {database}: {exc!r}", file=sys.stderr)
            return 2
    root = Path(tempfile.mkdtemp(prefix="stowage-crash-"))
    ran = False  # past the probe: a failure from here on keeps its evidence
    servers: list[FakeServer] = []
    workers: list[Worker] = []
    shared = Shared(report, started + args.max_seconds, run_id)
    try:
        tools_dir = root / "tools"
        tools_dir.mkdir()
        (tools_dir / "crash_tools.py").write_text(TOOLS_MODULE)
        workspace = root / "workspace"
        for name, text in WORKSPACE.items():
            (workspace / name).parent.mkdir(parents=True, exist_ok=True)
            (workspace / name).write_text(text)
        read_only = check_is_read_only(child_env({}))
        report.check_mode = "read-only (--repair exists)" if read_only else "repairs a torn tail"
        postgres = kind == "postgresql"
        cfg = Settings(
            store=store, kind=kind, latency=args.latency, recover_latency=args.recover_latency,
            tool_seconds=args.tool_seconds, recover_tool_seconds=0.01,
            lease_wait=args.lease_wait if args.lease_wait is not None else (31.0 if postgres else 0.0),
            busy_timeout=args.busy_timeout if args.busy_timeout is not None else (75.0 if postgres else 20.0),
            attempt_timeout=args.attempt_timeout, threshold=args.compact_threshold,
            fallback=args.fallback, turns_per_session=args.turns_per_session, tear=args.tear,
            window=args.context_window, check_read_only=read_only, tools_dir=tools_dir,
            workspace=workspace, root=root,
        )  # fmt: skip
        per_worker = args.sessions_per_worker or (10 if postgres else 2)
        rng = random.Random(seed)
        for index in range(args.workers):
            servers.append(FakeServer(root, index, args.latency, seed + index))
            workers.append(
                Worker(index, cfg, shared, servers[-1], per_worker, rng.randrange(1 << 30))
            )
        first = workers[0].new_session()
        workers[0].sessions.append(first)
        problem = probe(workers[0], first)
        if problem is not None:
            print(f"crash_test: cannot run against {args.store}: {problem}", file=sys.stderr)
            return 2
        ran = True
        threads = [threading.Thread(target=w.run, name=f"crash-worker-{w.index}") for w in workers]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.5)
        except KeyboardInterrupt:
            shared.stop.set()
            for thread in threads:
                thread.join(30)
            raise
        for worker in workers:
            if worker.error is not None:
                raise worker.error
        for server in servers:
            stats = server.stats()
            report.requests += stats["requests"]
            report.summary_requests += stats["summaries"]
            report.orphan_requests += stats["orphan_requests"]
            if stats["orphan_requests"]:
                report.failures.append(
                    {"kind": "orphan requests", "detail": json.dumps(stats["orphan_examples"])}
                )
    finally:
        for server in servers:
            server.close()
        report.elapsed_seconds = time.monotonic() - started
        own, children = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        report.cpu_seconds_script = own.ru_utime + own.ru_stime
        report.cpu_seconds_children = children.ru_utime + children.ru_stime
        interrupted = sys.exc_info()[0] is KeyboardInterrupt
        keep = args.keep or (ran and not report.ok and not interrupted)  # a failure's evidence
        if database is not None and not keep:
            with contextlib.suppress(Exception):
                drop_database(args.store, database)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    for line in report.lines():
        print(line)
    for failure in report.failures[:20]:
        print(f"failure: {json.dumps(failure)[:1000]}")
    if not report.ok:
        print(f"kept for inspection: {root}" + (f", database {database}" if database else ""))
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(report), indent=2) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except StowageError as exc:
        print(f"crash_test: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("crash_test: interrupted; servers and children stopped", file=sys.stderr)
        sys.exit(130)
