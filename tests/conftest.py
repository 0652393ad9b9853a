"""Fixtures shared across the test folders; only what several test files would otherwise repeat.

- ``repo_root``: the checkout these tests belong to.
- ``cli_env``: the environment for a ``stowage`` subprocess: this one without any ``OPENAI_*``
  variable (a developer's own key or endpoint never reaches a test), unbuffered output.
- ``pg_schema``: a fresh PostgreSQL schema name at ``PG_DSN`` (``STOWAGE_TEST_PG``, else the local
  server), dropped after the test; the test is skipped without a server, and fails under CI.
- ``cli``: run the command line as a user runs it, ``cli("run", "hi", cwd=path)``: a process of
  its own running ``python -m stowage.cli`` with ``cli_env``; returns the completed process with
  text stdout and stderr, whatever its exit status. The process is forked from a server that has
  imported the command line already (``tests/_cli_forkserver.py``, one per pytest process), which
  saves a new interpreter and its imports on each call; a call whose ``cli_env`` changes a
  ``PYTHON*`` variable (read once, when an interpreter starts) runs a new interpreter instead,
  and so does every call when ``CLI_FORKSERVER=0`` is set.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# The suite starts hundreds of Python processes (the command line, the scripts, the crash runs'
# children): each keeps the bytecode it compiles, under build/ and never beside the sources,
# rather than compiling the package again (a quarter of a `stowage run`'s CPU). Set before
# pytest-xdist starts its workers, so they and every process they start inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(REPO_ROOT / "build" / "pycache"))
PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def slowness() -> float:
    """How many times slower than when idle this machine runs now: the runnable processes
    per core over the last minute, at least 1. A bound on wall time that a quiet machine
    meets (a takeover within the lease time and a margin) is multiplied by it, so a suite
    run beside other work measures the code, not the neighbours."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


#: the files that take longest (from 10 s to five minutes on 2 cores), longest first: under
#: ``pytest -n N`` (pytest-xdist, ``--dist loadfile``) they are handed out before the others, so
#: that no worker starts one of them while the rest sit idle at the end; order only, never which
#: tests run
LONGEST_FIRST = (
    "scripts/test_adversary.py",
    "reliability/test_crash.py",
    "scripts/test_adversary_postgres.py",
    "cli/test_fork_cli.py",
    "cli/test_leases_cli.py",
    "scripts/test_crash_acting.py",
    "cli/test_storage_failure_exit.py",
    "console/test_browser.py",
    "scripts/test_bench_load_ratio.py",
    "worker/test_worker_processes.py",
    "faults/test_endpoint_faults.py",
    "cli/test_session_identity_cli.py",
    "reliability/test_resume_request_identical.py",
    "cli/test_options_anywhere.py",
    "cli/test_cli_against_fake_server.py",
    "scripts/test_bench_sessions.py",
    "scripts/test_bench_overhead.py",
    "docs/test_examples.py",
    "model/test_openai_gateway.py",
    "tools/test_mcp.py",
    "cli/test_identity.py",
    "cli/test_exit_codes.py",
)


async def ensure_database(dsn: str) -> bool:
    """Create the database ``dsn`` names when its server answers and it is missing (through
    the server's ``postgres`` database); True when it was made. Without a server nothing
    happens: the PostgreSQL tests skip themselves."""
    try:
        conn = await asyncpg.connect(dsn, timeout=3)
    except asyncpg.InvalidCatalogNameError:
        pass  # the server answers; the database is missing
    except (OSError, asyncpg.PostgresError):
        return False
    else:
        await conn.close()
        return False
    parts = urlsplit(dsn)
    name = parts.path.lstrip("/")
    admin = await asyncpg.connect(urlunsplit(parts._replace(path="/postgres")), timeout=3)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    except asyncpg.DuplicateDatabaseError:
        return False  # another test process made it first
    finally:
        await admin.close()
    return True


