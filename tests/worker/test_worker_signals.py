"""Black box: ``stowage worker`` stopped by SIGTERM or SIGINT at every stage of its life — while
the interpreter imports, while it connects, as it claims, while it serves — exits 0 with every
lease given back.

"As soon as it can" is read from the kernel: the moment ``/proc/PID/status`` lists SIGTERM as
caught, the command's first handler is in place; before that the interpreter itself is starting
and no Python code of the worker has run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import anyio
import pytest
from stowage.worker import Client

from ..conftest import slowness
from .conftest import (
    DSN,
    Workers,
    held_leases,
    message_counts,
    poll_until,
    stowage_command,
)

pytestmark = pytest.mark.slow


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for ``signum`` (its ``SigCgt`` mask)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def wait_until_caught(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Spin (1 ms steps, 20 s at most) until the worker catches ``signum``: the earliest moment
    a signal can be anything but the interpreter's default."""
    deadline = time.monotonic() + 20
    while not catches(proc.pid, signum):
        assert proc.poll() is None, "the worker exited before it caught any signal"
        assert time.monotonic() < deadline, "the worker never installed a handler"
        time.sleep(0.001)


def exit_code(proc: subprocess.Popen[bytes], within: float = 30) -> int:
    return proc.wait(timeout=within * slowness())


async def log_says(workers: Workers, event: str) -> None:
    async def said() -> bool:
        return f'"event": "{event}"' in workers.log_text()

    await poll_until(said, every=0.01, limit=3000)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("after", [0.0, 0.05, 0.2])
def test_a_signal_during_start_up_exits_0(
    schema: str,
    workers_for: Callable[..., Workers],
    signum: signal.Signals,
    after: float,
) -> None:
    """From the first handler on (``after`` seconds later: still importing, or opening the
    pool), a stop signal ends the worker with status 0, not -15 or a traceback."""
    workers = workers_for(schema, "http://127.0.0.1:9/v1")
    proc = workers.start()
    wait_until_caught(proc, signal.SIGTERM)
    time.sleep(after)
    proc.send_signal(signum)
    code = exit_code(proc)
    log = workers.log_text()
    assert code == 0, log[-2000:]
    assert "Traceback" not in log


@pytest.fixture
def silent_database() -> Iterator[int]:
    """A loopback port that accepts connections and never answers: a database that hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()


def test_a_signal_while_the_database_does_not_answer_exits_0_at_once(
    silent_database: int, tmp_path: object, cli_env: dict[str, str]
) -> None:
    """A worker stuck connecting (the server accepted, and says nothing) stops on SIGTERM
    within seconds, not after the connect timeout."""
    url = f"postgresql://postgres@127.0.0.1:{silent_database}/test"
    proc = subprocess.Popen(
        [*stowage_command(), "worker", "--store", url, "--model", "fake-model",
         "--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-test", "--log-format", "json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # it says it started, then waits on the silent server
            if b"worker_started" in line:
                break
        time.sleep(0.3)  # well into the connect, which would last 60 s
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


async def test_a_signal_as_the_first_claim_runs_exits_0_leaving_no_lease(
    schema: str, fake_server: Callable[..., str], workers_for: Callable[..., Workers]
) -> None:
    """Messages waiting for many sessions: SIGTERM the moment the worker is ready (its claim in
    flight or just done) exits 0, and no session stays leased."""
    with anyio.fail_after(60 * slowness()):
        url = fake_server(latency=0.2)
        async with Client(DSN, schema=schema) as client:
            for n in range(20):
                await client.send(f"s{n}", "hello", create=True)
        workers = workers_for(schema, url, "--lease-ttl", "30", "--grace", "20")
        proc = workers.start("--concurrency", "8")
        await log_says(workers, "worker_ready")
        proc.send_signal(signal.SIGTERM)
        assert exit_code(proc) == 0, workers.log_text()[-2000:]
        assert await held_leases(schema) == []


@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGTERM, signal.SIGTERM]])
async def test_a_signal_while_serving_exits_0_leaving_no_lease(
    schema: str,
    fake_server: Callable[..., str],
    workers_for: Callable[..., Workers],
    signals: list[signal.Signals],
) -> None:
    """SIGINT drains like SIGTERM; a second SIGTERM interrupts the turns in flight. Either
    way the worker exits 0 and holds no lease."""
    with anyio.fail_after(60 * slowness()):
        url = fake_server(latency=1.0)  # turns are in flight when the signals come
        async with Client(DSN, schema=schema) as client:
            for n in range(4):
                await client.send(f"s{n}", "hello", create=True)
        workers = workers_for(schema, url, "--lease-ttl", "30", "--grace", "20")
        proc = workers.start("--concurrency", "4")

        async def in_flight() -> bool:
            return (await message_counts(schema))["logged"] > 0

        await poll_until(in_flight, every=0.02)
        proc.send_signal(signals[0])
        if len(signals) > 1:
            await log_says(workers, "worker_draining")  # two at once would coalesce into one
            proc.send_signal(signals[1])
        assert exit_code(proc) == 0, workers.log_text()[-2000:]
        assert await held_leases(schema) == []
        if len(signals) > 1:
            assert "worker_interrupted" in workers.log_text()


def test_catches_reads_the_kernels_mask() -> None:
    """The probe itself: it sees a handler this process installs, and none before."""
    previous = signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    try:
        assert not catches(os.getpid(), signal.SIGUSR2)
        signal.signal(signal.SIGUSR2, lambda *_: None)
        assert catches(os.getpid(), signal.SIGUSR2)
    finally:
        signal.signal(signal.SIGUSR2, previous)
