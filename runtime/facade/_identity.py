"""Reading a session's identity from its store, and finding a model's window.

``session_identity`` is what ``stowage list`` and ``context`` show and what a continuation
starts from. ``WindowFinder`` gives a session its window once: the option, else the built-in
registry, else the endpoint's own answer (``GET /models/{id}``), else an assumption named in
one warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from stowage.core import (
    DEFAULT_COMPACT_THRESHOLD,
    ConfigError,
    ForkedFromRecord,
    IdentityReader,
    LineageStore,
    LogStore,
    Record,
    RoundCommittedRecord,
    SessionIdentity,
    SessionRecord,
    Settings,
    effective_records,
    get_logger,
    identity_from_records,
    tool_schema_tokens,
    validate_session_id,
)
from stowage.policy import (
    Budget,
    capabilities_from_model_info,
    effective_threshold,
    known_budget,
    lookup_model,
)

__all__ = [
    "RecordedBudget",
    "WindowFinder",
    "WindowFound",
    "recorded_budget",
    "recorded_usable",
    "session_identity",
]

_log = get_logger("stowage.runtime")


async def session_identity(store: LogStore, session_id: str) -> SessionIdentity:
    """The identity session ``session_id`` runs with: its session record with every
    ``settings_changed`` record folded in. Takes no lease; reads the whole log, or on a store
    that can (``IdentityReader``) only the records the identity is folded from.

    Raises ``InvalidSessionId``, ``SessionNotFound``, ``CorruptLogError``, ``StoreError``.
    """
    validate_session_id(session_id)
    # the SQL stores read only the few records the identity folds, never the archive: what
    # keeps a long session's resume from reading its whole log (a fork's needs its lineage)
    inner = store.inner if isinstance(store, LineageStore) else store
    if isinstance(inner, IdentityReader):
        records = (await inner.read_identity(session_id)).records
        if records and not isinstance(records[0], ForkedFromRecord):
            return identity_from_records(effective_records(records))
    read = await store.read(session_id, repair=False)
    return identity_from_records(read.records)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedBudget:
    """What a session's log says it runs with, and the budget that gives: ``usable`` is the
    budget's (watermark mode) or the fixed threshold (threshold mode), None when unknown."""

    settings: Settings
    budget: Budget | None
    usable: int | None


async def _no_records() -> Sequence[Record]:
    return ()


def recorded_tool_tokens(records: Sequence[Record]) -> int | None:
    """Tokens of the tool schemas the session's requests carry, as its log recorded them."""
    for record in reversed(records):
        if isinstance(record, RoundCommittedRecord) and record.manifest is not None:
            tools = [s for s in record.manifest.sections if s.name == "tools"]
            return tools[0].tokens if tools else 0
        if isinstance(record, SessionRecord):
            value = record.settings.get("tool_tokens")
            return value if isinstance(value, int) else None
    return None


def recorded_budget(records: Sequence[Record], *, has_stubs: bool = False) -> RecordedBudget:
    """The budget a session runs with, from its log alone: the recorded settings (its
    session record and every ``settings_changed`` record in ``records``), and the tool
    schemas its requests carry as the log recorded them (``recorded_tool_tokens``). A log
    written before they were recorded counts the schemas of the built-in tools it names.
    ``stowage list``, ``context``, ``show`` and the console share it. Raises
    ``CorruptLogError`` when ``records`` does not start with a session record."""
    identity = identity_from_records(records)
    try:
        settings = identity.settings(Settings(tools="none"))
    except ConfigError:  # a record another version wrote: the model is still known
        settings = Settings(model=identity.model, tools="none")
    tool_tokens = recorded_tool_tokens(records)
    if tool_tokens is None:
        tool_tokens = _built_in_schemas(settings, set(identity.tools), has_stubs=has_stubs)
    try:
        budget = known_budget(settings, tool_tokens)
    except ConfigError:
        budget = None
    usable = budget.usable if budget is not None else effective_threshold(settings)
    return RecordedBudget(settings=settings, budget=budget, usable=usable)


