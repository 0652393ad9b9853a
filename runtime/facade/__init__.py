"""The facade users hold: ``Runtime`` hosts sessions and their actors, ``Session`` is one of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from stowage.actors import TurnResult

    from ._descriptors import DescriptorUse, descriptor_use
    from ._figures import TokenFigure, token_figures
    from ._gc import GC_YOUNG_THRESHOLD, tune_gc
    from ._identity import RecordedBudget, recorded_budget, recorded_usable, session_identity
    from ._runtime import Runtime
    from ._session import Session

__all__ = [
    "TurnResult",
    "DescriptorUse", "descriptor_use",
    "TokenFigure", "token_figures",
    "GC_YOUNG_THRESHOLD", "tune_gc",
    "RecordedBudget", "recorded_budget", "recorded_usable", "session_identity",
    "Runtime",
    "Session",
]  # fmt: skip

#: the names each module defines, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "stowage.actors": "TurnResult",
    "._descriptors": "DescriptorUse descriptor_use",
    "._figures": "TokenFigure token_figures",
    "._gc": "GC_YOUNG_THRESHOLD tune_gc",
    "._identity": "RecordedBudget recorded_budget recorded_usable session_identity",
    "._runtime": "Runtime",
    "._session": "Session",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
