"""Python hooks around a compaction: look at it before it is planned (and add focus text, or
refuse a manual one), and after it landed.

``Runtime(settings, compaction_hooks=CompactionHooks(before=..., after=...))``. ``before`` runs
in the session's compactor, before the summary request, and may be sync or async; ``after``
runs on the event bus like any subscriber (sync; start a task for slow work). A hook that
raises anything but ``CompactionVetoed`` is logged and ignored: a broken hook never stops the
compaction that keeps a session inside its window.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias

from ._events import HistoryCompacted

__all__ = ["BeforeCompaction", "CompactionAbout", "CompactionHooks", "CompactionVetoed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionAbout:
    """A full compaction about to be planned: which session and round, whether a person asked
    for it (``manual``), why, on how many tokens, and the focus asked for so far."""

    session_id: str
    round: int
    manual: bool
    reason: str
    tokens: int | None
    focus: str | None


class CompactionVetoed(Exception):
    """Raised by a ``before`` hook to refuse a **manual** compaction (``session.compact``
    then returns False, and a ``CompactionSkipped`` event carries the message). An automatic
    one cannot be refused: the window needs it; the veto is logged and the compaction goes on.
    """


#: ``before(about)`` returns extra focus text for the summary (or None); may be async
BeforeCompaction: TypeAlias = Callable[[CompactionAbout], "Awaitable[str | None] | str | None"]
#: ``after(event)`` observes a compaction that landed (a full one or the no-model fallback)
AfterCompaction: TypeAlias = Callable[[HistoryCompacted], None]


@dataclass(frozen=True, slots=True)
class CompactionHooks:
    """The hooks of a runtime's sessions; either may be None."""

    before: BeforeCompaction | None = None
    after: AfterCompaction | None = None
