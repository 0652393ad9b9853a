"""A read-only web console over a store: sessions, each session's timeline, its context-size
curve against the watermarks, and one card per compaction; live over server-sent events.

Needs the ``[server]`` extra (Starlette, uvicorn, Jinja2). ``stowage console`` starts it.
"""

from __future__ import annotations

from ._app import create_app
from ._serve import serve_console
from ._source import StoreReader
from ._views import (
    ChartPoint,
    CompactionCard,
    ProtectedRow,
    SessionRow,
    SessionView,
    TimelineEntry,
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
