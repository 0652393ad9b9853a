"""Operating a fleet: ``stowage workers`` lists the workers that are up (their own rows) and
the sessions they hold (the leases), and ``stowage worker --metrics-port`` serves Prometheus text metrics, scraped here for
real over loopback HTTP."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import pytest
from stowage.cli._worker import format_workers
from stowage.facade import DescriptorUse
from stowage.worker import Client
from stowage.worker._metrics import WorkerMetrics, render_metrics

from .conftest import DSN, Workers, message_counts, poll_until, stowage_command


def metric(page: str, name: str) -> float | None:
    """The value of an unlabelled sample in a Prometheus text page (None: absent)."""
    for line in page.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_the_page_has_help_type_and_cumulative_claim_buckets() -> None:
    metrics = WorkerMetrics()
    metrics.claimed(0.003, 2)
    metrics.claimed(0.2, 0)
    metrics.claimed(9.0, 1)
    use = DescriptorUse(in_use=120, limit=1024)
    page = render_metrics(metrics, answered=5, serving=2, queue_depth=(7, 3), descriptors=use)
    assert "# TYPE stowage_worker_rounds_total counter" in page
    assert metric(page, "stowage_worker_messages_answered_total") == 5
    assert metric(page, "stowage_worker_sessions_claimed_total") == 3
    assert (metric(page, "stowage_queue_depth"), metric(page, "stowage_queue_sessions")) == (7, 3)
    assert 'stowage_worker_claim_seconds_bucket{le="0.0025"} 0' in page
    assert 'stowage_worker_claim_seconds_bucket{le="0.005"} 1' in page
    assert 'stowage_worker_claim_seconds_bucket{le="0.25"} 2' in page
    assert 'stowage_worker_claim_seconds_bucket{le="+Inf"} 3' in page
    assert metric(page, "stowage_worker_claim_seconds_count") == 3
    assert (metric(page, "process_open_fds"), metric(page, "process_max_fds")) == (120, 1024)
    unknown = render_metrics(
        metrics,
        answered=0,
        serving=0,
        queue_depth=None,
        descriptors=DescriptorUse(in_use=None, limit=None),
    )
    assert metric(unknown, "stowage_queue_depth") is None  # not a made-up 0
    assert metric(unknown, "process_open_fds") is metric(unknown, "process_max_fds") is None


def test_the_workers_table_shows_rounds_per_second_and_says_when_nobody_is_up() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    row = {"pid": 42, "host": "box", "sessions": 3, "renewed": now - timedelta(seconds=2),
           "since": now - timedelta(minutes=5), "rounds_per_s": 12.34}  # fmt: skip
    idle = {**row, "pid": 43, "sessions": 0, "rounds_per_s": None}
    table = format_workers([row, idle], now=now).splitlines()
    assert table[0].split()[:4] == ["PID", "HOST", "SESSIONS", "ROUNDS/S"]
    assert table[1].split() == ["42", "box", "3", "12.3", "2.0", "s", "ago", "5", "min", "ago"]
    assert table[2].split()[:4] == ["43", "box", "0", "-"]  # one beat: no rate yet
    assert "no worker is up" in format_workers([], now=now)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def workers_json(schema: str, env: dict[str, str]) -> list[dict[str, object]]:
    done = subprocess.run(
        [*stowage_command(), "workers", "--store", DSN, "--schema", schema, "--json"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.slow
async def test_workers_lists_a_serving_worker_and_its_metrics_count_the_work(
    schema: str,
    fake_server: Callable[..., str],
    workers_for: Callable[..., Workers],
    cli_env: dict[str, str],
) -> None:
    with anyio.fail_after(90):
        url = fake_server(latency=0.3)
        async with Client(DSN, schema=schema) as client:
            for n in range(3):
                await client.send(f"s{n}", "hello", create=True)
        port = free_port()
        workers = workers_for(schema, url, "--lease-ttl", "30", "--idle-timeout", "30")
        proc = workers.start("--metrics-port", str(port))

        async def leased() -> list[dict[str, object]]:
            return await anyio.to_thread.run_sync(workers_json, schema, cli_env)

        listed = await poll_until(leased, every=0.2, limit=200)
        assert [(row["pid"], row["sessions"]) for row in listed] == [(proc.pid, 3)]
        assert listed[0]["renewed"] is not None

        async def all_answered() -> bool:
            return (await message_counts(schema))["answered"] == 3

        await poll_until(all_answered)
        async with httpx.AsyncClient() as http:
            response = await http.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        page = response.text
        assert metric(page, "stowage_worker_messages_answered_total") == 3
        assert (metric(page, "stowage_worker_rounds_total") or 0) >= 3  # tool rounds + answer
        assert metric(page, "stowage_worker_sessions_claimed_total") == 3
        assert metric(page, "stowage_worker_lease_losses_total") == 0
        assert metric(page, "stowage_queue_depth") == 0
        assert (metric(page, "stowage_worker_claim_seconds_count") or 0) >= 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert workers_json(schema, cli_env) == []  # its leases went with it


@pytest.mark.slow
def test_a_metrics_port_in_use_is_one_clear_error(
    schema: str, workers_for: Callable[..., Workers]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        workers = workers_for(schema, "http://127.0.0.1:9/v1")
        proc = workers.start("--metrics-port", str(port))
        assert proc.wait(timeout=60) == 2
    log = workers.log_text()
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1" in log
    assert "Traceback" not in log
