"""How a worker paces itself: sessions at once, idleness, polling, the shutdown grace."""

from __future__ import annotations

from dataclasses import dataclass

from stowage.core import ConfigError

__all__ = ["WorkerOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """A worker's settings; ``ConfigError`` names a bad one.

    ``concurrency``: sessions with work served at once (claims stop there). ``idle_timeout``:
    seconds a session with nothing queued stays live, its lease held, waiting for more input,
    before it hibernates and its lease is given back (0: at once); an idle session gives its
    place up early to a session with input. ``poll_interval``: seconds between claims when
    no NOTIFY arrives (the fallback: NOTIFY wakes a worker at once). ``grace``: seconds turns
    in flight may take to finish after SIGTERM before they are interrupted. ``turn_attempts``:
    tries at one message whose turn the model keeps failing before it is given up on.
    ``metrics_port``: serve Prometheus metrics on 127.0.0.1 at this port (0: any free one;
    None: none).
    """

    concurrency: int = 32
    idle_timeout: float = 2.0
    poll_interval: float = 5.0
    grace: float = 30.0
    turn_attempts: int = 3
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.turn_attempts < 1:
            raise ConfigError(f"turn_attempts must be >= 1, got {self.turn_attempts}")
        for name in ("poll_interval", "grace"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be 0 to 65535, got {self.metrics_port}")
        if not self.idle_timeout >= 0:
            raise ConfigError(f"idle_timeout must be >= 0 seconds, got {self.idle_timeout}")
