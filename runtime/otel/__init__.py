"""OpenTelemetry traces of sessions (the ``[otel]`` extra: ``opentelemetry-api`` only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from ._spans import TraceSubscriber

__all__ = ["TraceSubscriber"]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {"TraceSubscriber": "._spans"}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
