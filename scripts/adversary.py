"""A standing adversary: the real command line against lying endpoints, kills, racing writers
and a full disk, on each store, with every probe's verdict counted.

    python scripts/adversary.py                        # JSONL and SQLite, about a minute
    python scripts/adversary.py --kills 1000 --json figures.json
    python scripts/adversary.py --store-kinds jsonl,sqlite,postgresql

Every command is a ``python -m stowage.cli`` process; the model is the fake server
(``stowage fake-server``, driven through ``POST /_fake/faults``), or the offline scripted
model where a call must act and wait for approval. A turn is *acknowledged* when its command
exited 0 and printed the answer. The probes, per store:

- ``lie: NAME``: one turn against an endpoint that lies in one way (a huge answer whose usage
  says 3 tokens, usage zeroed, a stall of keep-alives, a cut stream, a context-length refusal
  as OpenAI and as LiteLLM word it, a 5xx or 429 burst, a body that is not JSON, no finish
  marker), once as a passing fault and once for every retry; it holds when the command exits
  with the status the fault calls for (a documented one: ``stowage.cli._exits``), the log
  checks clean in this process, and the session goes on;
- ``kill run``, ``kill resume``, ``kill approve``, ``kill archive``, ``kill worker``: SIGKILL
  at a random moment of the command (between its start and the length of one that was not
  killed); it holds when ``stowage check`` then exits 0, the session goes on (a ``resume``
  exits 0; a killed approval is given again until the turn is done; a killed worker's
  message is answered by the next worker), and every acknowledged turn of the session is in
  its log once, finished with the answer the user saw, no user message and no tool output
  twice, and for the calls that act nothing applied twice nor claimed and missing
  (``crash_acting.audit``). ``archive`` needs an SQL store and ``worker`` PostgreSQL;
  ``approve`` needs bubblewrap;
- ``race resume``: N ``resume`` of one session at once while the first model request stalls:
  each exits 0 or 4 (busy: it met the writer), at least one exits 0, and the messages of those
  that exited 0 are logged, once each (on a busy machine a resume may start only after the
  writer ended: it then goes on after it, which the table counts);
- ``disk full``: in a mount namespace of its own (``unshare --mount``), the store on a small
  tmpfs that is then filled: the turn exits 5, ``stowage check`` exits 0 on the full disk,
  and once space is freed the session resumes and its acknowledged turn is there once.
  Where mounting is not permitted the probe is skipped and says why.

Each probe prints tried, held, failed (why skipped, where its kills landed) as a table, and
with ``--json PATH`` as JSON; progress goes to stderr (``--verbose``: every command). The
stores are attacked at once, one thread and one fake server each. Exit 0 only when every
probe that ran held (and at least one did); 1 otherwise, a store that could not be reached
included (said with the figures); 2 for a bad option.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from stowage.core import replay

sys.path.insert(0, str(Path(__file__).resolve().parent))
import crash_acting  # a sibling script: the acting turn, its audit of the workspace
import crash_test  # a sibling script: the fake server process, log reads, the turn audit

STORE_KINDS = ("jsonl", "sqlite", "postgresql")
PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
MODEL, API_KEY = "adversary-model", "sk-adversary"
#: the documented exit statuses (docs/reference/exit-statuses.md) a script may rely on, as a
#: user's script would: ok, busy (another writer), the store failed
EXIT_OK, EXIT_BUSY, EXIT_STORE = 0, 4, 5
KILLED = ("run", "resume", "approve", "archive", "worker")
#: a probe's name, the fault posted before its turn, the exit statuses it calls for, and the
#: options its turn adds
LIES: tuple[tuple[str, dict[str, Any], frozenset[int], tuple[str, ...]], ...] = (
    ("huge answer, small usage", {"fault": "invented_usage", "times": 9}, frozenset({0, 6}), ()),
    ("stall, passing", {"fault": "keepalive", "interval": 0.2}, frozenset({0}), ()),
    ("cut stream, every retry", {"fault": "cut_stream", "times": 9}, frozenset({3}), ()),
    ("context-length refusal, passing", {"fault": "context_length"}, frozenset({0}), ()),
    ("5xx burst", {"fault": "server_error", "status": 503, "times": 2}, frozenset({0}), ()),
    ("context-length refusal, always", {"fault": "context_length", "times": 9}, frozenset({6}), ()),
    # the refusal states an 8,192-token window where the session was told of 128,000
    (
        "refusal naming another window",
        {"fault": "context_length"},
        frozenset({0, 6}),
        ("--context-window", "128000"),
    ),
    (
        "5xx on every retry",
        {"fault": "server_error", "status": 500, "times": 9},
        frozenset({3}),
        (),
    ),
    ("stall, every retry", {"fault": "keepalive", "interval": 0.2, "times": 9}, frozenset({3}), ()),
    ("cut stream, passing", {"fault": "cut_stream"}, frozenset({0}), ()),
    ("usage zeroed", {"fault": "zero_usage", "times": 9}, frozenset({0, 6}), ()),
    ("LiteLLM context refusal", {"fault": "litellm_context"}, frozenset({0}), ()),
    ("429 burst", {"fault": "rate_limit", "retry_after": 0.1, "times": 2}, frozenset({0}), ()),
    ("not JSON", {"fault": "garbage"}, frozenset({0}), ()),
    ("no finish marker", {"fault": "no_finish"}, frozenset({0, 3}), ()),
)
#: model timeouts and retries short enough that a stall costs a second, not minutes
FAST_FAILURE = {
    "STOWAGE_STREAM_IDLE_TIMEOUT": "1",
    "STOWAGE_REQUEST_TIMEOUT": "2",
    "STOWAGE_MAX_RETRY_WAIT": "0.2",
}
#: print every command with its status and seconds (--verbose)
VERBOSE = False
SESSION_TURNS = 8  # a kill session takes this many turns, then a new one starts
README = "Adversary workspace. Files: alpha.txt, beta.txt.\n"


# -- the tally -------------------------------------------------------------------------------


@dataclass
class Tally:
    """One probe on one store: how often it was tried and held; why it failed or was skipped."""

    tried: int = 0
    held: int = 0
    failures: list[str] = field(default_factory=list)
    skipped: str | None = None
    #: what held but is worth saying (a documented status where a cleaner one was hoped for)
    notes: list[str] = field(default_factory=list)
    #: how the commands ended: a lie's ``exit N``; where a kill landed: ``killed``, ``ended
    #: first`` (the command was done before its moment: checked all the same), ``before the
    #: session existed``
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)

    def land(self, done: Done) -> None:
        self.outcomes["killed" if done.status is None else "ended first"] += 1

    @property
    def failed(self) -> int:
        return self.tried - self.held


@dataclass
class Arena:
    """One store kind under attack: its store, workspace, fake server and tallies."""

    kind: str
    store: str
    root: Path
    server: crash_test.FakeServer
    rng: random.Random
    run_id: str
    tallies: dict[str, Tally] = field(default_factory=dict)
    #: seconds a command of each kind took when nothing killed it: the range a kill is drawn in
    lengths: dict[str, float] = field(default_factory=dict)
    serial: int = 0

    def tally(self, probe: str) -> Tally:
        return self.tallies.setdefault(probe, Tally())

    def new_id(self, what: str) -> str:
        self.serial += 1
        return f"{self.run_id}-{what}-{self.serial}"

    def workspace(self, name: str) -> Path:
        path = self.root / "work" / name
        if not path.exists():
            path.mkdir(parents=True)
            (path / "README.md").write_text(README)
            for name_, text in crash_test.WORKSPACE.items():
                if name_.endswith(".txt") and "/" not in name_:
                    (path / name_).write_text(text)
        return path


def progress(text: str) -> None:
    print(f"adversary: {text}", file=sys.stderr, flush=True)


# -- commands --------------------------------------------------------------------------------


@dataclass
class Done:
    """How a command ended: its status (``None``: killed), what it printed, how long it took."""

    status: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def acknowledged(self) -> bool:
        return self.status == EXIT_OK and self.stdout.strip() != ""


def stowage(arena: Arena, *args: str, store: bool = True) -> list[str]:
    """The argv of ``stowage ARGS`` against the arena's store."""
    tail = ["--store", arena.store] if store else []
    return [sys.executable, "-m", "stowage.cli", *args[:1], *tail, *args[1:]]