def _built_in_schemas(settings: Settings, names: set[str], *, has_stubs: bool) -> int:
    """Schema tokens of the built-in tools ``names`` holds."""
    # the tools package (its patch, search and sandbox libraries) only for such an old log:
    # ``stowage list`` and ``show`` read the recorded figure
    from stowage.tools import ToolRegistry, with_recall, workspace_tools

    try:
        known = ToolRegistry(
            t for t in workspace_tools(Path("."), settings=settings) if t.spec.name in names
        )
    except Exception:  # a workspace that cannot be opened here: no schemas to count
        known = ToolRegistry()
    tools = with_recall(known, settings, has_stubs=has_stubs, history=tuple, read_log=_no_records)
    return tool_schema_tokens(tools.specs())


def recorded_usable(records: Sequence[Record], *, has_stubs: bool = False) -> int | None:
    """``recorded_budget(records).usable``, or None when the log cannot say (no session
    record first, a record another version wrote). Raises nothing."""
    try:
        return recorded_budget(records, has_stubs=has_stubs).usable
    except Exception:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowFound:
    """A window and where it came from: option, registry, endpoint, or none (unknown)."""

    context_window: int | None
    source: str
    parallel_tool_calls: bool | None = None
    max_tools: int | None = None

    def applied(self, settings: Settings) -> Settings:
        """``settings`` with what was found where they leave it open (the options win)."""
        changes: dict[str, Any] = {}
        if settings.context_window is None and self.context_window is not None:
            changes["context_window"] = self.context_window
        if settings.parallel_tool_calls is None and self.parallel_tool_calls is not None:
            changes["parallel_tool_calls"] = self.parallel_tool_calls
        if settings.max_tools is None and self.max_tools is not None:
            changes["max_tools"] = self.max_tools
        return settings.with_(**changes) if changes else settings


class WindowFinder:
    """Finds windows for one runtime; asks each endpoint about each model at most once, also when
    many sessions open at the same time (the first asks, the others wait)."""

    def __init__(self) -> None:
        self._asked: dict[tuple[str | None, str], Mapping[str, Any] | None] = {}
        self._asking: dict[tuple[str | None, str], anyio.Lock] = {}
        self._warned: set[str] = set()
        # windows providers stated in refusing a request as too long, by endpoint and model
        self._learned: dict[tuple[str | None, str], int] = {}

    def learn(self, settings: Settings, window: int) -> None:
        """Remember ``window``."""
        self._learned[(settings.base_url, settings.model)] = window

    async def find(self, settings: Settings) -> WindowFound:
        """The window ``settings`` run with."""
        if settings.context_window is not None:
            return WindowFound(context_window=settings.context_window, source="option")
        if lookup_model(settings.model) is not None:
            return WindowFound(context_window=None, source="registry")
        if settings.model == "scripted" or settings.compact_threshold is not None:
            return WindowFound(context_window=None, source="none")
        key = (settings.base_url, settings.model)
        learned = self._learned.get(key)
        if learned is not None:
            return WindowFound(context_window=learned, source="provider")
        if key not in self._asked:
            asking = self._asking.setdefault(key, anyio.Lock())
            async with asking:
                if key not in self._asked:  # asked while this one waited
                    # the model package (and its HTTP client) only when an endpoint is asked:
                    # ``stowage list`` and ``show`` read budgets from logs and never ask one
                    from stowage.model import discover_model_info

                    self._asked[key] = await discover_model_info(
                        settings.base_url, settings.api_key, settings.model
                    )
            self._asking.pop(key, None)
        info = self._asked[key]
        from stowage.model import window_from_model_info

        window = window_from_model_info(info) if info is not None else None
        caps = capabilities_from_model_info(info) if info is not None else None
        if window is not None:
            return WindowFound(
                context_window=window,
                source="endpoint",
                parallel_tool_calls=caps.parallel_tool_calls if caps else None,
                max_tools=caps.max_tools if caps else None,
            )
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
