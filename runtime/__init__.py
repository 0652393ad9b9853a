"""stowage: an asyncio runtime for long-running LLM agents.

Compaction that never cuts a tool step in half, protected facts that no summary may drop, and
an append-only log from which every session can be rebuilt after a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from stowage.core import (
        AssistantDelta,
        AssistantMessage,
        AttemptAbandoned,
        CompactionAbout,
        CompactionDecided,
        CompactionError,
        CompactionFailed,
        CompactionHooks,
        CompactionLanded,
        CompactionLoop,
        CompactionSkipped,
        CompactionSummary,
        CompactionVetoed,
        CompactionWaited,
        ConfigError,
        ContextLengthExceeded,
        CorruptLogError,
        DescriptorLimitReached,
        Event,
        EventBus,
        FencingError,
        FunctionCall,
        FunctionCallOutput,
        HistoryCompacted,
        HistoryEntry,
        IncompleteResponse,
        InvalidSessionId,
        Item,
        LogRepaired,
        Microcompacted,
        MilestoneReached,
        ModelAuthError,
        ModelConnectionError,
        ModelError,
        ModelGateway,
        ModelRequest,
        ModelResponse,
        ModelResponseError,
        ModelRetrying,
        OutputBudget,
        ProtectedChanged,
        ProtectedEntry,
        ProtectedRefused,
        ProtectedState,
        ProtectedStateViolation,
        RateLimitError,
        Record,
        ResponseDone,
        ResponseTooLarge,
        RoundCommitted,
        RoundStarted,
        RuntimeLimits,
        SessionBusy,
        SessionClosed,
        SessionError,
        SessionExists,
        SessionFailed,
        SessionFailedEvent,
        SessionHibernated,
        SessionLeaseLost,
        SessionLeaseLostEvent,
        SessionNotFound,
        SessionRehydrated,
        SessionState,
        Settings,
        StoreError,
        StowageError,
        SystemMessage,
        TextDelta,
        Tool,
        ToolCancelled,
        ToolContext,
        ToolFinished,
        ToolSpec,
        ToolStarted,
        TurnFinished,
        Usage,
        UserMessage,
        configure_logging,
        new_session_id,
        replay,
        validate_session_id,
    )
    from stowage.facade import Runtime, Session, TurnResult, tune_gc
    from stowage.tools import FunctionTool, ToolError, ToolRegistry, tool
    from stowage.worker import Client

    from ._version import __version__

__all__ = [
    "AssistantDelta", "AssistantMessage", "AttemptAbandoned", "CompactionAbout",
    "CompactionDecided", "CompactionError", "CompactionFailed", "CompactionHooks",
    "CompactionLanded", "CompactionLoop", "CompactionSkipped", "CompactionSummary",
    "CompactionVetoed", "CompactionWaited", "ConfigError", "ContextLengthExceeded",
    "CorruptLogError", "DescriptorLimitReached", "Event", "EventBus", "FencingError",
    "FunctionCall", "FunctionCallOutput", "HistoryCompacted", "HistoryEntry", "IncompleteResponse",
    "InvalidSessionId", "Item", "LogRepaired", "Microcompacted", "MilestoneReached",
    "ModelAuthError", "ModelConnectionError", "ModelError", "ModelGateway", "ModelRequest",
    "ModelResponse", "ModelResponseError", "ModelRetrying", "OutputBudget", "ProtectedChanged",
    "ProtectedEntry", "ProtectedRefused", "ProtectedState", "ProtectedStateViolation",
    "RateLimitError", "Record", "ResponseDone", "ResponseTooLarge", "RoundCommitted",
    "RoundStarted", "RuntimeLimits", "SessionBusy", "SessionClosed", "SessionError",
    "SessionExists", "SessionFailed", "SessionFailedEvent", "SessionHibernated", "SessionLeaseLost",
    "SessionLeaseLostEvent", "SessionNotFound", "SessionRehydrated", "SessionState", "Settings",
    "StoreError", "StowageError", "SystemMessage", "TextDelta", "Tool", "ToolCancelled",
    "ToolContext", "ToolFinished", "ToolSpec", "ToolStarted", "TurnFinished", "Usage",
    "UserMessage", "configure_logging", "new_session_id", "replay", "validate_session_id",
    "Runtime", "Session", "TurnResult", "tune_gc",
    "FunctionTool", "ToolError", "ToolRegistry", "tool",
    "Client",
    "__version__",
]  # fmt: skip

#: the names each module defines, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "stowage.core": """
        AssistantDelta AssistantMessage AttemptAbandoned CompactionAbout CompactionDecided
        CompactionError CompactionFailed CompactionHooks CompactionLanded CompactionLoop
        CompactionSkipped CompactionSummary CompactionVetoed CompactionWaited ConfigError
        ContextLengthExceeded CorruptLogError DescriptorLimitReached Event EventBus FencingError
        FunctionCall FunctionCallOutput HistoryCompacted HistoryEntry IncompleteResponse
        InvalidSessionId Item LogRepaired Microcompacted MilestoneReached ModelAuthError
        ModelConnectionError ModelError ModelGateway ModelRequest ModelResponse
        ModelResponseError ModelRetrying OutputBudget ProtectedChanged ProtectedEntry
        ProtectedRefused ProtectedState ProtectedStateViolation RateLimitError Record
        ResponseDone ResponseTooLarge RoundCommitted RoundStarted RuntimeLimits SessionBusy
        SessionClosed SessionError SessionExists SessionFailed SessionFailedEvent
        SessionHibernated SessionLeaseLost SessionLeaseLostEvent SessionNotFound
        SessionRehydrated SessionState Settings StoreError StowageError SystemMessage TextDelta
        Tool ToolCancelled ToolContext ToolFinished ToolSpec ToolStarted TurnFinished Usage
        UserMessage configure_logging new_session_id replay validate_session_id
    """,
    "stowage.facade": "Runtime Session TurnResult tune_gc",
    "stowage.tools": "FunctionTool ToolError ToolRegistry tool",
    "stowage.worker": "Client",
    "._version": "__version__",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