def model(arena: Arena) -> list[str]:
    return ["--model", MODEL, "--base-url", arena.server.url, "--api-key", API_KEY]


def launch(
    argv: list[str], cwd: Path, *, kill_after: float | None = None, timeout: float = 120
) -> Done:
    """Run ``argv``; SIGKILL it after ``kill_after`` seconds unless it ended first."""
    env = crash_test.child_env(FAST_FAILURE)
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err)
        try:
            status: int | None = process.wait(timeout=timeout if kill_after is None else kill_after)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            status = None if process.wait() == -signal.SIGKILL else process.returncode
            if kill_after is None:
                status = 124
        seconds = time.monotonic() - started
        if VERBOSE:
            shown = " ".join(a for a in argv[3:] if not a.startswith(("http", "sk-", "/")))
            progress(f"{seconds:5.1f} s  exit {status}  {shown[:120]}")
        out.seek(0)
        err.seek(0)
        return Done(status, out.read().decode(errors="replace"), err.read().decode(), seconds)


def learn(arena: Arena, kind: str, done: Done) -> None:
    """Keep how long an unkilled command of ``kind`` took: kills are drawn inside it."""
    if done.status is not None:
        before = arena.lengths.get(kind, done.seconds)
        arena.lengths[kind] = 0.7 * before + 0.3 * done.seconds


