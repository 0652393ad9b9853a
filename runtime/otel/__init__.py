"""OpenTelemetry traces of sessions (the ``[otel]`` extra: ``opentelemetry-api`` only).

``runtime.subscribe(TraceSubscriber(model=settings.model))`` traces every session of a runtime;
spans go to whatever tracer provider the application configured, and nowhere without one.
"""

from __future__ import annotations

from ._spans import TraceSubscriber

__all__ = ["TraceSubscriber"]
