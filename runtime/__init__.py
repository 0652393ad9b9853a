"""stowage: an asyncio runtime for long-running LLM agents.

Compaction that never cuts a tool step in half, protected facts that no summary may drop, and
an append-only log from which every session can be rebuilt after a crash.
"""

from ._config import Settings, new_session_id, validate_session_id
from ._errors import (
    CompactionError,
    ConfigError,
    ContextLengthExceeded,
    CorruptLogError,
    FencingError,
    InvalidSessionId,
    ModelAuthError,
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    ProtectedStateViolation,
    RateLimitError,
    SessionClosed,
    SessionError,
    SessionExists,
    SessionFailed,
    SessionNotFound,
    StoreError,
    StowageError,
)
from ._events import (
    AssistantDelta,
    CompactionDecided,
    CompactionFailed,
    CompactionSkipped,
    CompactionWaited,
    Event,
    EventBus,
    HistoryCompacted,
    LogRepaired,
    Microcompacted,
    ProtectedChanged,
    ProtectedRefused,
    RoundCommitted,
    RoundStarted,
    SessionFailedEvent,
    SessionHibernated,
    SessionRehydrated,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)
from ._gateway import ModelGateway, ModelRequest, ModelResponse, ResponseDone, TextDelta, ToolSpec
from ._items import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    SystemMessage,
    UserMessage,
)
from ._logging import configure_logging
from ._protected import ProtectedEntry, ProtectedState
from ._records import Record, Usage
from ._replay import SessionState, replay
from ._tools import FunctionTool, ToolRegistry
from ._tools_api import Tool


def __getattr__(name: str) -> object:
    # Runtime and Session sit on top of the actors, which import this package's domain
    # modules: loading them lazily keeps "import actors" and "import runtime" acyclic.
    if name in ("Runtime", "Session"):
        from . import _runtime

        return getattr(_runtime, name)
    if name == "TurnResult":
        from actors._messages import TurnResult

        return TurnResult
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")


__all__ = [
    "AssistantDelta",
    "AssistantMessage",
    "CompactionError",
    "CompactionDecided",
    "CompactionFailed",
    "CompactionSkipped",
    "CompactionWaited",
    "CompactionSummary",
    "ConfigError",
    "ContextLengthExceeded",
    "CorruptLogError",
    "Event",
    "EventBus",
    "FencingError",
    "FunctionCall",
    "FunctionCallOutput",
    "FunctionTool",
    "HistoryCompacted",
    "HistoryEntry",
    "InvalidSessionId",
    "Item",
    "LogRepaired",
    "Microcompacted",
    "ModelAuthError",
    "ModelConnectionError",
    "ModelError",
    "ModelGateway",
    "ModelRequest",
    "ModelResponse",
    "ModelResponseError",
    "ProtectedChanged",
    "ProtectedEntry",
    "ProtectedRefused",
    "ProtectedState",
    "ProtectedStateViolation",
    "RateLimitError",
    "Record",
    "ResponseDone",
    "RoundCommitted",
    "RoundStarted",
    "Runtime",
    "Session",
    "SessionClosed",
    "SessionError",
    "SessionExists",
    "SessionFailed",
    "SessionFailedEvent",
    "SessionHibernated",
    "SessionRehydrated",
    "SessionNotFound",
    "SessionState",
    "Settings",
    "StoreError",
    "StowageError",
    "SystemMessage",
    "TextDelta",
    "Tool",
    "ToolFinished",
    "ToolRegistry",
    "ToolSpec",
    "ToolStarted",
    "TurnFinished",
    "TurnResult",
    "Usage",
    "UserMessage",
    "configure_logging",
    "new_session_id",
    "replay",
    "validate_session_id",
]