def until_free(arena: Arena, argv: list[str], cwd: Path, *, patience: float) -> Done:
    """Run ``argv`` until it is not refused as busy (a dead writer's lease lasts its TTL on
    PostgreSQL), at most ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while True:
        done = launch(argv, cwd)
        if done.status != EXIT_BUSY or time.monotonic() > deadline:
            return done
        time.sleep(1.0)


# -- the audit -------------------------------------------------------------------------------


def records_of(arena: Arena, session: str) -> list[dict[str, Any]] | None:
    read = crash_test.read_log(arena.store, session)
    return None if read is None else read[0]


def doubled(records: list[dict[str, Any]]) -> list[str]:
    """User messages or tool outputs that the log holds twice."""
    users = collections.Counter(
        r["item"]["text"] for r in records if r["type"] == "item" and r["item"]["type"] == "user"
    )
    outputs = collections.Counter(
        r["item"]["call_id"]
        for r in records
        if r["type"] == "item" and r["item"]["type"] == "function_call_output"
    )
    return [
        f"user message {text[:60]!r} logged {n} times" for text, n in users.items() if n > 1
    ] + [f"output of call {cid} logged {n} times" for cid, n in outputs.items() if n > 1]


def audit(
    arena: Arena, session: str, acknowledged: list[tuple[str, str | None]], *, cli_check: bool
) -> list[str]:
    """What is wrong with ``session`` now: ``stowage check`` (or the same check in this
    process), every acknowledged turn finished once with its answer, nothing twice."""
    problems: list[str] = []
    if cli_check:
        done = launch(stowage(arena, "check", session), arena.root)
        if done.status != EXIT_OK:
            problems.append(
                f"stowage check exited {done.status}: {(done.stdout + done.stderr)[-400:]}"
            )
    records = records_of(arena, session)
    if records is None:
        return [*problems, "no log"] if acknowledged else problems
    if not cli_check:
        problems += crash_test.verify_log(arena.store, session)
    for message, answer in acknowledged:
        problem = crash_test.finished_turn_problem(records, message, answer)
        if problem is not None:
            problems.append(f"acknowledged turn {message!r} lost: {problem}")
    return problems + doubled(records)


def said_one_error(stderr: str) -> list[str]:
    """A failed command ends with one ``stowage:`` line and no traceback (warnings logged
    before it are fine)."""
    lines = stderr.strip().splitlines()
    if "Traceback" in stderr or not lines or not lines[-1].startswith("stowage: "):
        return [f"no one-line error at the end of stderr: {stderr[-300:]}"]
    return []


def verdict(tally: Tally, what: str, problems: list[str]) -> bool:
    tally.tried += 1
    if problems:
        tally.failures.append(f"{what}: " + "; ".join(problems))
        progress(f"FAILED {what}: {'; '.join(problems)[:600]}")
        return False
    tally.held += 1
    return True


# -- lying endpoints -------------------------------------------------------------------------


def post_fault(arena: Arena, fault: dict[str, Any]) -> None:
    """``POST /_fake/faults``: the fault for the next round requests (or ``clear``)."""
    body = json.dumps({"when": "round", **fault}).encode()
    request = urllib.request.Request(
        arena.server.root + "/_fake/faults", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def lies(arena: Arena, count: int) -> None:
    """The first ``count`` lies once each, in one session that must go on after all of them."""
    if count <= 0:
        return
    cwd = arena.workspace("lies")
    (cwd / "README.md").write_text(README + "A long appendix. " * 20_000)  # a huge answer
    session = arena.new_id("lie")
    acked: list[tuple[str, str | None]] = []
    first = f"{session}: read the readme"
    done = launch(stowage(arena, "run", "--session", session, *model(arena), first), cwd)
    if done.status != EXIT_OK:
        arena.tally("lie: first turn").failures.append(f"exit {done.status}: {done.stderr[-400:]}")
        arena.tally("lie: first turn").tried += 1
        return
    acked.append((first, done.stdout.strip()))
    for name, fault, statuses, options in LIES[:count]:
        message = f"{session}: {name}: read the readme again"
        post_fault(arena, fault)
        done = launch(stowage(arena, "resume", session, *model(arena), *options, message), cwd)
        post_fault(arena, {"clear": True})
        arena.tally(f"lie: {name}").outcomes[f"exit {done.status}"] += 1
        problems = []
        if done.status not in statuses:
            expected = " or ".join(map(str, sorted(statuses)))
            problems.append(f"exited {done.status}, not {expected}: {done.stderr.strip()[-300:]}")
        elif done.status != EXIT_OK:
            problems += said_one_error(done.stderr)
        if done.acknowledged:
            acked.append((message, done.stdout.strip()))
        problems += audit(arena, session, acked, cli_check=False)
        verdict(arena.tally(f"lie: {name}"), f"{arena.kind} lie {name!r}", problems)
    last = f"{session}: after the lies, list the files"
    done = launch(stowage(arena, "resume", session, *model(arena), last), cwd)
    problems = [] if done.status == EXIT_OK else [f"exited {done.status}: {done.stderr[-300:]}"]
    acked.append((last, done.stdout.strip()))
    problems += audit(arena, session, acked, cli_check=True)
    verdict(arena.tally("lie: the session goes on"), f"{arena.kind} after the lies", problems)


# -- kills -----------------------------------------------------------------------------------


@dataclass
class Story:
    """A session the kills take turns from, and the turns it acknowledged."""

    id: str
    acked: list[tuple[str, str | None]] = field(default_factory=list)
    turns: int = 0
    mode: tuple[str, ...] = ()

    def message(self, what: str) -> str:
        self.turns += 1
        return f"{self.id} turn {self.turns}: {what}"


def kill_moment(arena: Arena, kind: str) -> float:
    return arena.rng.uniform(0.0, arena.lengths.get(kind, 2.5))


def go_on(arena: Arena, story: Story, cwd: Path, patience: float) -> list[str]:
    """The killed session's next turn: it must be taken, and answered."""
    message = story.message("go on after the kill and list the files")
    argv = stowage(arena, "resume", story.id, *model(arena), *story.mode, message)
    done = until_free(arena, argv, cwd, patience=patience)
    if done.status != EXIT_OK:
        return [f"the resume after the kill exited {done.status}: {done.stderr[-400:]}"]
    story.acked.append((message, done.stdout.strip()))
    learn(arena, "resume", done)
    return []


