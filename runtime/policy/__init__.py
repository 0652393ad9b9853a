"""The compaction policy, pure: token accounting, budgets, watermarks, the seed's threshold
rule, summary requests, the deterministic fallback and the log check. Imports only core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from ._accounting import MIN_OUTPUT_CHARS, USER_SHARE, Accounting, stub_savings
    from ._budget import (
        Budget,
        effective_threshold,
        known_budget,
        lookup_model,
        resolve_budget,
        summary_input_budget,
        window_budget,
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
        FOCUS_MAX_CHARS,
        CompactionDecision,
        build_summary_request,
        clip_to_fit,
        decide_compaction,
        summary_view,
    )
    from ._cost import (
        CompactionCost,
        CostReport,
        RequestCost,
        ResumeHit,
        billed_usage,
        money,
        session_cost,
    )
    from ._fallback import digest, fallback_summary
    from ._forecast import Forecast
    from ._machine import MIN_GROWTH, step
    from ._machine_terms import (
        Action,
        Answer,
        Apply,
        Boundary,
        Decided,
        Event,
        Hold,
        Job,
        JobKind,
        MachineState,
        Manual,
        Phase,
        Skipped,
        Stop,
        Stub,
        Summarize,
        SummaryFailed,
        SummaryReady,
    )
    from ._prices import COST_EXTRA_HINT, Charge, CustomPrice, PriceBook, Prices
    from ._probes import draw_probes, fit_probes, kept_section, missed_probes, probe_focus
    from ._requests_check import RequestsReport, check_requests
    from ._round_index import RoundIndex
    from ._ruler import Ruler, View
    from ._snapshot import BoundaryCause, Plan, Refusal, Snapshot, Stubs, snapshot_of
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
    from ._window import MIN_HISTORY_TOKENS, check_window, compaction_shrinks, fixed_request_tokens

__all__ = [
    "MIN_OUTPUT_CHARS", "USER_SHARE", "Accounting", "stub_savings",
    "Budget", "effective_threshold", "known_budget", "lookup_model", "resolve_budget",
    "summary_input_budget", "window_budget",
    "CACHE_BLOCK_TOKENS", "CacheFigures", "CacheHit", "PrefixCache", "cache_figures",
    "cache_key_for", "session_cache_figures",
    "CAPABILITIES", "Capabilities", "capabilities_for", "capabilities_from_model_info",
    "check_tool_count",
    "check_log",
    "FOCUS_MAX_CHARS", "CompactionDecision", "build_summary_request", "clip_to_fit",
    "decide_compaction", "summary_view",
    "CompactionCost", "CostReport", "RequestCost", "ResumeHit", "billed_usage", "money",
    "session_cost",
    "digest", "fallback_summary",
    "Forecast",
    "MIN_GROWTH", "step",
    "Action", "Answer", "Apply", "Boundary", "Decided", "Event", "Hold", "Job", "JobKind",
    "MachineState", "Manual", "Phase", "Skipped", "Stop", "Stub", "Summarize", "SummaryFailed",
    "SummaryReady",
    "COST_EXTRA_HINT", "Charge", "CustomPrice", "PriceBook", "Prices",
    "draw_probes", "fit_probes", "kept_section", "missed_probes", "probe_focus",
    "RequestsReport", "check_requests",
    "RoundIndex",
    "Ruler", "View",
    "BoundaryCause", "Plan", "Refusal", "Snapshot", "Stubs", "snapshot_of",
    "TokenStatus", "answer_chars", "calibrated_ratio", "implausible_usage", "oversized_answer",
    "ratio_from_stated", "request_chars", "token_status",
    "irreducible_tokens", "loop_message", "reattach_seqs", "safe_cover",
    "MIN_STUB_CHARS", "PolicyDecision", "Watermarks", "compaction_cut", "decide",
    "drop_oldest_rounds", "microcompact_batch", "microcompact_candidates", "round_groups",
    "rounds_to_hard_mark", "tokens_after_compaction", "turn_round_cuts", "turn_rounds",
    "MIN_HISTORY_TOKENS", "check_window", "compaction_shrinks", "fixed_request_tokens",
]  # fmt: skip

#: the names each module defines, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "._accounting": "MIN_OUTPUT_CHARS USER_SHARE Accounting stub_savings",
    "._budget": """
        Budget effective_threshold known_budget lookup_model resolve_budget summary_input_budget
        window_budget
    """,
    "._cache": """
        CACHE_BLOCK_TOKENS CacheFigures CacheHit PrefixCache cache_figures cache_key_for
        session_cache_figures
    """,
    "._capabilities": """
        CAPABILITIES Capabilities capabilities_for capabilities_from_model_info check_tool_count
    """,
    "._check": "check_log",
    "._compaction": """
        FOCUS_MAX_CHARS CompactionDecision build_summary_request clip_to_fit decide_compaction
        summary_view
    """,
    "._cost": "CompactionCost CostReport RequestCost ResumeHit billed_usage money session_cost",
    "._fallback": "digest fallback_summary",
    "._forecast": "Forecast",
    "._machine": "MIN_GROWTH step",
    "._machine_terms": """
        Action Answer Apply Boundary Decided Event Hold Job JobKind MachineState Manual Phase
        Skipped Stop Stub Summarize SummaryFailed SummaryReady
    """,
    "._prices": "COST_EXTRA_HINT Charge CustomPrice PriceBook Prices",
    "._probes": "draw_probes fit_probes kept_section missed_probes probe_focus",
    "._requests_check": "RequestsReport check_requests",
    "._round_index": "RoundIndex",
    "._ruler": "Ruler View",
    "._snapshot": "BoundaryCause Plan Refusal Snapshot Stubs snapshot_of",
    "._tokens": """
        TokenStatus answer_chars calibrated_ratio implausible_usage oversized_answer
        ratio_from_stated request_chars token_status
    """,
    "._turns": "irreducible_tokens loop_message reattach_seqs safe_cover",
    "._watermarks": """
        MIN_STUB_CHARS PolicyDecision Watermarks compaction_cut decide drop_oldest_rounds
        microcompact_batch microcompact_candidates round_groups rounds_to_hard_mark
        tokens_after_compaction turn_round_cuts turn_rounds
    """,
    "._window": "MIN_HISTORY_TOKENS check_window compaction_shrinks fixed_request_tokens",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
