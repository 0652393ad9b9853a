"""Finding the records of one session's log that may hold some words (``search_history``).

A compacted session's model sees a summary, but the log still holds every word that was said,
read and answered. Searching it belongs to the store, because each store can narrow it
cheaply where the bytes are: SQLite with ``LIKE``, PostgreSQL with ``ILIKE``, both over the
rows of one session in windows of its primary key, and JSONL with one streaming pass over the
session's file. The store only narrows: it returns every item record whose stored line holds
each searchable word (ASCII letters compared without case), a superset of the records whose
text does. Which of them really match, how often, their snippets and their rank are decided
once, over the items' text, by the tool (``stowage.tools``' ``search_history``).

Why no index: a search is always within one session, which the primary key already narrows
to its own rows, and a text index over record bodies (FTS5, ``pg_trgm``, a ``tsvector``
expression) would be paid by every append of every session for a tool that is called rarely.
A search has a deadline instead: it stops between windows (between lines for JSONL) and says
how far it got.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from stowage.core import CorruptLogError, ItemRecord, LogStore, Record, SessionNotFound, StoreError

from ._codec import decode_record, encode_record

__all__ = [
    "WINDOW",
    "Found",
    "SearchableStore",
    "like_patterns",
    "line_may_match",
    "pushdown_words",
    "scan_file",
    "scan_windows",
    "search_records",
]

#: seqs one SQL query of a search covers: small enough that a deadline is kept to within one
#: query, and that a search never holds a store's connection long between appends
WINDOW = 2_000

# the characters a word may have to be matched on the stored line: JSON escapes quotes,
# backslashes and control characters, and SQLite's LIKE folds the case of ASCII letters only
_PUSHABLE = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """What a search of one log found, how far it looked, and whether it reached the end."""

    records: tuple[ItemRecord, ...]
    searched_through: int
    complete: bool


@runtime_checkable
class SearchableStore(Protocol):
    """A store that narrows a search where its records are (every store of this package)."""

    async def search_log(
        self, session_id: str, words: Sequence[str], *, deadline: float
    ) -> Found: ...


def pushdown_words(words: Iterable[str]) -> tuple[str, ...]:
    """The words a store can match on the stored line: printable ASCII, lower-cased."""
    return tuple(dict.fromkeys(w.lower() for w in words if w and all(c in _PUSHABLE for c in w)))


def like_patterns(words: Iterable[str]) -> list[str]:
    """One ``LIKE``/``ILIKE`` pattern per pushed-down word (``\\`` escapes). Raises nothing."""
    escaped = (
        w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        for w in pushdown_words(words)
    )
    return [f"%{w}%" for w in escaped]


def line_may_match(line: bytes, words: Sequence[bytes]) -> bool:
    """Whether a stored line holds every pushed-down word, ASCII case ignored. Raises nothing."""
    if not words:
        return True
    lowered = line.lower()
    return all(w in lowered for w in words)


def decode_found(rows: Iterable[tuple[int, str | bytes]], *, where: str) -> list[ItemRecord]:
    """The item records of ``(seq, line)`` rows; others are left out."""
    out: list[ItemRecord] = []
    for seq, line in rows:
        try:
            record = decode_record(line)
        except ValueError as exc:
            raise CorruptLogError(str(exc), path=where, line=seq) from None
        if isinstance(record, ItemRecord):
            out.append(record)
    return out


async def scan_windows(
    fetch: Callable[[int, int], Awaitable[Sequence[ItemRecord]]], last_seq: int, *, deadline: float
) -> Found:
    """Search ``1..last_seq`` in windows of ``WINDOW``, oldest first, until ``deadline``."""
    found: list[ItemRecord] = []
    searched = 0
    while searched < last_seq:
        if searched and time.monotonic() >= deadline:
            return Found(records=tuple(found), searched_through=searched, complete=False)
        last = min(last_seq, searched + WINDOW)
        found.extend(await fetch(searched + 1, last))
        searched = last
    return Found(records=tuple(found), searched_through=searched, complete=True)


def scan_file(path: str, session_id: str, words: Sequence[str], *, deadline: float) -> Found:
    """One blocking pass over a JSONL log, oldest first, until ``deadline``."""
    needles = [w.encode() for w in pushdown_words(words)]
    rows: list[tuple[int, bytes]] = []
    seq = 0
    complete = True
    try:
        with open(path, "rb") as file:
            for line in file:
                if not line.endswith(b"\n"):
                    break
                seq += 1
                if line_may_match(line, needles):
                    rows.append((seq, line))
                if seq % 256 == 0 and time.monotonic() >= deadline and file.peek(1):
                    complete = False
                    break
    except FileNotFoundError:
        raise SessionNotFound(f"no log for session {session_id!r} at {path}") from None
    except OSError as exc:
        raise StoreError(f"cannot search {path}: {exc}") from exc
    found = decode_found(rows, where=path)
    return Found(records=tuple(found), searched_through=seq, complete=complete)


async def search_records(
    store: LogStore, session_id: str, words: Sequence[str], deadline: float
) -> Found:
    """The records of ``session_id``'s log that may hold every word, until ``deadline``."""
    if isinstance(store, SearchableStore):
        return await store.search_log(session_id, words, deadline=deadline)
    records: Sequence[Record] = (await store.read(session_id, repair=False)).records
    needles = [w.encode() for w in pushdown_words(words)]
    kept = tuple(
        r
        for r in records
        if isinstance(r, ItemRecord) and line_may_match(encode_record(r), needles)
    )
    last = records[-1].seq if records else 0
    return Found(records=kept, searched_through=last, complete=True)
