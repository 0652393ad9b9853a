"""How a worker paces itself: sessions at once, polling, the shutdown grace; and its limits."""

from __future__ import annotations

from dataclasses import dataclass

from stowage.core import RuntimeLimits, check_limits, limit_field

__all__ = ["WORKER_LIMITS", "WorkerOptions"]

#: a worker's limits unless it is given others: the runtime's, and idle sessions hibernate
#: after 2 s (a worker lingers that long for more input before it gives the lease back)
WORKER_LIMITS = RuntimeLimits(idle_timeout=2.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """A worker's settings; ``ConfigError`` names a bad one and its range."""

    concurrency: int = limit_field(
        32, "sessions with work served at once (claims stop there)", ge=1
    )
    poll_interval: float = limit_field(
        5.0,
        "seconds between claims when no NOTIFY arrives (the fallback: NOTIFY wakes a worker "
        "at once)",
        unit="seconds",
        gt=0,
    )
    grace: float = limit_field(
        30.0,
        "seconds turns in flight may take to finish after SIGTERM before they are interrupted",
        unit="seconds",
        gt=0,
    )
    turn_attempts: int = limit_field(
        3, "tries at one message whose turn the model keeps failing before it is given up", ge=1
    )
    metrics_port: int | None = limit_field(
        None,
        "serve Prometheus metrics at http://127.0.0.1:PORT/metrics (0: any free port, logged "
        "as metrics_serving)",
        none="no metrics page",
        ge=0,
        le=65535,
    )

    def __post_init__(self) -> None:
        check_limits(self)
