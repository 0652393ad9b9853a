"""How long the ``stowage`` command takes to start: whole processes, timed from outside.

    python scripts/bench_startup.py            # 10 runs of each command
    python scripts/bench_startup.py -n 20 --json startup.json

Times ``stowage --version``, ``stowage --help``, and ``stowage list``, ``stowage show ID`` and
``stowage context ID`` on a temporary JSONL store holding one session the offline demo wrote,
and a bare ``python -c pass`` for the interpreter's own start, each ``-n`` times after one
warm-up run (taking turns, so a drifting load slows them alike). It prints the minimum, median
and maximum wall time in ms, the median CPU time (user + system), and the goal and whether the
CPU median meets it: CPU time is what starting costs, and it is far steadier than wall time on a
shared, busy machine, where a process waits for a core as long as it runs.

The ``stowage`` command is the one next to this interpreter (the venv's), else the one on PATH.
The runs keep Python's bytecode cache (``PYTHONDONTWRITEBYTECODE`` is removed from their
environment, and the cache goes to a temporary ``PYTHONPYCACHEPREFIX``, not into the tree): a
user's installed command has its ``.pyc`` files, and compiling the sources on every start would
time the compiler. Quote the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

#: the goals of issue "a command that starts at once", in seconds of CPU time (user + system)
#: per run (None: the reference)
GOALS: dict[str, float | None] = {
    "python -c pass": None,
    "stowage --version": 0.15,
    "stowage --help": 0.15,
    "stowage list": 0.25,
    "stowage show ID": 0.25,
    "stowage context ID": 0.25,
}


def stowage_command() -> list[str]:
    """The ``stowage`` console script beside this interpreter, else on PATH, else ``-m``."""
    beside = Path(sys.executable).with_name("stowage")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("stowage")
    return [found] if found else [sys.executable, "-m", "stowage"]


#: where the runs keep their bytecode cache (set by ``main``, a temporary folder)
_PYCACHE: list[str] = []


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if _PYCACHE:
        env.setdefault("PYTHONPYCACHEPREFIX", _PYCACHE[0])
    env["NO_COLOR"] = "1"
    return env


def make_store(stowage: list[str], where: Path, sessions: int = 1) -> tuple[Path, str]:
    """A JSONL store with ``sessions`` sessions of the offline demo; one session's id."""
    store = where / "store"
    for _ in range(sessions):
        subprocess.run(
            [*stowage, "demo", "--turns", "4", "--store", str(store)],
            cwd=where, env=environment(), check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    logs = sorted(store.glob("*.jsonl"))
    if len(logs) != sessions:
        raise SystemExit(f"expected {sessions} sessions in {store}, found {len(logs)}")
    return store, logs[0].stem


def run_once(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``argv``; a failing run stops all."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {err.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime


def time_runs(
    commands: dict[str, list[str]], runs: int, cwd: Path
) -> dict[str, list[tuple[float, float]]]:
    """``runs`` (wall, cpu) figures of each command after one warm-up run of each (it may write
    the bytecode cache). The commands take turns, one run each per round, so that a machine
    whose load drifts slows them alike."""
    env = environment()
    for argv in commands.values():
        run_once(argv, cwd, env)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            figures[name].append(run_once(argv, cwd, env))
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=10, help="runs of each (default 10)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    stowage = stowage_command()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        where = Path(tmp)
        _PYCACHE[:] = [str(where / "pycache")]
        store, session_id = make_store(stowage, where)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "stowage --version": [*stowage, "--version"],
            "stowage --help": [*stowage, "--help"],
            "stowage list": [*stowage, "list", "--store", str(store)],
            "stowage show ID": [*stowage, "show", session_id, "--store", str(store)],
            "stowage context ID": [*stowage, "context", session_id, "--store", str(store)],
        }
        figures = time_runs(commands, args.runs, where)
    rows = []
    for name, runs in figures.items():
        times = [wall for wall, _ in runs]
        goal = GOALS[name]
        cpu = statistics.median(cpu for _, cpu in runs)
        rows.append(
            {
                "command": name,
                "runs": len(times),
                "min_ms": round(min(times) * 1000, 1),
                "median_ms": round(statistics.median(times) * 1000, 1),
                "max_ms": round(max(times) * 1000, 1),
                "median_cpu_ms": round(cpu * 1000, 1),
                "goal_cpu_ms": None if goal is None else round(goal * 1000),
                "met": None if goal is None else cpu <= goal,
            }
        )
    print(
        f"{'command':<20} {'min ms':>8} {'median ms':>10} {'max ms':>8} {'cpu ms':>8} "
        f"{'goal cpu':>8}  met"
    )
    for row in rows:
        goal = "-" if row["goal_cpu_ms"] is None else str(row["goal_cpu_ms"])
        met = "-" if row["met"] is None else ("yes" if row["met"] else "NO")
        print(
            f"{row['command']:<20} {row['min_ms']:>8.1f} {row['median_ms']:>10.1f} "
            f"{row['max_ms']:>8.1f} {row['median_cpu_ms']:>8.1f} {goal:>8}  {met}"
        )
    print(
        f"({args.runs} runs each, in turns, after one warm-up; wall times but 'cpu ms', the "
        "median of user + system time; a goal is met when the CPU median is at most it)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(row["met"] is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
