"""The cyclic GC's thresholds for a process that serves thousands of sessions.

Python's defaults (700, 10, 10) suit short scripts. A runtime with thousands of live sessions
keeps a large heap of long-lived objects, and the objects of a turn in flight live seconds
when its rounds queue for model-call places: long enough to be promoted out of the young
generation and scanned again in the middle one, every scan following their references into
that heap. Measured with ``stowage load --sessions 10000`` (README, *Performance*), Python's
defaults spent more CPU in the GC than in the HTTP client; ``tune_gc`` sets the young
generation's threshold and collects the middle generation ten times less often.
"""

from __future__ import annotations

import gc

__all__ = ["GC_YOUNG_THRESHOLD", "tune_gc"]

#: young-generation threshold ``stowage worker`` and ``stowage load`` run with
GC_YOUNG_THRESHOLD = 200_000
#: the middle generation is collected every this many young collections (Python: 10)
_MIDDLE_THRESHOLD = 100


def tune_gc(young: int = GC_YOUNG_THRESHOLD) -> tuple[int, int, int]:
    """Set the cyclic GC's thresholds for many live sessions: ``young`` for the young
    generation, at least 100 for the middle one (a higher one is kept), the oldest one's
    unchanged. Process-wide, so the application decides (a worker process calls it at
    start). Returns the thresholds it replaced, for ``gc.set_threshold(*previous)``. Raises
    ``ValueError`` for ``young`` < 1.

    Cyclic garbage promoted to the middle generation waits longer for its collection; at
    10,000 sessions the peak RSS did not move."""
    if young < 1:
        raise ValueError(f"the young generation's GC threshold must be >= 1, got {young}")
    previous = gc.get_threshold()
    gc.set_threshold(young, max(_MIDDLE_THRESHOLD, previous[1]), previous[2])
    return previous
