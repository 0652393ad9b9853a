"""Crash test for the tools that act: SIGKILL ``stowage run`` while it writes, edits and runs
commands, resume, and prove that nothing was applied twice and no result was lost.

    python scripts/crash_acting.py --kills 40 --store /tmp/acting-logs
    python scripts/crash_acting.py --kills 20 --store sqlite:////tmp/acting.db --seed 7

Each attempt is one session in a workspace of its own: ``stowage run`` with the offline
scripted model, ``--sandbox workspace-write --approval never``, asked to "write a note, edit
it, then run a command" (a ``write_file`` of ``notes/M.md``, an ``edit_file`` of it, and a
``run_command`` that appends its mark to ``scripted-runs.log``: every call's effect is its
own and can be counted). The process is killed at one aimed moment:

- ``write``, ``edit``, ``run``: the moment that call's effect shows in the workspace (the
  note appears, its first line changes, the runs file grows), plus 0-5 ms: the effect is
  there, its output most likely not logged yet;
- ``random``: anywhere in the run (0 to the length of an unkilled run, measured first).

Then ``stowage resume ID`` finishes the open turn (or ``run`` starts over when the kill came
before the session was made), and the audit reads the log and the workspace:

- doubles: a command mark in ``scripted-runs.log`` more than once (a command run twice);
- lost: an acting call without an output, or an output that says a call was applied (its
  normal output, or "applied" after a restart) while the workspace does not show it, or "not
  applied" while it does;
- check: ``check_log`` problems in the resumed log.

It prints the figures (and writes them with ``--json``): kills by aim, what the resume
recorded for the killed calls (applied, not applied, interrupted with or without its printed
output), doubles, lost, check problems. Exit 0 when kills done == asked and nothing failed,
1 otherwise, 2 when it cannot run (bubblewrap missing, a bad store).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stowage.core import FunctionCall, FunctionCallOutput, ItemRecord
from stowage.model._brain import SCRIPTED_RUNS
from stowage.policy import check_log
from stowage.storage import open_store

ASK = "write a note, edit it, then run a command"
AIMS = ("write", "edit", "run", "random")
ACTING = ("write_file", "edit_file", "run_command")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20, help="kills to land (default 20)")
    p.add_argument("--store", required=True, help="a JSONL directory or sqlite:///PATH")
    p.add_argument("--seed", type=int, default=20261207)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--max-seconds", type=float, default=600, help="stop by then (default 600)")
    p.add_argument("--keep", action="store_true", help="keep the workspaces")
    return p.parse_args(argv)


def cli(store: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "stowage.cli", *args[:1], "--store", store, *args[1:]]


def run_args(store: str, session: str) -> list[str]:
    acting = ["--model", "scripted", "--sandbox", "workspace-write", "--approval", "never"]
    return cli(store, "run", *acting, "--session", session, ASK)


def env() -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "STOWAGE_"))}
    return {**kept, "PYTHONUNBUFFERED": "1"}


def effects(workspace: Path) -> dict[str, bool]:
    """Which of the turn's effects show in ``workspace`` now."""
    notes = list((workspace / "notes").glob("*.md")) if (workspace / "notes").is_dir() else []
    edited = False
    for note in notes:
        with contextlib.suppress(OSError):
            edited = edited or note.read_text().startswith("edited by")
    runs = workspace / SCRIPTED_RUNS
    return {"write": bool(notes), "edit": edited, "run": runs.exists() and runs.stat().st_size > 0}


def run_once(argv: list[str], workspace: Path, aim: str, delay: float, rng: random.Random) -> str:
    """Start ``argv`` in ``workspace`` and kill it at the aimed moment: what happened
    (``killed``, or ``finished`` when the moment never came)."""
    process = subprocess.Popen(
        argv, cwd=workspace, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    started = time.monotonic()
    try:
        while process.poll() is None:
            if aim == "never":
                hit = False
            elif aim == "random":
                hit = time.monotonic() - started >= delay
            else:
                hit = effects(workspace)[aim]
                if hit:
                    time.sleep(rng.uniform(0, 0.005))
            if hit:
                process.send_signal(signal.SIGKILL)
                process.wait()
                return "killed"
            time.sleep(0.001)
        return "finished"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


async def read(store_spec: str, session: str) -> tuple[list[Any], list[str]] | None:
    """The session's log and the problems ``check_log`` finds in it; None: no session."""
    store = open_store(store_spec)
    try:
        if not await store.exists(session):
            return None
        full = (await store.read(session)).records
        tail = (await store.read_tail(session)).records
    finally:
        await store.aclose()
    report = check_log(session, full, tail)
    return list(full), list(report.problems)


def audit(records: list[Any], workspace: Path, figures: collections.Counter[str]) -> list[str]:
    """What the log claims against what the workspace holds; the failures found."""
    failures: list[str] = []
    calls = {
        r.item.call_id: r.item
        for r in records
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall) and r.item.name in ACTING
    }
    outputs = {
        r.item.call_id: r.item
        for r in records
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    }
    runs_file = workspace / SCRIPTED_RUNS
    runs = collections.Counter(runs_file.read_text().split() if runs_file.exists() else [])
    for mark, times in runs.items():
        if times > 1:
            failures.append(f"double: command {mark} ran {times} times")
            figures["doubles"] += 1
    for call_id, call in calls.items():
        output = outputs.get(call_id)
        if output is None:
            failures.append(f"lost: {call.name} {call_id} has no output")
            figures["lost"] += 1
            continue
        said = output.output
        kind = (
            "applied"
            if said.startswith("applied:")
            else "not applied"
            if said.startswith("not applied:")
            else "interrupted, printed"
            if said.startswith("interrupted") and "What it had printed" in said
            else "interrupted"
            if said.startswith("interrupted")
            else "error"
            if output.is_error
            else "done"
        )
        if kind != "done":
            figures[f"{call.name} {kind}"] += 1
        problem = _contradiction(call, kind, said, workspace, runs)
        if problem:
            failures.append(f"lost: {call.name} {call_id}: {problem}")
            figures["lost"] += 1
    return failures


