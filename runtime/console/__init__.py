"""A read-only web console over a store: sessions, each session's timeline, its context-size
curve against the watermarks, and one card per compaction; live over server-sent events.

Needs the ``[server]`` extra (Starlette, uvicorn, Jinja2). ``stowage console`` starts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from ._app import create_app
    from ._cards import CompactionCard
    from ._serve import serve_console
    from ._source import StoreReader
    from ._timeline import TimelineEntry
    from ._views import (
        ChartPoint,
        ProtectedRow,
        SessionRow,
        SessionView,
        session_row,
        session_view,
    )

__all__ = [
    "ChartPoint",
    "CompactionCard",
    "ProtectedRow",
    "SessionRow",
    "SessionView",
    "StoreReader",
    "TimelineEntry",
    "create_app",
    "serve_console",
    "session_row",
    "session_view",
]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "create_app": "._app",
    "serve_console": "._serve",
    "StoreReader": "._source",
    "ChartPoint": "._views",
    "CompactionCard": "._cards",
    "ProtectedRow": "._views",
    "SessionRow": "._views",
    "SessionView": "._views",
    "TimelineEntry": "._timeline",
    "session_row": "._views",
    "session_view": "._views",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
