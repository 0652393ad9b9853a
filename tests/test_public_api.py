"""The public surface of each package is pinned: adding or removing a name is a decision.

``stowage`` is the facade (Runtime, Session, TurnResult), Settings, the items, the events, the
errors, the tool types, ``tune_gc`` and ``__version__``; ``stowage.storage`` the store
protocol, the stores, the codec and ``open_store``; ``stowage.testing`` the doubles shipped for
users' tests.
``stowage.storage.contract``, the checks a third-party store runs, is still growing: only its
core is pinned.
"""

from __future__ import annotations

import importlib
from importlib.metadata import version

import pytest

SURFACE = {
    "stowage": [
        "AssistantDelta", "AssistantMessage", "AttemptAbandoned", "Client", "CompactionDecided", "CompactionError",
        "CompactionFailed", "CompactionLanded", "CompactionLoop", "CompactionSkipped", "CompactionSummary",
        "CompactionWaited", "IncompleteResponse", "CompactionAbout", "CompactionHooks",
        "CompactionVetoed", "ModelRetrying",
        "ConfigError", "ContextLengthExceeded", "CorruptLogError", "DescriptorLimitReached", "Event", "EventBus",
        "FencingError", "FunctionCall", "FunctionCallOutput", "FunctionTool", "HistoryCompacted",
        "HistoryEntry", "InvalidSessionId", "Item", "LogRepaired", "Microcompacted", "MilestoneReached",
        "ModelAuthError", "ModelConnectionError", "ModelError", "ModelGateway", "ModelRequest",
        "ModelResponse", "ModelResponseError", "OutputBudget", "ProtectedChanged", "ProtectedEntry",
        "ProtectedRefused", "ProtectedState", "ProtectedStateViolation", "RateLimitError",
        "Record", "ResponseDone", "ResponseTooLarge", "RoundCommitted", "RoundStarted", "Runtime", "RuntimeLimits", "Session",
        "SessionBusy", "SessionClosed", "SessionError", "SessionExists", "SessionFailed",
        "SessionFailedEvent", "SessionHibernated", "SessionLeaseLost", "SessionLeaseLostEvent",
        "SessionNotFound", "SessionRehydrated", "SessionState", "Settings",
        "StoreError", "StowageError", "SystemMessage", "TextDelta", "Tool", "ToolCancelled",
        "ToolContext", "ToolError", "ToolFinished",
        "ToolRegistry", "ToolSpec", "ToolStarted", "TurnFinished", "TurnResult", "Usage",
        "UserMessage", "__version__", "configure_logging", "new_session_id", "replay",
        "tool", "tune_gc", "validate_session_id",
    ],
    "stowage.storage": [
        "JsonlStore", "LogRead", "LogStore", "PostgresStore", "SqliteStore", "TornTail",
        "decode_record", "encode_record", "load_syncfs", "open_store",
    ],
    "stowage.worker": [
        "WORKER_LIMITS", "Client", "InboxMessage", "MessageFailed", "Sent", "Worker", "WorkerOptions",
        "new_message_id",
    ],
    "stowage.testing": [
        "Brain", "BreakpointCache", "FakeOpenAIServer", "Fault", "FaultWhen", "ScriptedBrain",
        "ScriptedModel", "call_ids", "is_summary_request", "orphan_calls", "orphan_outputs", "scripted_usage",
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


def test_version_is_the_installed_distributions() -> None:
    import stowage

    assert stowage.__version__ == version("stowage-runtime")


def test_the_store_contract_ships_its_checks() -> None:
    contract = importlib.import_module("stowage.storage.contract")
    assert {"CHECKS", "Check", "StoreFactory"} <= set(contract.__all__)
    assert contract.CHECKS and all(callable(check) for check in contract.CHECKS)
    for name in contract.__all__:
        assert getattr(contract, name) is not None
