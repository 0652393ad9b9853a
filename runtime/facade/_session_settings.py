"""What a session runs with when it starts or continues, decided without I/O: its settings
on this runtime's endpoint, the ``settings_changed`` records a change is written as, and the
check that its fixed part (system prompt, protected state, tool schemas) fits its window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stowage.core import (
    ConfigError,
    HistoryEntry,
    ItemRecord,
    ProtectedRecord,
    ProtectedState,
    Record,
    SessionRecord,
    Settings,
    SettingsChangedRecord,
    SystemMessage,
    ToolSpec,
    redact_url,
    tool_schema_tokens,
)
from stowage.policy import check_window, fixed_request_tokens
from stowage.tools import ToolRegistry

__all__ = ["Change", "check_fits", "endpoint_for", "first_records", "settings_records"]

#: what changed (setting -> [before, after]) and who changed it (``user``, ``runtime``, ...)
Change = tuple[dict[str, list[Any]], str]


def endpoint_for(
    session_id: str, settings: Settings, ours: Settings
) -> tuple[Settings, dict[str, list[Any]]]:
    """The session's settings on the endpoint of a runtime running ``ours``."""
    if settings.model == "scripted" == ours.model:
        return settings, {}
    if (settings.model == "scripted") != (ours.model == "scripted"):
        where = redact_url(settings.base_url) or "the default OpenAI endpoint"
        raise ConfigError(
            f"session {session_id} runs model {settings.model} at {where}, not this "
            f"runtime's {ours.model} model: continue it with settings that name its model "
            "and endpoint (the CLI does), or override model and base_url explicitly"
        )
    changes: dict[str, list[Any]] = {}
    if redact_url(settings.base_url) != redact_url(ours.base_url):
        changes["base_url"] = [redact_url(settings.base_url), redact_url(ours.base_url)]
    if settings.wire_api != ours.wire_api:
        changes["wire_api"] = [settings.wire_api, ours.wire_api]
    if not changes:
        return settings, {}
    compaction = settings.compaction
    if compaction == "provider" and ours.wire_api != "responses":
        # the provider's item cannot go there: compacted locally from here on, and what
        # items the history holds are summarized locally at its next turn
        compaction = "auto"
        changes["compaction"] = ["provider", "auto"]
    moved = settings.with_(base_url=ours.base_url, wire_api=ours.wire_api, compaction=compaction)
    return moved, changes


def first_records(
    settings: Settings,
    tools: ToolRegistry,
    window_source: str,
    protected: ProtectedState,
    protected_ops: tuple[dict[str, Any], ...],
) -> list[Record]:
    """The records a new session's log starts with."""
    system = settings.system
    system_entries = [HistoryEntry(seq=2, item=SystemMessage(text=system))] if system else []
    check_fits(settings, tools.specs(), system_entries, protected)
    records: list[Record] = [
        SessionRecord(
            seq=1,
            model=settings.model,
            context_window=settings.context_window,
            tools=tuple(tools.names()),
            settings={
                **settings.public(),
                "window_source": window_source,
                # the one figure of the tool schemas, for every view of the log
                "tool_tokens": tool_schema_tokens(tools.specs()),
            },
        )
    ]
    if system:
        records.append(ItemRecord(seq=2, item=SystemMessage(text=system)))
    if protected_ops:
        records.append(ProtectedRecord(seq=len(records) + 1, ops=protected_ops, source="user"))
    return records


def settings_records(last_seq: int, changes: Sequence[Change]) -> list[SettingsChangedRecord]:
    """The records of ``changes`` (the empty ones left out), numbered after ``last_seq``."""
    made = [(changed, source) for changed, source in changes if changed]
    return [
        SettingsChangedRecord(seq=last_seq + n, changes=changed, source=source)
        for n, (changed, source) in enumerate(made, start=1)
    ]


def check_fits(
    settings: Settings,
    specs: Sequence[ToolSpec],
    history: Sequence[HistoryEntry],
    protected: ProtectedState,
) -> None:
    """Raises ``ConfigError`` (with the figures) when a request's fixed parts leave no room."""
    system_tokens, protected_tokens = fixed_request_tokens(history, protected)
    check_window(settings, specs, system_tokens=system_tokens, protected_tokens=protected_tokens)
