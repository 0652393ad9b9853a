"""A worker's counters in Prometheus' text format, served on a loopback port.

What an operator graphs to size a fleet: how much work a worker does (messages answered,
rounds, compactions), how it holds its sessions (serving now, leases lost), how much waits
(sessions with input queued in the whole store), how long a claim takes, and how near the
process is to its limit of open descriptors (under Prometheus' standard process names, where
it refuses new sessions: see ``Runtime.descriptors``). The counters are
fed by the runtime's events and the worker's claims; the page is rendered on each scrape (a
pure function of the counters), and the queue depth is one indexed count per scrape.

The server is aiohttp's (a dependency already, for the model calls), bound to 127.0.0.1 only:
a scraper on the same host or a sidecar reads it; nothing is exposed beyond the machine.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus
from stowage.core import ConfigError, Event, HistoryCompacted, RoundCommitted, SessionLeaseLostEvent
from stowage.facade import DescriptorUse

__all__ = ["CLAIM_BUCKETS", "WorkerMetrics", "render_metrics", "serve_metrics"]

_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: upper bounds (seconds) of the claim-latency histogram's buckets
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(eq=False)
class WorkerMetrics:
    """Counters one worker keeps for its metrics page; ``observe`` takes runtime events."""

    rounds: int = 0
    compactions: int = 0
    lease_losses: int = 0
    claims: int = 0
    claimed_sessions: int = 0
    claim_seconds: float = 0.0
    #: claims per bucket of ``CLAIM_BUCKETS`` (the last: above every bound)
    claim_buckets: list[int] = field(default_factory=lambda: [0] * (len(CLAIM_BUCKETS) + 1))

    def observe(self, event: Event) -> None:
        """Count a runtime event (subscribe it with ``Runtime.subscribe``)."""
        if isinstance(event, RoundCommitted):
            self.rounds += 1
        elif isinstance(event, HistoryCompacted):
            self.compactions += 1
        elif isinstance(event, SessionLeaseLostEvent):
            self.lease_losses += 1

    def claimed(self, seconds: float, sessions: int) -> None:
        """Count one claim query that took ``seconds`` and leased ``sessions``."""
        self.claims += 1
        self.claimed_sessions += sessions
        self.claim_seconds += seconds
        self.claim_buckets[bisect.bisect_left(CLAIM_BUCKETS, seconds)] += 1


def render_metrics(
    metrics: WorkerMetrics,
    *,
    answered: int,
    serving: int,
    queue_depth: tuple[int, int] | None,
    descriptors: DescriptorUse | None = None,
) -> str:
    """The metrics page (Prometheus text format 0.0.4)."""
    lines: list[str] = []

    def one(name: str, kind: str, text: str, value: float) -> None:
        lines.extend((f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {_number(value)}"))

    one("stowage_worker_messages_answered_total", "counter", "Messages answered.", answered)
    one("stowage_worker_rounds_total", "counter", "Model rounds committed.", metrics.rounds)
    one(
        "stowage_worker_compactions_total", "counter", "Compactions committed.", metrics.compactions
    )
    one(
        "stowage_worker_lease_losses_total",
        "counter",
        "Session leases lost to another worker.",
        metrics.lease_losses,
    )
    one(
        "stowage_worker_sessions_claimed_total",
        "counter",
        "Sessions claimed.",
        metrics.claimed_sessions,
    )
    one("stowage_worker_sessions_serving", "gauge", "Sessions served now.", serving)
    if queue_depth is not None:
        messages, sessions = queue_depth
        one("stowage_queue_depth", "gauge", "Messages queued in the store.", messages)
        one("stowage_queue_sessions", "gauge", "Sessions with messages queued.", sessions)
    if descriptors is not None and descriptors.in_use is not None:
        one("process_open_fds", "gauge", "Open file descriptors.", descriptors.in_use)
    if descriptors is not None and descriptors.limit is not None:
        one("process_max_fds", "gauge", "Maximum open file descriptors.", descriptors.limit)
    name = "stowage_worker_claim_seconds"
    lines += [f"# HELP {name} Time one claim query took.", f"# TYPE {name} histogram"]
    cumulative = 0
    for bound, count in zip(CLAIM_BUCKETS, metrics.claim_buckets, strict=False):
        cumulative += count
        lines.append(f'{name}_bucket{{le="{_number(bound)}"}} {cumulative}')
    lines.append(f'{name}_bucket{{le="+Inf"}} {metrics.claims}')
    lines.append(f"{name}_sum {_number(metrics.claim_seconds)}")
    lines.append(f"{name}_count {metrics.claims}")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


async def serve_metrics(
    port: int,
    page: Callable[[], Awaitable[str]],
    *,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``page()`` on a loopback port until cancelled. Raises ``ConfigError``."""
    from aiohttp import web  # the server only when metrics are asked for

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=(await page()).encode(), headers={"Content-Type": _CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", port)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port {port}: cannot listen on 127.0.0.1 ({exc.strerror}); "
                "pick a free port, or 0 for any"
            ) from exc
        bound = port
        for address in runner.addresses:
            bound = int(address[1])
        task_status.started(bound)
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await runner.cleanup()
