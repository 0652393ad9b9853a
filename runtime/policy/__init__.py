"""The compaction policy, pure: token accounting, budgets, watermarks, the seed's threshold
rule, summary requests, the deterministic fallback and the log check. Imports only core.
"""

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
from ._check import check_log
from ._compaction import (
    CompactionDecision,
    build_summary_request,
    decide_compaction,
    summary_view,
)
from ._fallback import digest, fallback_summary
from ._forecast import Forecast
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
