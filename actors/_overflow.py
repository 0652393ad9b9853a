"""Room for a request the provider refused as too long, without a model (levels 2 to 4).

Level 1 is a summary that keeps what of the turn fits (``Control`` starts it); each further
ask for the same request goes one level deeper: 2 drops the oldest of the turn's kept rounds,
3 stubs every older output, 4 compacts everything without a model. Each level only ever
covers through the last round whose calls all have outputs.
"""

from __future__ import annotations

from dataclasses import replace

from stowage.policy import safe_cover, turn_round_cuts

from ._messages import Advice, Ask, Stubs
from ._planner import Planner, View

__all__ = ["deeper_relief"]

# outputs shorter than this are not stubbed when freeing room for a refused request
_OVERFLOW_STUB_CHARS = 200

REASON = "the provider refused the request as too long"


def deeper_relief(planner: Planner, view: View, ask: Ask, advice: Advice) -> Advice:
    """``advice`` with what level ``ask.level`` (2 or more) frees; unchanged when it frees
    nothing."""
    snap = view.snapshot
    covers = safe_cover(snap.history, snap.last_seq, snap.open_calls)
    if ask.level == 2:
        cuts = [c for c in turn_round_cuts(list(snap.history)) if c <= covers]
        if len(cuts) > 1:
            cut = planner.cut(view, ask.fit, keep_at_most=len(cuts) - 1)
            through = cuts[0] if cut >= covers else cut
            plan = planner.fallback_plan(view, f"oldest rounds dropped: {REASON}", through)
            return replace(advice, outcome=plan)
        return advice
    if ask.level == 3:
        stubs: list[Stubs] = []
        planner.stub(view, planner.decision(view), 0, stubs, min_chars=_OVERFLOW_STUB_CHARS)
        return replace(advice, stubs=tuple(stubs))
    if planner.everything_frees(view):
        plan = planner.fallback_plan(view, f"everything compacted: {REASON}", covers)
        return replace(advice, outcome=plan)
    return advice
