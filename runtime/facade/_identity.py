"""Reading a session's identity from its store, and finding a model's window.

``session_identity`` is what ``stowage list`` and ``context`` show and what a continuation
starts from. ``WindowFinder`` gives a session its window once: the option, else the built-in
registry, else the endpoint's own answer (``GET /models/{id}``), else an assumption named in
one warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from stowage.core import (
    DEFAULT_COMPACT_THRESHOLD,
    LogStore,
    SessionIdentity,
    Settings,
    identity_from_records,
    validate_session_id,
)
from stowage.model import discover_context_window
from stowage.policy import lookup_model

__all__ = ["WindowFinder", "WindowFound", "session_identity"]

_log = structlog.get_logger("stowage.runtime")


async def session_identity(store: LogStore, session_id: str) -> SessionIdentity:
    """The identity session ``session_id`` runs with: its session record with every
    ``settings_changed`` record folded in. Reads the whole log; takes no lease.

    Raises ``InvalidSessionId``, ``SessionNotFound``, ``CorruptLogError``, ``StoreError``.
    """
    read = await store.read(validate_session_id(session_id), repair=False)
    return identity_from_records(read.records)


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowFound:
    """A window and where it came from: option, registry, endpoint, or none (unknown)."""

    context_window: int | None
    source: str


class WindowFinder:
    """Finds windows for one runtime; asks each endpoint about each model at most once."""

    def __init__(self) -> None:
        self._asked: dict[tuple[str | None, str], int | None] = {}
        self._warned: set[str] = set()

    async def find(self, settings: Settings) -> WindowFound:
        """The window ``settings`` run with. Raises nothing; an unknown window is logged once
        per model as a warning naming the assumption and the fix."""
        if settings.context_window is not None:
            return WindowFound(context_window=settings.context_window, source="option")
        if lookup_model(settings.model) is not None:
            return WindowFound(context_window=None, source="registry")
        if settings.model == "scripted" or settings.compact_threshold is not None:
            return WindowFound(context_window=None, source="none")
        key = (settings.base_url, settings.model)
        if key not in self._asked:
            self._asked[key] = await discover_context_window(
                settings.base_url, settings.api_key, settings.model
            )
        window = self._asked[key]
        if window is not None:
            return WindowFound(context_window=window, source="endpoint")
        if settings.model not in self._warned:
            self._warned.add(settings.model)
            _log.warning(
                "context_window_unknown",
                model=settings.model,
                assumed=f"a fixed compaction threshold of {DEFAULT_COMPACT_THRESHOLD} tokens",
                fix="set --context-window N, or context_window in the model's profile "
                "(stowage.toml)",
            )
        return WindowFound(context_window=None, source="assumed")
