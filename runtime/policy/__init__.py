"""The compaction policy, pure: token accounting, budgets, watermarks, the seed's threshold
rule, summary requests, the deterministic fallback and the log check. Imports only core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from ._budget import (
        Budget,
        effective_threshold,
        lookup_model,
        resolve_budget,
        summary_input_budget,
    )
    from ._cache import (
        CACHE_BLOCK_TOKENS,
        CacheFigures,
        CacheHit,
        PrefixCache,
        cache_figures,
        cache_key_for,
        session_cache_figures,
    )
    from ._capabilities import (
        CAPABILITIES,
        Capabilities,
        capabilities_for,
        capabilities_from_model_info,
        check_tool_count,
    )
    from ._check import check_log
    from ._compaction import (
        CompactionDecision,
        build_summary_request,
        decide_compaction,
        summary_view,
    )
    from ._fallback import digest, fallback_summary
    from ._forecast import Forecast
    from ._requests_check import RequestsReport, check_requests
    from ._tokens import (
        TokenStatus,
        answer_chars,
        calibrated_ratio,
        implausible_usage,
        oversized_answer,
        ratio_from_stated,
        request_chars,
        token_status,
    )
    from ._turns import irreducible_tokens, loop_message, reattach_seqs, safe_cover
    from ._watermarks import (
        MIN_STUB_CHARS,
        PolicyDecision,
        Watermarks,
        compaction_cut,
        decide,
        drop_oldest_rounds,
        microcompact_batch,
        microcompact_candidates,
        round_groups,
        rounds_to_hard_mark,
        tokens_after_compaction,
        turn_round_cuts,
        turn_rounds,
    )
    from ._window import (
        MIN_HISTORY_TOKENS,
        check_window,
        compaction_shrinks,
        fixed_request_tokens,
    )

__all__ = [
    "CAPABILITIES",
    "Capabilities",
    "capabilities_for",
    "capabilities_from_model_info",
    "check_tool_count",
    "RequestsReport",
    "check_requests",
    "Forecast",
    "irreducible_tokens",
    "loop_message",
    "reattach_seqs",
    "safe_cover",
    "CACHE_BLOCK_TOKENS",
    "CacheFigures",
    "CacheHit",
    "PrefixCache",
    "cache_figures",
    "cache_key_for",
    "session_cache_figures",
    "Budget",
    "CompactionDecision",
    "MIN_HISTORY_TOKENS",
    "MIN_STUB_CHARS",
    "PolicyDecision",
    "TokenStatus",
    "Watermarks",
    "build_summary_request",
    "summary_view",
    "answer_chars",
    "calibrated_ratio",
    "check_log",
    "check_window",
    "compaction_cut",
    "compaction_shrinks",
    "decide",
    "decide_compaction",
    "digest",
    "drop_oldest_rounds",
    "effective_threshold",
    "fallback_summary",
    "fixed_request_tokens",
    "implausible_usage",
    "oversized_answer",
    "lookup_model",
    "microcompact_batch",
    "rounds_to_hard_mark",
    "microcompact_candidates",
    "ratio_from_stated",
    "request_chars",
    "resolve_budget",
    "round_groups",
    "summary_input_budget",
    "token_status",
    "tokens_after_compaction",
    "turn_round_cuts",
    "turn_rounds",
]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "CAPABILITIES": "._capabilities",
    "Capabilities": "._capabilities",
    "capabilities_for": "._capabilities",
    "capabilities_from_model_info": "._capabilities",
    "check_tool_count": "._capabilities",
    "RequestsReport": "._requests_check",
    "check_requests": "._requests_check",
    "Budget": "._budget",
    "effective_threshold": "._budget",
    "lookup_model": "._budget",
    "resolve_budget": "._budget",
    "summary_input_budget": "._budget",
    "CACHE_BLOCK_TOKENS": "._cache",
    "CacheFigures": "._cache",
    "CacheHit": "._cache",
    "PrefixCache": "._cache",
    "cache_figures": "._cache",
    "cache_key_for": "._cache",
    "session_cache_figures": "._cache",
    "check_log": "._check",
    "CompactionDecision": "._compaction",
    "build_summary_request": "._compaction",
    "decide_compaction": "._compaction",
    "summary_view": "._compaction",
    "digest": "._fallback",
    "fallback_summary": "._fallback",
    "Forecast": "._forecast",
    "TokenStatus": "._tokens",
    "answer_chars": "._tokens",
    "calibrated_ratio": "._tokens",
    "implausible_usage": "._tokens",
    "oversized_answer": "._tokens",
    "ratio_from_stated": "._tokens",
    "request_chars": "._tokens",
    "token_status": "._tokens",
    "irreducible_tokens": "._turns",
    "loop_message": "._turns",
    "reattach_seqs": "._turns",
    "safe_cover": "._turns",
    "MIN_STUB_CHARS": "._watermarks",
    "PolicyDecision": "._watermarks",
    "Watermarks": "._watermarks",
    "compaction_cut": "._watermarks",
    "decide": "._watermarks",
    "drop_oldest_rounds": "._watermarks",
    "microcompact_batch": "._watermarks",
    "microcompact_candidates": "._watermarks",
    "round_groups": "._watermarks",
    "rounds_to_hard_mark": "._watermarks",
    "tokens_after_compaction": "._watermarks",
    "turn_round_cuts": "._watermarks",
    "turn_rounds": "._watermarks",
    "MIN_HISTORY_TOKENS": "._window",
    "check_window": "._window",
    "compaction_shrinks": "._window",
    "fixed_request_tokens": "._window",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