def pytest_sessionstart(session: pytest.Session) -> None:
    """``make test`` on a fresh PostgreSQL: the ``test`` database is made when missing."""
    asyncio.run(ensure_database(PG_DSN))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``bwrap`` needs bubblewrap: skipped without it, failed under CI."""
    if item.get_closest_marker("bwrap") is not None and shutil.which("bwrap") is None:
        why = "bubblewrap is not installed (run_command's sandbox; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process runs everything anyway: keep the order of the files

    def rank(item: pytest.Item) -> int:
        tests = REPO_ROOT / "tests"
        path = item.path.relative_to(tests).as_posix() if item.path.is_relative_to(tests) else ""
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps the order of its tests


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The root of the checkout: pyproject.toml, README.md, runtime/, actors/, storage/."""
    assert (REPO_ROOT / "pyproject.toml").is_file(), REPO_ROOT
    return REPO_ROOT


def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def cli_env() -> dict[str, str]:
    return _cli_env()


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    """What an interpreter reads of its environment once, when it starts."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


class CliForkServer:
    """``tests/_cli_forkserver.py`` in a process of its own; ``run`` is ``subprocess.run`` of
    ``python -m stowage.cli ARGS`` (capture_output, text), or None when it cannot serve."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.env = _cli_env()
        self.lock = threading.Lock()
        self.count = itertools.count()
        self.proc: subprocess.Popen[str] | None = None
        self.broken = False  # it could not start: every call runs a new interpreter

    def _start(self) -> subprocess.Popen[str] | None:
        if self.broken:
            return None
        if self.proc is None:
            self.proc = subprocess.Popen(
                [sys.executable, str(REPO_ROOT / "tests" / "_cli_forkserver.py")],
                cwd=self.scratch, env=self.env, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            assert self.proc.stdout is not None
            if self.proc.stdout.readline() != "ready\n":
                self.broken = True
                self.close()
                return None
        return self.proc

    def run(
        self, args: tuple[str, ...], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str] | None:
        if _startup_env(env) != _startup_env(self.env) or os.environ.get("CLI_FORKSERVER") == "0":
            return None
        argv = [sys.executable, "-m", "stowage.cli", *args]
        with self.lock:
            proc = self._start()
            if proc is None or proc.stdin is None or proc.stdout is None:
                return None
            n = next(self.count)
            out, err = self.scratch / f"{n}.out", self.scratch / f"{n}.err"
            request = {"n": n, "argv": list(args), "cwd": str(Path(cwd).resolve()), "env": env,
                       "out": str(out), "err": str(err), "timeout": timeout}  # fmt: skip
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                answer = proc.stdout.readline()
            except OSError:
                answer = ""
            except BaseException:
                # interrupted while the command runs (pytest-timeout, Ctrl-C): its answer would
                # reach the next call, so this server goes; the next call starts another
                self.close(kill=True)
                raise
            if not answer:  # the command may have run: never run it a second time
                self.broken = True
                self.close()
                raise RuntimeError(f"the cli fork server died during {argv}")
            reply = json.loads(answer)
            if reply.get("n") != n:  # never take another call's answer for this one
                self.close(kill=True)
                raise RuntimeError(f"the cli fork server answered call {reply.get('n')} for {n}")
            try:
                stdout = out.read_text() if out.exists() else ""
                stderr = err.read_text() if err.exists() else ""
            finally:
                out.unlink(missing_ok=True)
                err.unlink(missing_ok=True)
        if reply.get("timeout"):
            raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
        return subprocess.CompletedProcess(argv, reply["returncode"], stdout, stderr)

    def close(self, *, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()  # the server ends when its stdin closes
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def cli_fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliForkServer]:
    server = CliForkServer(tmp_path_factory.mktemp("cli-forkserver"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def cli(
    cli_env: dict[str, str], cli_fork_server: CliForkServer
) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        served = cli_fork_server.run(args, cwd, dict(cli_env), timeout)
        if served is not None:
            return served
        return subprocess.run(
            [sys.executable, "-m", "stowage.cli", *args],
            cwd=cwd,
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    try:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {PG_DSN} under CI: {exc}")
        pytest.skip(f"no PostgreSQL at {PG_DSN}: {exc}")
    name = f"stowage_test_{secrets.token_hex(6)}"
    try:
        yield name
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await conn.close()