def patience(arena: Arena) -> float:
    return 45.0 if arena.kind == "postgresql" else 10.0


def kill_turn(arena: Arena, story: Story, command: str) -> None:
    """Kill ``run`` (a new session) or ``resume`` (of ``story``) at a random moment."""
    cwd = arena.workspace("kills")
    if command == "run":
        message = story.message("read the alpha file")
        argv = stowage(arena, "run", "--session", story.id, *model(arena), *story.mode, message)
    else:
        message = story.message("check the beta file")
        argv = stowage(arena, "resume", story.id, *model(arena), *story.mode, message)
    delay = kill_moment(arena, command)
    done = launch(argv, cwd, kill_after=delay)
    learn(arena, command, done)
    arena.tally(f"kill {command}").land(done)
    problems: list[str] = []
    if done.status is not None:  # it ended first: an ordinary turn
        if done.status != EXIT_OK:
            problems.append(f"unkilled {command} exited {done.status}: {done.stderr[-400:]}")
        else:
            story.acked.append((message, done.stdout.strip()))
    if records_of(arena, story.id) is None and not story.acked:
        # killed before the session was made: nothing to check, the run starts over
        story.turns = 0
        arena.tally(f"kill {command}").outcomes["before the session existed"] += 1
        verdict(arena.tally(f"kill {command}"), f"{arena.kind} kill {command}", problems)
        return
    problems += audit(arena, story.id, story.acked, cli_check=True)
    problems += go_on(arena, story, cwd, patience(arena))
    problems += audit(arena, story.id, story.acked, cli_check=False)
    what = f"{arena.kind} kill {command} of {story.id} after {delay:.2f} s"
    verdict(arena.tally(f"kill {command}"), what, problems)


def kill_approve(arena: Arena) -> None:
    """A call waits for approval; ``approve`` is killed; approvals are given until the turn
    is done; nothing applied twice, nothing claimed and missing."""
    tally = arena.tally("kill approve")
    session = arena.new_id("approve")
    cwd = arena.workspace(session)
    acting = ["--model", "scripted", "--sandbox", "workspace-write", "--approval", "untrusted"]
    done = launch(stowage(arena, "run", "--session", session, *acting, crash_acting.ASK), cwd)
    waiting = re.search(r"awaiting approval: call (\S+): ", done.stderr)
    if done.status != EXIT_OK or waiting is None:
        verdict(tally, f"{arena.kind} approve {session}", [f"no call waits: {done.stderr[-400:]}"])
        return
    delay = kill_moment(arena, "approve")
    killed = launch(stowage(arena, "approve", session, waiting[1]), cwd, kill_after=delay)
    learn(arena, "approve", killed)
    tally.land(killed)
    problems = audit(arena, session, [], cli_check=True)
    for _ in range(6):  # approve what waits until the turn is done
        pending = awaiting_approval_ids(arena.store, session)
        if not pending:
            break
        answer = until_free(
            arena, stowage(arena, "approve", session, pending[0]), cwd, patience=patience(arena)
        )
        if answer.status != EXIT_OK:
            problems.append(f"approve {pending[0]} exited {answer.status}: {answer.stderr[-300:]}")
            break
    else:
        problems.append("calls still wait for approval after 6 approvals")
    # the session goes on (and a call the kill left open gets its "interrupted" output)
    after = f"{session}: go on after the approvals"
    done = until_free(
        arena, stowage(arena, "resume", session, after), cwd, patience=patience(arena)
    )
    if done.status != EXIT_OK:
        problems.append(
            f"the resume after the approvals exited {done.status}: {done.stderr[-300:]}"
        )
    records = logged_records(arena.store, session)
    figures: collections.Counter[str] = collections.Counter()
    problems += crash_acting.audit(records, cwd, figures)
    acked = [(after, done.stdout.strip())] if done.acknowledged else []
    problems += audit(arena, session, acked, cli_check=True)
    verdict(tally, f"{arena.kind} kill approve of {session} after {delay:.2f} s", problems)


