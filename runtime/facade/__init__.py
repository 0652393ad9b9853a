"""The facade users hold: ``Runtime`` hosts sessions and their actors, ``Session`` is one of them."""

from stowage.actors import TurnResult

from ._gc import GC_YOUNG_THRESHOLD, tune_gc
from ._identity import RecordedBudget, recorded_budget, recorded_usable, session_identity
from ._runtime import Runtime
from ._session import Session

__all__ = [
    "GC_YOUNG_THRESHOLD",
    "RecordedBudget",
    "Runtime",
    "Session",
    "TurnResult",
    "recorded_budget",
    "recorded_usable",
    "session_identity",
    "tune_gc",
]
