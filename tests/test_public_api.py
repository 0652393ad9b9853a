"""The public surface of each package is pinned: adding or removing a name is a decision."""

from __future__ import annotations

import importlib

import pytest

SURFACE = {
    "stowage": [
        "AssistantDelta", "AssistantMessage", "CompactionDecided", "CompactionError",
        "CompactionFailed", "CompactionSkipped", "CompactionSummary", "CompactionWaited",
        "ConfigError", "ContextLengthExceeded", "CorruptLogError", "Event", "EventBus",
        "FencingError", "FunctionCall", "FunctionCallOutput", "FunctionTool", "HistoryCompacted",
        "HistoryEntry", "InvalidSessionId", "Item", "LogRepaired", "Microcompacted",
        "ModelAuthError", "ModelConnectionError", "ModelError", "ModelGateway", "ModelRequest",
        "ModelResponse", "ModelResponseError", "ProtectedChanged", "ProtectedEntry",
        "ProtectedRefused", "ProtectedState", "ProtectedStateViolation", "RateLimitError",
        "Record", "ResponseDone", "RoundCommitted", "RoundStarted", "Runtime", "Session",
        "SessionClosed", "SessionError", "SessionExists", "SessionFailed", "SessionFailedEvent",
        "SessionHibernated", "SessionNotFound", "SessionRehydrated", "SessionState", "Settings",
        "StoreError", "StowageError", "SystemMessage", "TextDelta", "Tool", "ToolFinished",
        "ToolRegistry", "ToolSpec", "ToolStarted", "TurnFinished", "TurnResult", "Usage",
        "UserMessage", "__version__", "configure_logging", "new_session_id", "replay",
        "validate_session_id",
    ],
    "stowage.storage": [
        "JsonlStore", "LogRead", "LogStore", "PostgresStore", "SqliteStore", "TornTail",
        "decode_record", "encode_record", "open_store",
    ],
    "stowage.testing": [
        "Brain", "FakeOpenAIServer", "Fault", "FaultWhen", "ScriptedBrain", "ScriptedModel",
        "call_ids", "is_summary_request", "orphan_calls", "scripted_usage",
    ],
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_exported_names_are_exactly_the_pinned_surface(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(SURFACE[package])


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_every_exported_name_resolves_and_is_public(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert not name.startswith("_") or name == "__version__"
        assert getattr(module, name) is not None
