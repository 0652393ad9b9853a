"""The newest session views the console made, so turning the pages of a long session reads and folds
its log once, not once a page."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

from stowage.core import TornTail

from ._views import SessionView

__all__ = ["ViewCache"]


@dataclass(eq=False)
class ViewCache:
    """Up to ``size`` views, the least recently used dropped first."""

    size: int = 4
    _views: OrderedDict[str, tuple[Hashable, SessionView, TornTail | None]] = field(
        default_factory=OrderedDict
    )

    def get(self, session_id: str, made_at: Hashable) -> tuple[SessionView, TornTail | None] | None:
        """The view of ``session_id`` made at ``made_at`` and its log's torn tail, if kept."""
        kept = self._views.get(session_id)
        if kept is None or kept[0] != made_at:
            return None
        self._views.move_to_end(session_id)
        return kept[1], kept[2]

    def put(
        self, session_id: str, made_at: Hashable, view: SessionView, torn: TornTail | None
    ) -> None:
        """Keep ``view`` (made at ``made_at``), dropping the least recently used past ``size``."""
        self._views[session_id] = (made_at, view, torn)
        self._views.move_to_end(session_id)
        while len(self._views) > self.size:
            self._views.popitem(last=False)