def _contradiction(
    call: FunctionCall, kind: str, said: str, workspace: Path, runs: collections.Counter[str]
) -> str | None:
    arguments = json.loads(call.arguments)
    if call.name == "run_command":
        mark = arguments["command"].split()[1]
        if kind == "done" and runs[mark] != 1:
            return f"its output says it ran ({said[:40]!r}) but {mark} is in the runs file {runs[mark]} times"
        return None
    target = workspace / arguments["path"]
    text = target.read_text() if target.is_file() else None
    if call.name == "write_file":
        if kind in ("done", "applied") and text is None:
            return "recorded as written, and the file is not there"
        if kind == "not applied" and text is not None:
            return "recorded as not applied, and the file is there"
        return None
    if kind in ("done", "applied") and not (text or "").startswith(arguments["new"]):
        return "recorded as applied, and the file does not hold the edit"
    if kind == "not applied" and (text or "").startswith(arguments["new"]):
        return "recorded as not applied, and the file holds the edit"
    return None


def finish(store: str, session: str, workspace: Path, log: Path) -> int:
    """Resume the killed session until its turn is done (or run it again when the kill came
    before the session was made): the last exit status."""
    exists = asyncio.run(read(store, session)) is not None
    argv = cli(store, "resume", session, "go on") if exists else run_args(store, session)
    done = subprocess.run(argv, cwd=workspace, env=env(), capture_output=True, text=True)
    if done.returncode != 0:
        log.write_text(f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}")
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if shutil.which("bwrap") is None:
        print("crash_acting: bubblewrap is not installed (apt install bubblewrap)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="crash-acting-"))
    store = args.store if "://" in args.store else str(Path(args.store).resolve())
    deadline = time.monotonic() + args.max_seconds
    figures: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    # one unkilled run: its length bounds the random kills, and it must audit clean
    first = root / "unkilled"
    first.mkdir()
    started = time.monotonic()
    if run_once(run_args(store, f"act-{args.seed}-0"), first, "never", 0, rng) != "finished":
        print("crash_acting: the unkilled run did not finish", file=sys.stderr)
        return 2
    length = time.monotonic() - started
    found = asyncio.run(read(store, f"act-{args.seed}-0"))
    if found is None:
        print("crash_acting: the unkilled run made no session (see its output)", file=sys.stderr)
        return 2
    failures += audit(found[0], first, collections.Counter()) + found[1]
    attempt = 0
    while figures["kills"] < args.kills and not failures and time.monotonic() < deadline:
        attempt += 1
        session = f"act-{args.seed}-{attempt}"
        workspace = root / session
        workspace.mkdir()
        aim = AIMS[attempt % len(AIMS)]
        if (
            run_once(run_args(store, session), workspace, aim, rng.uniform(0, length), rng)
            != "killed"
        ):
            figures["missed"] += 1
            continue
        figures["kills"] += 1
        figures[f"aimed at {aim}"] += 1
        status = finish(store, session, workspace, root / f"{session}.failed.txt")
        if status != 0:
            failures.append(
                f"{session}: the resume exited {status} (see {root}/{session}.failed.txt)"
            )
            break
        found = asyncio.run(read(store, session))
        assert found is not None
        records, problems = found
        failures += [f"{session}: check: {p}" for p in problems]
        figures["check problems"] += len(problems)
        failures += [f"{session}: {f}" for f in audit(records, workspace, figures)]
        print(f"kill {figures['kills']}/{args.kills} ({aim}): ok" if not failures else failures[-1])
    figures.setdefault("doubles", 0)
    figures.setdefault("lost", 0)
    figures.setdefault("check problems", 0)
    print("crash_acting figures:")
    for name in sorted(figures):
        print(f"  {name}: {figures[name]}")
    for failure in failures:
        print(f"FAILED {failure}")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "failures": failures}, indent=2))
    ok = not failures and figures["kills"] >= args.kills
    if ok and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    elif not ok:
        print(f"kept the workspaces in {root}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