def logged_records(store_spec: str, session: str) -> list[Any]:
    found = anyio.run(crash_acting.read, store_spec, session)
    return [] if found is None else found[0]


def awaiting_approval_ids(store_spec: str, session: str) -> list[str]:
    """The ids of the calls of ``session`` that wait for a person's approval."""
    records = logged_records(store_spec, session)
    return [call.call_id for call in replay(session, tuple(records)).awaiting_approval]


ARCHIVE_MODE = ("--compact-threshold", "800")


def kill_archive(arena: Arena, story: Story) -> None:
    """A turn that compacts, then ``archive`` killed while it moves what the compaction
    covers; ``archive`` again, and every acknowledged turn is still there."""
    tally = arena.tally("kill archive")
    cwd = arena.workspace("kills")
    for _ in range(2):  # two turns: the threshold session compacts about every other one
        message = story.message("summarise the alpha and beta files")
        head = ["resume", story.id] if story.acked else ["run", "--session", story.id]
        done = launch(stowage(arena, *head, *model(arena), *ARCHIVE_MODE, message), cwd)
        if done.status != EXIT_OK:
            verdict(tally, f"{arena.kind} archive turn", [f"exited {done.status}: {done.stderr}"])
            return
        story.acked.append((message, done.stdout.strip()))
    archive = stowage(arena, "archive", "--older-than", "0.001", "--session", story.id)
    delay = kill_moment(arena, "archive")
    killed = launch(archive, arena.root, kill_after=delay)
    learn(arena, "archive", killed)
    tally.land(killed)
    problems = audit(arena, story.id, story.acked, cli_check=True)
    again = launch(archive, arena.root)
    if again.status != EXIT_OK:
        problems.append(f"archive after the kill exited {again.status}: {again.stderr[-300:]}")
    learn(arena, "archive", again)
    problems += go_on(arena, story, cwd, patience(arena))
    problems += audit(arena, story.id, story.acked, cli_check=True)
    verdict(tally, f"{arena.kind} kill archive of {story.id} after {delay:.2f} s", problems)


