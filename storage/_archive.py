"""What the SQL stores share to keep a long session's hot table small: which records move to
the archive table, up to which seq, and what a resume still needs from the moved range.

A record may move once a compaction covers it (``seq <= covers_through``) and that compaction
was recorded before the retention cutoff: resume (``read_tail``) reads only the session record
and what follows the newest compaction's ``covers_through``, so the moved rows are never read
again on the hot path. Everything else still reads them: ``read`` (``show``, ``export``, a
fork's parent, ``recall_artifact``) and ``read_range``/``search_log`` read the archive and the
hot table as one log.

Four kinds stay hot wherever they stand, since what a session runs with is folded from them on
every resume (``read_identity``): the session record, ``settings_changed``, ``rewind`` and
``forked_from``. They are few and small, so the hot table still stops growing.

The stores find the kept kinds and the compactions by the head of the stored line (the codec
writes ``v``, ``seq``, ``ts``, ``type`` first): a match is only a candidate, decoded and
checked here, so a line whose text happens to hold the same words costs a decode, never a
wrong answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from stowage.core import (
    CompactionRecord,
    CorruptLogError,
    ForkedFromRecord,
    Record,
    RewindRecord,
    SessionRecord,
    SettingsChangedRecord,
)

from ._codec import decode_record

__all__ = [
    "ARCHIVE_BATCH",
    "ArchivePass",
    "HEAD_CHARS",
    "IDENTITY_KINDS",
    "ArchiveReport",
    "archive_through",
    "decode_candidates",
    "head_like",
    "identity_records",
]

#: rows one archive transaction moves: big enough to be quick, small enough that a worker's
#: append to the same session never waits long behind it
ARCHIVE_BATCH = 5_000

#: characters of a stored line that hold its ``type`` (``{"v":1,"seq":…,"ts":"…","type":…``)
HEAD_CHARS = 200

#: record types resume folds from the whole log, never archived
IDENTITY_KINDS = ("session", "settings_changed", "rewind", "forked_from")

_IDENTITY_TYPES = (SessionRecord, SettingsChangedRecord, RewindRecord, ForkedFromRecord)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveReport:
    """What archiving did to one session: rows moved, and the seq archived through."""

    session_id: str
    moved: int
    archived_through: int


def head_like(kind: str) -> str:
    """A ``LIKE`` pattern that the head of every stored line of type ``kind`` matches."""
    return f'%"type":"{kind}"%'


def archive_through(candidates: Iterable[Record], *, cutoff: datetime, tail_from: int) -> int:
    """The seq a session may be archived through (0: none); never at or past ``tail_from``."""
    through = 0
    for record in candidates:
        if not isinstance(record, CompactionRecord):
            continue
        try:
            when = datetime.fromisoformat(record.ts)
        except ValueError:
            continue
        if when.tzinfo is None or when > cutoff:
            continue
        through = max(through, record.covers_through)
    return max(0, min(through, tail_from - 1))


def identity_records(candidates: Iterable[Record]) -> tuple[Record, ...]:
    """The records among ``candidates`` that resume folds a session's identity from. Pure."""
    return tuple(r for r in candidates if isinstance(r, _IDENTITY_TYPES))


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivePass:
    """One run of ``archive`` over a store: what moves, in batches of ``batch`` seqs."""

    cutoff: datetime
    batch: int
    on_batch: Callable[[str, int], None] | None = None

    async def move(
        self,
        session_id: str,
        candidates: Iterable[Record],
        *,
        tail_from: int,
        archived: int,
        move: Callable[[int, int], Awaitable[int]],
    ) -> ArchiveReport:
        """Archive what ``candidates`` let move, one ``move(first, last)`` transaction a batch."""
        through = archive_through(candidates, cutoff=self.cutoff, tail_from=tail_from)
        moved = 0
        first = max(archived + 1, 2)  # seq 1, the session record, stays hot
        while first <= through:
            last = min(through, first + self.batch - 1)
            count = await move(first, last)
            moved += count
            if self.on_batch is not None:
                self.on_batch(session_id, count)
            first = last + 1
        return ArchiveReport(
            session_id=session_id, moved=moved, archived_through=max(archived, through)
        )


def decode_candidates(rows: Iterable[tuple[int, str]], *, where: str) -> list[Record]:
    """Decode candidate ``(seq, body)`` rows; ``CorruptLogError`` naming ``where``."""
    out: list[Record] = []
    for seq, body in rows:
        try:
            out.append(decode_record(body))
        except ValueError as exc:
            raise CorruptLogError(str(exc), path=where, line=seq) from None
    return out
