"""Paging a long session: the timeline by round, the compaction cards by record, newest first.

A session of 10,000 rounds is one log of 40,000 records; a page shows ``PAGE_ROUNDS`` of its
rounds and ``PAGE_CARDS`` of its compactions, and a link asks for the page before. Pages are
cut at record numbers (seq), which never change once written, so the page a reader scrolled to
stays put while the session grows: a live refresh asks for everything from the first record
it shows (``from``), and the older pages below it are still the right ones.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stowage.core import Record, RoundCommittedRecord

__all__ = [
    "PAGE_CARDS",
    "PAGE_ROUNDS",
    "Block",
    "PageQuery",
    "Slice",
    "page_query",
    "round_blocks",
    "select",
]

#: rounds on one page of the timeline
PAGE_ROUNDS = 10
#: compaction cards on one page
PAGE_CARDS = 8
#: a live refresh anchored this many pages back is answered with the newest page instead
#: (the reader's older pages are dropped): a page left open all week stays small
_ANCHOR_PAGES = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """The records of one round: from the one after the previous round's commit through this round's
    ``round_committed`` (its user message, turn marks and calls come with it)."""

    first: int
    last: int
    round: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Slice:
    """Which of a sequence's parts one page shows: ``parts[start:stop]``."""

    start: int
    stop: int
    #: the page holds the newest part (a live refresh may add to it)
    newest: bool
    #: how many parts are older than the page
    older: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PageQuery:
    """What a request asked of the session page; each None: the newest page."""

    #: the timeline page before the round block starting at this seq
    before: int | None = None
    #: the timeline from the round block starting at this seq on (a live refresh)
    since: int | None = None
    cards_before: int | None = None
    cards_since: int | None = None
    #: only one section's older page ("timeline" or "cards"), for a "show older" link
    part: str | None = None


_PARTS = ("timeline", "cards")
_NUMBERS = {
    "before": "before",
    "from": "since",
    "cards_before": "cards_before",
    "cards_from": "cards_since",
}


def page_query(params: Mapping[str, str]) -> PageQuery:
    """The page a query string asks for. Raises ``ValueError`` naming the bad parameter: a
    record number that is not a positive integer, or an unknown ``part``."""
    found: dict[str, int] = {}
    for name, field in _NUMBERS.items():
        raw = params.get(name)
        if raw is None:
            continue
        if not raw.isascii() or not raw.isdigit() or int(raw) < 1 or len(raw) > 12:
            raise ValueError(f"{name}={raw[:40]!r}: give a record number (a positive integer)")
        found[field] = int(raw)
    part = params.get("part")
    if part is not None and part not in _PARTS:
        raise ValueError(f"part={part[:40]!r}: give one of {', '.join(_PARTS)}")
    return PageQuery(part=part, **found)


def round_blocks(records: Sequence[Record]) -> tuple[Block, ...]:
    """``records`` cut after each ``round_committed``, oldest first."""
    blocks: list[Block] = []
    start: int | None = None
    for record in records:
        if start is None:
            start = record.seq
        if isinstance(record, RoundCommittedRecord):
            blocks.append(Block(first=start, last=record.seq, round=record.round))
            start = None
    if start is not None:
        blocks.append(Block(first=start, last=records[-1].seq, round=None))
    return tuple(blocks)


def select(starts: Sequence[int], *, before: int | None, since: int | None, size: int) -> Slice:
    """The page of parts (each known by its first seq, ``starts`` ascending) a reader asked
    for: the ``size`` parts before ``before``; every part from ``since`` on, when ``since``
    starts one and that is at most ``_ANCHOR_PAGES`` pages; else the newest ``size``."""
    count = len(starts)
    if before is not None:
        stop = bisect_left(starts, before)
        start = max(0, stop - size)
        return Slice(start=start, stop=stop, newest=stop == count, older=start)
    if since is not None:
        start = bisect_left(starts, since)
        if start < count and starts[start] == since and count - start <= _ANCHOR_PAGES * size:
            return Slice(start=start, stop=count, newest=True, older=start)
    start = max(0, count - size)
    return Slice(start=start, stop=count, newest=True, older=start)
