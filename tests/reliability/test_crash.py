"""Nothing lost, nothing leaked: ``scripts/crash_test.py`` SIGKILLs ``stowage run``/``resume``
at random moments (summary requests, tools, streaming, anywhere) on each store, and after every
kill the log must check clean (once the resume has cut a torn tail), the resume must succeed
and every acknowledged turn must be in the log.

The three runs (about 30 kills on JSONL, 5 on SQLite, 5 on PostgreSQL) go at once, each the
script in its own process with its own fake OpenAI servers; each test waits for its own and
asserts exit 0 and the figures the script printed: kills done == asked, no check failed, no
acknowledged turn lost, no resume failed, no request carrying a tool call without its output.

PostgreSQL is at ``STOWAGE_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``;
the script makes a fresh database for its run and drops it); skipped when none answers, except
under CI (``CI`` set).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest

from ..conftest import slowness

# a net only: the runs' own bound (--max-seconds, scaled by the load) ends them first
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "crash_test.py"
DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
#: the script stops itself by then (times the load per core when the runs start, at most 4):
#: it takes well under it on a quiet machine
MAX_SECONDS = 300


@dataclass
class Run:
    kills: int
    argv: list[str]
    json_path: Path
    proc: subprocess.Popen[str] | None = None
    skip: str = ""
    stdout: str = ""
    stderr: str = ""


def postgres_missing() -> str:
    async def probe() -> None:
        conn = await asyncpg.connect(DSN, timeout=3)
        await conn.close()

    try:
        anyio.run(probe)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {DSN} under CI: {exc}")
        return f"no PostgreSQL at {DSN}: {exc}"
    return ""


def max_seconds() -> int:
    return round(MAX_SECONDS * min(4.0, slowness()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """The three runs, started together; each is waited for by its own test."""
    tmp = tmp_path_factory.mktemp("crash")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONUNBUFFERED"] = "1"
    common = ["--max-seconds", str(max_seconds()), "--seed", "20261201"]
    plans = {
        # JSONL: a torn last line left after one kill in five, as a power cut would
        "jsonl": (30, str(tmp / "logs"), ["--workers", "2", "--tear", "0.2"]),
        "sqlite": (5, f"sqlite:///{tmp / 'logs.db'}", ["--workers", "1"]),
        # a killed writer's lease outlives it by the TTL: five sessions wait for it side by side
        "postgresql": (5, DSN, ["--workers", "1", "--sessions-per-worker", "5"]),
    }
    started: dict[str, Run] = {}
    for kind, (kills, store, extra) in plans.items():
        json_path = tmp / f"{kind}.json"
        argv = [sys.executable, str(SCRIPT), "--kills", str(kills), "--store", store,
                "--json", str(json_path), *common, *extra]  # fmt: skip
        run = Run(kills=kills, argv=argv, json_path=json_path)
        if kind == "postgresql":
            run.skip = postgres_missing()
        if not run.skip:
            run.proc = subprocess.Popen(
                argv, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        started[kind] = run
    try:
        yield started
    finally:
        for run in started.values():
            if run.proc is not None and run.proc.poll() is None:
                run.proc.terminate()  # the script's finally stops its servers and children
                try:
                    run.proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    run.proc.kill()
                    run.proc.communicate()


def figure(stdout: str, pattern: str) -> tuple[int, ...]:
    match = re.search(pattern, stdout, re.MULTILINE)
    assert match, f"no line matching {pattern!r} in:\n{stdout}"
    return tuple(int(g) for g in match.groups())


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgresql"])
def test_crash_at_random_moments_loses_nothing_acknowledged(
    kind: str, runs: dict[str, Run]
) -> None:
    run = runs[kind]
    if run.skip:
        pytest.skip(run.skip)
    assert run.proc is not None
    run.stdout, run.stderr = run.proc.communicate(timeout=4 * MAX_SECONDS + 120)
    out = run.stdout
    assert run.proc.returncode == 0, f"{' '.join(run.argv)}\n{out}\n{run.stderr[-5000:]}"

    done, asked = figure(out, r"^kills: (\d+) of (\d+)$")
    assert done == asked == run.kills
    failed, checks = figure(out, r"^checks failed: (\d+) of (\d+)$")
    assert failed == 0 and checks >= run.kills
    lost, acked = figure(out, r"^acknowledged turns lost: (\d+) of (\d+)$")
    assert lost == 0 and acked >= run.kills  # every resume is an acknowledged turn
    resumes_failed, resumes = figure(out, r"^resumes failed: (\d+) of (\d+)")
    assert resumes_failed == 0 and resumes == run.kills
    assert figure(out, r"^runs failed: (\d+) .*; hung: (\d+)$") == (0, 0)
    orphans, requests = figure(out, r"^orphan requests: (\d+) of (\d+)")
    assert orphans == 0 and requests > 0
    phases = dict(
        (name, int(n))
        for name, n in re.findall(r"(\S+)=(\d+)", out.split("kills by phase:")[1].splitlines()[0])
    )
    assert sum(phases.values()) == run.kills
    assert re.search(r"^result: OK$", out, re.MULTILINE)

    report = json.loads(run.json_path.read_text())
    assert report["kills"] == run.kills and report["failures"] == []
    assert len(report["kill_log"]) == run.kills
    if kind == "jsonl":
        # thirty kills spread over the phases, and torn tails were cut by the resumes
        assert sum(1 for n in phases.values() if n) >= 3, phases
        assert report["torn_tails_made"] >= 1
