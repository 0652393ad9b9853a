"""The facade users hold: ``Runtime`` hosts sessions and their actors, ``Session`` is one of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from stowage.actors import TurnResult

    from ._descriptors import DescriptorUse, descriptor_use
    from ._figures import SessionFigures, TokenFigure, session_figures, token_figures
    from ._gc import GC_YOUNG_THRESHOLD, tune_gc
    from ._identity import RecordedBudget, recorded_budget, recorded_usable, session_identity
    from ._runtime import Runtime
    from ._session import Session

__all__ = [
    "TurnResult",
    "DescriptorUse", "descriptor_use",
    "SessionFigures", "TokenFigure", "session_figures", "token_figures",
    "GC_YOUNG_THRESHOLD", "tune_gc",
    "RecordedBudget", "recorded_budget", "recorded_usable", "session_identity",
    "Runtime",
    "Session",
]  # fmt: skip

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "TurnResult": "stowage.actors",
    "DescriptorUse": "._descriptors",
    "descriptor_use": "._descriptors",
    "SessionFigures": "._figures",
    "TokenFigure": "._figures",
    "session_figures": "._figures",
    "token_figures": "._figures",
    "GC_YOUNG_THRESHOLD": "._gc",
    "tune_gc": "._gc",
    "RecordedBudget": "._identity",
    "recorded_budget": "._identity",
    "recorded_usable": "._identity",
    "session_identity": "._identity",
    "Runtime": "._runtime",
    "Session": "._session",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
