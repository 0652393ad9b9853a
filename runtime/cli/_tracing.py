"""``STOWAGE_OTEL=1`` (or ``otel = true`` in ``stowage.toml``): trace the command's sessions."""

from __future__ import annotations

from stowage.core import ConfigError, Settings
from stowage.facade import Runtime

from ._config import load_config

__all__ = ["trace_if_configured"]


def trace_if_configured(rt: Runtime, settings: Settings) -> None:
    """Subscribe an OpenTelemetry ``TraceSubscriber`` to ``rt`` when the configuration asks
    for tracing. Raises ``ConfigError`` when it does and the ``otel`` extra is missing."""
    if not load_config().otel:
        return
    try:
        from stowage.otel import TraceSubscriber
    except ImportError as exc:
        raise ConfigError(
            f"tracing is on (STOWAGE_OTEL or otel in stowage.toml) but {exc.name or 'opentelemetry'} "
            "cannot be imported: pip install 'stowage-runtime[otel]', or turn tracing off"
        ) from None
    rt.subscribe(TraceSubscriber(model=settings.model))