def kill_worker(arena: Arena) -> None:
    """A message queued; ``stowage worker`` killed while it serves it; the next worker
    answers it once."""
    tally = arena.tally("kill worker")
    cwd = arena.workspace("kills")
    session = arena.new_id("worker")
    message = f"{session}: read the alpha file"
    message_id = secrets.token_hex(8)
    send = stowage(arena, "send", session, message, "--create", "--message-id", message_id)
    queued = launch(send, cwd)
    worker = stowage(arena, "worker", *model(arena), "--lease-ttl", "2", "--poll-interval", "0.2")
    worker += ["--idle-timeout", "0", "--log-format", "json"]
    delay = kill_moment(arena, "worker")
    killed = launch(worker, cwd, kill_after=delay)
    tally.land(killed)
    problems = [] if queued.status == EXIT_OK else [f"send exited {queued.status}"]
    if killed.status is not None:
        problems.append(
            f"the worker exited {killed.status} before its kill: {killed.stderr[-300:]}"
        )
    env = crash_test.child_env(FAST_FAILURE)
    with tempfile.TemporaryFile() as log:
        rescuer = subprocess.Popen(worker, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            answer = launch([*send, "--wait", "--timeout", "60"], cwd)
        finally:
            rescuer.send_signal(signal.SIGTERM)
            try:
                rescuer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                rescuer.kill()
                rescuer.wait()
    if answer.status != EXIT_OK:
        problems.append(f"send --wait exited {answer.status}: {answer.stderr[-300:]}")
    acked = [(message, answer.stdout.strip() or None)] if answer.acknowledged else []
    problems += audit(arena, session, acked, cli_check=True)
    arena.lengths["worker"] = max(arena.lengths.get("worker", 0.0), 4.0)
    verdict(tally, f"{arena.kind} kill worker serving {session} after {delay:.2f} s", problems)


def unavailable(kind: str, command: str) -> str | None:
    """Why ``command`` cannot be killed on a store of ``kind`` here; None: it can."""
    if command == "archive" and kind == "jsonl":
        return "archive needs an SQL store (a JSONL store refuses it, exit 2)"
    if command == "worker" and kind != "postgresql":
        return "stowage worker serves a PostgreSQL store only"
    if command == "approve" and shutil.which("bwrap") is None:
        return "bubblewrap is not installed: the calls that act cannot run"
    return None


def kills(arena: Arena, count: int, deadline: float) -> None:
    """``count`` kills, round robin over the commands the store can run."""
    runnable = []
    for command in KILLED:
        why = unavailable(arena.kind, command)
        if why is None:
            runnable.append(command)
        else:
            arena.tally(f"kill {command}").skipped = why
    stories: dict[str, Story] = {}

    def story(command: str, mode: tuple[str, ...] = ()) -> Story:
        current = stories.get(command)
        if command == "run" or current is None or current.turns >= SESSION_TURNS:
            current = stories[command] = Story(arena.new_id(command), mode=mode)
        return current

    for n in range(count):
        if time.monotonic() > deadline:
            # a shortfall, said with the figures, not a failure: the kills done are counted
            arena.tally("kills: time limit").notes.append(f"stopped after {n} of {count} kills")
            progress(f"{arena.kind}: time limit after {n} of {count} kills")
            return
        command = runnable[n % len(runnable)]
        if command == "approve":
            kill_approve(arena)
        elif command == "archive":
            kill_archive(arena, story("archive", ARCHIVE_MODE))
        elif command == "worker":
            kill_worker(arena)
        else:
            current = story(command)
            if command == "resume" and not current.acked:
                prepared = current.message("list the files")
                done = launch(
                    stowage(arena, "run", "--session", current.id, *model(arena), prepared),
                    arena.workspace("kills"),
                )
                learn(arena, "run", done)
                if done.status == EXIT_OK:
                    current.acked.append((prepared, done.stdout.strip()))
            kill_turn(arena, current, command)
        if (n + 1) % 10 == 0 or n + 1 == count:
            held = sum(t.held for p, t in arena.tallies.items() if p.startswith("kill "))
            progress(f"{arena.kind}: {n + 1} of {count} kills, {held} held")


# -- racing writers --------------------------------------------------------------------------


def race(arena: Arena, writers: int) -> None:
    """``writers`` resumes of one session at once, the first model request stalled so the
    winner holds the session while the others start."""
    cwd = arena.workspace("race")
    session = arena.new_id("race")
    first = f"{session}: list the files"
    done = launch(stowage(arena, "run", "--session", session, *model(arena), first), cwd)
    acked: list[tuple[str, str | None]] = [(first, done.stdout.strip())]
    post_fault(arena, {"fault": "delay", "delay": 10.0})
    messages = [f"{session}: writer {n} reads the beta file" for n in range(writers)]
    env = crash_test.child_env(FAST_FAILURE)
    procs = [
        subprocess.Popen(
            stowage(arena, "resume", session, *model(arena), m),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for m in messages
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    post_fault(arena, {"clear": True})
    statuses = [p.returncode for p in procs]
    problems: list[str] = []
    winners = [n for n, s in enumerate(statuses) if s == EXIT_OK]
    # one writer at a time: a resume that met the holder is refused as busy; one that started
    # after the holder ended (a slow machine starts four interpreters slowly) goes on after it
    if not winners or any(s not in (EXIT_OK, EXIT_BUSY) for s in statuses):
        problems.append(f"exit statuses {statuses}: not each 0 or {EXIT_BUSY}, at least one 0")
    records = records_of(arena, session) or []
    logged = [
        m for m in messages
        for r in records
        if r["type"] == "item" and r["item"]["type"] == "user" and r["item"]["text"] == m
    ]  # fmt: skip
    if sorted(logged) != sorted(messages[n] for n in winners):
        problems.append(f"logged {len(logged)} racing messages, not each winner's once")
    for n in winners:
        acked.append((messages[n], outputs[n][0].strip()))
    problems += audit(arena, session, acked, cli_check=True)
    tally = arena.tally("race resume")
    tally.outcomes[f"{len(winners)} went on"] += 1  # more than one: they did not overlap
    verdict(tally, f"{arena.kind} race of {writers} resumes", problems)


def races(arena: Arena, writers: int, times: int) -> None:
    for _ in range(times):
        race(arena, writers)


# -- a full disk -----------------------------------------------------------------------------


def namespaces_allowed(root: Path) -> str | None:
    """None when a tmpfs can be mounted in a mount namespace of our own, else why not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "unshare is not installed"
    probe = root / "mount-probe"
    probe.mkdir(exist_ok=True)
    done = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs -o size=64k tmpfs {probe}"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return f"mounting a tmpfs in a mount namespace is not permitted: {done.stderr.strip()}"
    return None


def disk_full(arena: Arena, rounds: int) -> None:
    """Each round in a namespace of its own: this script again (``--disk-round``) on the
    tmpfs, which reports what it found as JSON."""
    if rounds <= 0:
        return
    tally = arena.tally("disk full")
    if arena.kind == "postgresql":
        tally.skipped = "the PostgreSQL server's disk is not this process's to fill"
        return
    why = namespaces_allowed(arena.root)
    if why is not None:
        tally.skipped = why
        return
    for n in range(rounds):
        disk = arena.root / f"disk-{n}"
        disk.mkdir()
        report = arena.root / f"disk-{n}.json"
        inner = [sys.executable, __file__, "--disk-round", str(disk), "--store-kinds", arena.kind,
                 "--base-url", arena.server.url, "--json", str(report)]  # fmt: skip
        script = f'mount -t tmpfs -o size=256k tmpfs {disk} && exec "$@"'
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *inner],
            cwd=arena.root, env=crash_test.child_env(FAST_FAILURE), capture_output=True,
            text=True, timeout=300, check=False,
        )  # fmt: skip
        found = json.loads(report.read_text()) if report.exists() else {}
        tally.notes += found.get("notes", [])
        problems = found.get("problems", [f"the round reported nothing: {done.stderr[-600:]}"])
        verdict(tally, f"{arena.kind} disk full, round {n + 1}", problems)


def disk_round(disk: Path, kind: str, base_url: str) -> dict[str, list[str]]:
    """Inside the namespace: one acknowledged turn, the disk filled, a turn that must exit 5,
    a check that must pass on the full disk, space freed, a resume that must pass."""
    store = str(disk / "st") if kind == "jsonl" else f"sqlite:///{disk / 'st.db'}"
    work = disk.parent / (disk.name + "-work")
    work.mkdir(exist_ok=True)
    (work / "README.md").write_text(README)
    env = crash_test.child_env(FAST_FAILURE)
    args = ["--model", MODEL, "--base-url", base_url, "--api-key", API_KEY]

    def cli(*words: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "stowage.cli", words[0], "--store", store, *words[1:]]
        return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)

    problems: list[str] = []
    first = "disk: list the files"
    done = cli("run", "--session", "full", *args, first)
    if done.returncode != 0:
        return {"problems": [f"the first turn exited {done.returncode}: {done.stderr[-300:]}"]}
    acked: list[tuple[str, str | None]] = [(first, done.stdout.strip())]
    filler = disk / "filler"
    with contextlib.suppress(OSError), filler.open("ab", buffering=0) as f:
        while True:
            f.write(b"x" * 512)
    full = cli("resume", "full", *args, "disk: " + "fill the disk " * 2000)
    if full.returncode != EXIT_STORE:
        problems.append(
            f"the turn on a full disk exited {full.returncode}, not 5: {full.stderr[-300:]}"
        )
    else:
        problems += said_one_error(full.stderr)
    notes = [] if "disk is full" in full.stderr else [f"the full disk not named: {full.stderr}"]
    check = cli("check", "full")
    if check.returncode == EXIT_STORE and not said_one_error(check.stderr):
        # a documented status: the store cannot even be read on a full disk (SQLite's WAL
        # index); said, not counted: the check once space is back must be clean
        notes.append(f"stowage check on the full disk exited 5: {check.stderr.strip()}")
    elif check.returncode != 0:
        problems.append(
            f"stowage check on the full disk exited {check.returncode}: {check.stdout}{check.stderr}"
        )
    filler.unlink()
    check = cli("check", "full")
    if check.returncode != 0:
        problems.append(
            f"stowage check once space was back exited {check.returncode}: {check.stdout}{check.stderr}"
        )
    again = "disk: space is back, list the files"
    done = cli("resume", "full", *args, again)
    if done.returncode != 0:
        problems.append(
            f"the resume once space was freed exited {done.returncode}: {done.stderr[-300:]}"
        )
    else:
        acked.append((again, done.stdout.strip()))
    read = crash_test.read_log(store, "full")
    records = [] if read is None else read[0]
    problems += crash_test.verify_log(store, "full")
    for message, answer in acked:
        problem = crash_test.finished_turn_problem(records, message, answer)
        if problem:
            problems.append(f"acknowledged turn {message!r} lost: {problem}")
    return {"problems": problems + doubled(records), "notes": notes}


# -- the run ---------------------------------------------------------------------------------


def store_spec(kind: str, root: Path, schema: str) -> str:
    if kind == "jsonl":
        return str(root / "jsonl")
    if kind == "sqlite":
        return f"sqlite:///{root / 'store.db'}"
    return f"{PG_DSN}?schema={schema}"


def drop_schema(spec: str) -> None:
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    schema = spec.rsplit("schema=", 1)[1]

    async def drop() -> None:
        conn = await asyncpg.connect(PG_DSN, timeout=5)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    anyio.run(drop)


@contextlib.contextmanager
def arena_for(kind: str, root: Path, seed: int, args: argparse.Namespace) -> Iterator[Arena]:
    run_id = f"a{seed}x{secrets.token_hex(3)}"
    keep, schema = args.keep, args.pg_schema or f"adversary_{run_id}"
    (root / kind).mkdir()
    server = crash_test.FakeServer(root / kind, 0, 0.0, seed)
    arena = Arena(kind, store_spec(kind, root / kind, schema), root / kind, server,
                  random.Random(seed), run_id)  # fmt: skip
    try:
        yield arena
    finally:
        server.close()
        if kind == "postgresql" and not keep and args.pg_schema is None:
            with contextlib.suppress(Exception):
                drop_schema(arena.store)


def table(arenas: list[Arena]) -> list[str]:
    rows = [("store", "probe", "tried", "held", "failed", "note")]
    for arena in arenas:
        for probe, t in arena.tallies.items():
            note = f"skipped: {t.skipped}" if t.skipped else ""
            if t.outcomes:
                note = ", ".join(f"{k}: {v}" for k, v in sorted(t.outcomes.items()))
            rows.append((arena.kind, probe, str(t.tried), str(t.held), str(t.failed), note))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=False))
        )
        + ("  " + r[5] if r[5] else "")
        for r in rows
    ]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store-kinds", default="jsonl,sqlite", help="of jsonl, sqlite, postgresql")
    p.add_argument("--kills", type=int, default=8, help="kills a store (default 8)")
    p.add_argument("--racers", type=int, default=4, help="resumes racing (default 4)")
    p.add_argument("--races", type=int, default=1, help="races a store (default 1)")
    p.add_argument("--disk-rounds", type=int, default=1, help="full disks a store (default 1)")
    p.add_argument(
        "--lies", type=int, default=8, help=f"lies a store, of {len(LIES)} (default 8; 0: none)"
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--max-seconds", type=float, default=3600.0, help="stop the kills by then")
    p.add_argument("--keep", action="store_true", help="keep the files (and the schema)")
    p.add_argument("--verbose", action="store_true", help="every command, its exit and seconds")
    p.add_argument(
        "--pg-schema",
        default=None,
        help="PostgreSQL: this schema, kept (default: a new one, dropped)",
    )
    p.add_argument("--disk-round", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--base-url", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.store_kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in STORE_KINDS]
    if unknown or not kinds:
        p.error(f"--store-kinds {args.store_kinds!r}: choose among {', '.join(STORE_KINDS)}")
    args.kinds = kinds
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.disk_round is not None:  # inside the mount namespace (see disk_full)
        problems = disk_round(args.disk_round, args.kinds[0], args.base_url)
        args.json.write_text(json.dumps(problems))
        return 0
    global VERBOSE
    VERBOSE = args.verbose
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="stowage-adversary-"))
    arenas: list[Arena] = []
    progress(f"seed {seed}, stores {', '.join(args.kinds)}, files in {root}")
    steps: list[tuple[str, Callable[[Arena], None]]] = [
        ("lying endpoints", lambda a: lies(a, args.lies)),
        ("kills", lambda a: kills(a, args.kills, started + args.max_seconds)),
        ("racing writers", lambda a: races(a, args.racers, args.races)),
        ("a full disk", lambda a: disk_full(a, args.disk_rounds)),
    ]
    errors: list[str] = []

    def attack(n: int, kind: str) -> None:
        """One store's probes, in a thread of its own: the stores' waits overlap."""
        try:
            with arena_for(kind, root, seed + n, args) as arena:
                arenas.append(arena)
                for name, step in steps:
                    progress(f"{kind}: {name}")
                    step(arena)
        except BaseException as exc:  # reported with the figures
            errors.append(f"{kind}: {exc!r}")
            progress(f"{kind}: stopped by {exc!r}")

    threads = [
        threading.Thread(target=attack, args=(n, kind), name=f"adversary-{kind}")
        for n, kind in enumerate(args.kinds)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    arenas.sort(key=lambda a: args.kinds.index(a.kind))
    elapsed = time.monotonic() - started
    tallies = [t for a in arenas for t in a.tallies.values()]
    ok = not errors and all(t.failed == 0 for t in tallies) and sum(t.tried for t in tallies) > 0
    for line in table(arenas):
        print(line)
    print(f"{sum(t.tried for t in tallies)} tried, {sum(t.failed for t in tallies)} failed, "
          f"{elapsed:.0f} s, seed {seed}: " + ("OK" if ok else "FAILED"))  # fmt: skip
    for error in errors:
        print(f"error: the run stopped early: {error}")
    for arena in arenas:
        for probe, t in arena.tallies.items():
            for note in sorted(set(t.notes)):
                print(f"note ({arena.kind}, {probe}): {note}")
    for arena in arenas:
        for probe, t in arena.tallies.items():
            for failure in t.failures[:5]:
                print(f"failure ({arena.kind}, {probe}): {failure[:1000]}")
    if args.json is not None:
        figures = {
            "seed": seed,
            "seconds": round(elapsed, 1),
            "ok": ok,
            "errors": errors,
            "stores": {
                a.kind: {
                    p: {
                        "tried": t.tried,
                        "held": t.held,
                        "failed": t.failed,
                        "skipped": t.skipped,
                        "notes": t.notes,
                        "outcomes": dict(t.outcomes),
                        "failures": t.failures,
                    }
                    for p, t in a.tallies.items()
                }
                for a in arenas
            },
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if ok and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"files kept in {root}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
