"""The domain: items, records, errors, events, settings, protected state, replay, and the
boundary Protocols (model gateway, log store, tool). It imports nothing else of stowage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from ._call_limiter import CallLimiter, CallPurpose
    from ._errors import (
        CompactionError,
        CompactionLoop,
        ConfigError,
        ContextLengthExceeded,
        CorruptLogError,
        DescriptorLimitReached,
        FencingError,
        IncompleteResponse,
        InvalidSessionId,
        ModelAuthError,
        ModelConnectionError,
        ModelError,
        ModelResponseError,
        ProtectedStateViolation,
        RateLimitError,
        ResponseTooLarge,
        SessionBusy,
        SessionClosed,
        SessionError,
        SessionExists,
        SessionFailed,
        SessionLeaseLost,
        SessionNotFound,
        StoreError,
        StowageError,
    )
    from ._events import (
        AssistantDelta,
        AttemptAbandoned,
        CompactionDecided,
        CompactionFailed,
        CompactionLanded,
        CompactionSkipped,
        CompactionWaited,
        Event,
        EventBus,
        HistoryCompacted,
        LogRepaired,
        Microcompacted,
        MilestoneReached,
        ModelRetrying,
        ProtectedChanged,
        ProtectedRefused,
        RoundCommitted,
        RoundStarted,
        SessionFailedEvent,
        SessionHibernated,
        SessionLeaseLostEvent,
        SessionRehydrated,
        SettingsChanged,
        ToolFinished,
        ToolStarted,
        TurnFinished,
    )
    from ._gateway import (
        CompactingGateway,
        ModelGateway,
        ModelRequest,
        ModelResponse,
        ProviderCompaction,
        ResponseDone,
        StreamEvent,
        TextDelta,
        ToolSpec,
    )
    from ._history import absorbed, apply_compaction
    from ._hooks import (
        AfterCompaction,
        BeforeCompaction,
        CompactionAbout,
        CompactionHooks,
        CompactionVetoed,
    )
    from ._identity import SessionIdentity, continue_settings, identity_from_records, identity_of
    from ._items import (
        AssistantMessage,
        CompactionSummary,
        FunctionCall,
        FunctionCallOutput,
        HistoryEntry,
        Item,
        SystemMessage,
        UserMessage,
        item_from_dict,
        item_to_dict,
    )
    from ._ledger import CallKey, Cycle, TurnLedger
    from ._limit_options import add_limit_options, limits_from_args
    from ._limits import LimitInfo, RuntimeLimits, check_limits, limit_field, limit_infos
    from ._lineage import (
        Lineage,
        LineageStore,
        effective_records,
        lineage_store,
        round_end,
        tail_records,
    )
    from ._logging import configure_logging, get_logger
    from ._manifest import LineCache, describe_manifest, request_bytes, request_manifest
    from ._projection import PREVIEW_MIN_CHARS, StubCache, build_projection, default_stub
    from ._protected import (
        ProtectedEntry,
        ProtectedState,
        Touched,
        prepare_all,
        render,
        render_touched,
        user_ops,
        verify,
    )
    from ._protected_updates import (
        UPDATES_INSTRUCTIONS,
        UPDATES_KEY,
        UpdatesReview,
        parse_summary_updates,
        review_updates,
        updates_block,
    )
    from ._records import (
        ApprovalRecord,
        CompactionFigures,
        CompactionKind,
        CompactionRecord,
        ErrorRecord,
        ForkedFromRecord,
        ItemRecord,
        ManifestSection,
        MicrocompactRecord,
        MilestoneRecord,
        ProgressRecord,
        ProtectedRecord,
        Record,
        RequestManifest,
        RewindRecord,
        RoundCommittedRecord,
        SectionName,
        SessionRecord,
        SettingsChangedRecord,
        SummaryCheck,
        TurnRecord,
        Usage,
    )
    from ._redact import REDACTED, redact_url
    from ._replay import SessionState, replay
    from ._settings import (
        DEFAULT_COMPACT_THRESHOLD,
        IDENTITY_FIELDS,
        SettingInfo,
        Settings,
        new_session_id,
        parse_rule,
        setting_infos,
        validate_session_id,
    )
    from ._sizes import entry_chars, estimate_tokens, history_chars, item_chars, tool_schema_tokens
    from ._store import (
        Durability,
        IdentityReader,
        LeaseHolder,
        LogRead,
        LogStore,
        TornTail,
        WriterLease,
    )
    from ._tool import (
        ApprovalError,
        Effect,
        EffectKind,
        OutputBudget,
        Tool,
        ToolCancelled,
        ToolContext,
        current_tool_context,
    )

__all__ = [
    "CallLimiter", "CallPurpose",
    "CompactionError", "CompactionLoop", "ConfigError", "ContextLengthExceeded", "CorruptLogError",
    "DescriptorLimitReached", "FencingError", "IncompleteResponse", "InvalidSessionId",
    "ModelAuthError", "ModelConnectionError", "ModelError", "ModelResponseError",
    "ProtectedStateViolation", "RateLimitError", "ResponseTooLarge", "SessionBusy", "SessionClosed",
    "SessionError", "SessionExists", "SessionFailed", "SessionLeaseLost", "SessionNotFound",
    "StoreError", "StowageError",
    "AssistantDelta", "AttemptAbandoned", "CompactionDecided", "CompactionFailed",
    "CompactionLanded", "CompactionSkipped", "CompactionWaited", "Event", "EventBus",
    "HistoryCompacted", "LogRepaired", "Microcompacted", "MilestoneReached", "ModelRetrying",
    "ProtectedChanged", "ProtectedRefused", "RoundCommitted", "RoundStarted", "SessionFailedEvent",
    "SessionHibernated", "SessionLeaseLostEvent", "SessionRehydrated", "SettingsChanged",
    "ToolFinished", "ToolStarted", "TurnFinished",
    "CompactingGateway", "ModelGateway", "ModelRequest", "ModelResponse", "ProviderCompaction",
    "ResponseDone", "StreamEvent", "TextDelta", "ToolSpec",
    "absorbed", "apply_compaction",
    "AfterCompaction", "BeforeCompaction", "CompactionAbout", "CompactionHooks", "CompactionVetoed",
    "SessionIdentity", "continue_settings", "identity_from_records", "identity_of",
    "AssistantMessage", "CompactionSummary", "FunctionCall", "FunctionCallOutput", "HistoryEntry",
    "Item", "SystemMessage", "UserMessage", "item_from_dict", "item_to_dict",
    "CallKey", "Cycle", "TurnLedger",
    "add_limit_options", "limits_from_args",
    "LimitInfo", "RuntimeLimits", "check_limits", "limit_field", "limit_infos",
    "Lineage", "LineageStore", "effective_records", "lineage_store", "round_end", "tail_records",
    "configure_logging", "get_logger",
    "LineCache", "describe_manifest", "request_bytes", "request_manifest",
    "PREVIEW_MIN_CHARS", "StubCache", "build_projection", "default_stub",
    "ProtectedEntry", "ProtectedState", "Touched", "prepare_all", "render", "render_touched",
    "user_ops", "verify",
    "UPDATES_INSTRUCTIONS", "UPDATES_KEY", "UpdatesReview", "parse_summary_updates",
    "review_updates", "updates_block",
    "ApprovalRecord", "CompactionFigures", "CompactionKind", "CompactionRecord", "ErrorRecord",
    "ForkedFromRecord", "ItemRecord", "ManifestSection", "MicrocompactRecord", "MilestoneRecord",
    "ProgressRecord", "ProtectedRecord", "Record", "RequestManifest", "RewindRecord",
    "RoundCommittedRecord", "SectionName", "SessionRecord", "SettingsChangedRecord", "SummaryCheck",
    "TurnRecord", "Usage",
    "REDACTED", "redact_url",
    "SessionState", "replay",
    "DEFAULT_COMPACT_THRESHOLD", "IDENTITY_FIELDS", "SettingInfo", "Settings", "new_session_id",
    "parse_rule", "setting_infos", "validate_session_id",
    "entry_chars", "estimate_tokens", "history_chars", "item_chars", "tool_schema_tokens",
    "Durability", "IdentityReader", "LeaseHolder", "LogRead", "LogStore", "TornTail", "WriterLease",
    "ApprovalError", "Effect", "EffectKind", "OutputBudget", "Tool", "ToolCancelled", "ToolContext",
    "current_tool_context",
]  # fmt: skip

#: the names each module defines, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "._call_limiter": "CallLimiter CallPurpose",
    "._errors": """
        CompactionError CompactionLoop ConfigError ContextLengthExceeded CorruptLogError
        DescriptorLimitReached FencingError IncompleteResponse InvalidSessionId ModelAuthError
        ModelConnectionError ModelError ModelResponseError ProtectedStateViolation
        RateLimitError ResponseTooLarge SessionBusy SessionClosed SessionError SessionExists
        SessionFailed SessionLeaseLost SessionNotFound StoreError StowageError
    """,
    "._events": """
        AssistantDelta AttemptAbandoned CompactionDecided CompactionFailed CompactionLanded
        CompactionSkipped CompactionWaited Event EventBus HistoryCompacted LogRepaired
        Microcompacted MilestoneReached ModelRetrying ProtectedChanged ProtectedRefused
        RoundCommitted RoundStarted SessionFailedEvent SessionHibernated SessionLeaseLostEvent
        SessionRehydrated SettingsChanged ToolFinished ToolStarted TurnFinished
    """,
    "._gateway": """
        CompactingGateway ModelGateway ModelRequest ModelResponse ProviderCompaction
        ResponseDone StreamEvent TextDelta ToolSpec
    """,
    "._history": "absorbed apply_compaction",
    "._hooks": """
        AfterCompaction BeforeCompaction CompactionAbout CompactionHooks CompactionVetoed
    """,
    "._identity": "SessionIdentity continue_settings identity_from_records identity_of",
    "._items": """
        AssistantMessage CompactionSummary FunctionCall FunctionCallOutput HistoryEntry Item
        SystemMessage UserMessage item_from_dict item_to_dict
    """,
    "._ledger": "CallKey Cycle TurnLedger",
    "._limit_options": "add_limit_options limits_from_args",
    "._limits": "LimitInfo RuntimeLimits check_limits limit_field limit_infos",
    "._lineage": "Lineage LineageStore effective_records lineage_store round_end tail_records",
    "._logging": "configure_logging get_logger",
    "._manifest": "LineCache describe_manifest request_bytes request_manifest",
    "._projection": "PREVIEW_MIN_CHARS StubCache build_projection default_stub",
    "._protected": """
        ProtectedEntry ProtectedState Touched prepare_all render render_touched user_ops verify
    """,
    "._protected_updates": """
        UPDATES_INSTRUCTIONS UPDATES_KEY UpdatesReview parse_summary_updates review_updates
        updates_block
    """,
    "._records": """
        ApprovalRecord CompactionFigures CompactionKind CompactionRecord ErrorRecord
        ForkedFromRecord ItemRecord ManifestSection MicrocompactRecord MilestoneRecord
        ProgressRecord ProtectedRecord Record RequestManifest RewindRecord RoundCommittedRecord
        SectionName SessionRecord SettingsChangedRecord SummaryCheck TurnRecord Usage
    """,
    "._redact": "REDACTED redact_url",
    "._replay": "SessionState replay",
    "._settings": """
        DEFAULT_COMPACT_THRESHOLD IDENTITY_FIELDS SettingInfo Settings new_session_id parse_rule
        setting_infos validate_session_id
    """,
    "._sizes": "entry_chars estimate_tokens history_chars item_chars tool_schema_tokens",
    "._store": "Durability IdentityReader LeaseHolder LogRead LogStore TornTail WriterLease",
    "._tool": """
        ApprovalError Effect EffectKind OutputBudget Tool ToolCancelled ToolContext
        current_tool_context
    """,
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
