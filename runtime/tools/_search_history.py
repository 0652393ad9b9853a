"""``search_history``: the built-in tool that finds what compaction took out of the context.

A summary keeps what its writer judged to matter; the log keeps everything. The model gives
words, the tool answers with the records that hold them all (user messages, answers, tool
calls and outputs, compacted or not): each as its reference ``R<seq>``, its kind, its number
of hits and a snippet around them. ``recall_artifact`` then reads one whole.

The store narrows (see ``stowage.storage``' search, handed to the tool as a callable, since
tools do not import the store); matching, snippets and rank are decided here and only here,
over the items' text: case-insensitive substrings, every word required, most hits first and
the newest of equals, a text repeated (a recalled output, a message said twice) shown once, by
its first record. A search has a deadline and its answer a size cap, so a common word in
a long log costs the model a bounded answer and the session a bounded wait.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import pydantic
from stowage.core import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ItemRecord,
    Record,
    UserMessage,
)

from ._registry import FunctionTool, ToolError

__all__ = [
    "DEADLINE_SECONDS",
    "MAX_LIMIT",
    "SEARCH_TOOL",
    "FindRecords",
    "FoundRecords",
    "Hit",
    "SearchArgs",
    "best_hits",
    "find_in_log",
    "item_text",
    "query_words",
    "search_history_tool",
    "snippet",
]

SEARCH_TOOL = "search_history"
#: how long one search may look before it answers with what it found so far
DEADLINE_SECONDS = 2.0
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
#: characters of text a snippet shows around its hits
SNIPPET_CHARS = 200
#: the most characters one answer holds, whatever the limit
OUTPUT_CHARS = 6_000
MAX_QUERY_WORDS = 12
_CHECK_EVERY = 64  # records matched between two looks at the clock
_SPACE = re.compile(r"\s+")
_MARK = f"{SEARCH_TOOL}: "  # how every answer starts, so that searches skip answers


class SearchArgs(pydantic.BaseModel):
    # no docstring: pydantic would send it with the schema, in every request of the session

    model_config = pydantic.ConfigDict(extra="forbid")

    query: str = pydantic.Field(max_length=500, description="words that must all appear")
    limit: int = pydantic.Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class FoundRecords(Protocol):
    """What a store's search hands back (``stowage.storage``' ``Found`` is one)."""

    @property
    def records(self) -> Sequence[ItemRecord]: ...
    @property
    def searched_through(self) -> int: ...
    @property
    def complete(self) -> bool: ...


#: ``find(words, deadline)``: the records of the session's log that may hold every word,
#: searched until ``deadline`` (``time.monotonic()``)
FindRecords = Callable[[Sequence[str], float], Awaitable[FoundRecords]]


@dataclass(frozen=True, slots=True, kw_only=True)
class _LogFound:
    records: tuple[ItemRecord, ...]
    searched_through: int
    complete: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    """One matching record: its seq, what it is, how many times the words occur, a snippet."""

    seq: int
    kind: str
    hits: int
    snippet: str


def find_in_log(read_log: Callable[[], Awaitable[Sequence[Record]]]) -> FindRecords:
    """A ``find`` over the whole log, for a store without search. Raises what ``read_log`` does."""

    async def find(words: Sequence[str], deadline: float) -> FoundRecords:
        records = await read_log()
        items = tuple(r for r in records if isinstance(r, ItemRecord))
        last = records[-1].seq if records else 0
        return _LogFound(records=items, searched_through=last, complete=True)

    return find


def query_words(query: str) -> tuple[str, ...]:
    """The distinct lower-cased words of ``query``."""
    words = tuple(dict.fromkeys(query.lower().split()))
    if not words:
        raise ToolError("empty query: give one or more words to search the session's history for")
    if len(words) > MAX_QUERY_WORDS:
        raise ToolError(
            f"query has {len(words)} words; give at most {MAX_QUERY_WORDS} (every word must appear)"
        )
    return words


def item_text(item: Item) -> tuple[str, str] | None:
    """``(kind, text)`` of a searchable item; None for system messages and summaries."""
    match item:
        case UserMessage(text=text):
            return "user message", text
        case AssistantMessage(text=text):
            return "assistant answer", text
        case FunctionCall(name=name, arguments=arguments):
            return f"call of {name}", arguments
        case FunctionCallOutput(output=output):
            return "tool output", output
    return None


def count_hits(lowered: str, words: Sequence[str]) -> int:
    """Occurrences of ``words`` in ``lowered`` (a lower-cased text); 0 unless every word occurs."""
    total = 0
    for word in words:
        found = lowered.count(word)
        if not found:
            return 0
        total += found
    return total


def snippet(text: str, words: Sequence[str], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` around its rarest word, ``…`` where cut."""
    flat = _SPACE.sub(" ", text).strip()
    lowered = flat.lower()
    present = [w for w in words if w in lowered] or [""]
    rarest = min(present, key=lambda w: (lowered.count(w), -len(w)))
    at = lowered.find(rarest) if rarest else 0
    start = max(0, min(at - width // 3, len(flat) - width))
    end = min(len(flat), start + width)
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")


def best_hits(
    records: Sequence[ItemRecord], words: Sequence[str], limit: int, *, deadline: float
) -> tuple[list[Hit], int, int | None]:
    """The best matches, how many match, and the seq the deadline stopped at (None: none)."""
    best: list[tuple[int, int, ItemRecord, str]] = []
    seen: set[int] = set()  # hashes of the matched texts, not the texts: outputs can be huge
    matched = 0
    for index, record in enumerate(records):
        if index and index % _CHECK_EVERY == 0 and time.monotonic() >= deadline:
            return _hits(best, words), matched, record.seq
        found = item_text(record.item)
        if found is None or _is_search_step(record.item):
            continue
        hits = count_hits(found[1].lower(), words)
        if not hits or hash(found[1]) in seen:
            continue
        seen.add(hash(found[1]))
        matched += 1
        entry = (hits, record.seq, record, found[0])
        if len(best) < limit:
            heapq.heappush(best, entry)
        elif entry[:2] > best[0][:2]:
            heapq.heapreplace(best, entry)
    return _hits(best, words), matched, None


def _is_search_step(item: Item) -> bool:
    """A search's own call or answer, left out: it would always be the newest hit."""
    match item:
        case FunctionCall(name=name):
            return name == SEARCH_TOOL
        case FunctionCallOutput(output=output):
            return output.startswith(_MARK)
    return False


def _hits(best: list[tuple[int, int, ItemRecord, str]], words: Sequence[str]) -> list[Hit]:
    ordered = sorted(best, key=lambda e: (e[0], e[1]), reverse=True)
    out = []
    for hits, seq, record, kind in ordered:
        text = item_text(record.item)
        assert text is not None
        out.append(Hit(seq=seq, kind=kind, hits=hits, snippet=snippet(text[1], words)))
    return out


def render(
    query: str,
    hits: Sequence[Hit],
    matched: int,
    *,
    searched_through: int,
    complete: bool,
    reader: str,
) -> str:
    """The tool's answer, at most ``OUTPUT_CHARS``. Raises nothing."""
    if complete:
        scope = f"searched all {searched_through} records"
    else:
        scope = (
            f"search stopped after {searched_through} records at the {DEADLINE_SECONDS:g} s "
            "limit: later records were not searched; use more specific words"
        )
    if not hits:
        return f"{_MARK}no record holds every word of {query!r} ({scope})"
    held = "1 record holds" if matched == 1 else f"{matched} records hold"
    head = f"{_MARK}{held} every word of {query!r}; the best {len(hits)} ({scope}):"
    tail = f"Read one whole with {reader}(ref='R<n>')."
    lines = [head]
    size = len(head) + len(tail) + 2
    for hit in hits:
        line = f"R{hit.seq} ({hit.kind}, {hit.hits} hits): {hit.snippet}"
        if size + len(line) + 1 > OUTPUT_CHARS:
            lines.append(f"[{len(hits) - len(lines) + 1} more cut: the answer is capped]")
            break
        lines.append(line)
        size += len(line) + 1
    return "\n".join([*lines, tail])


def search_history_tool(
    find: FindRecords, *, reader: str = "recall_artifact"
) -> FunctionTool[SearchArgs]:
    """The tool over one session's log: ``find`` narrows its records (a store's search, or
    ``find_in_log``), ``reader`` is the tool that reads a reference whole. Raises nothing;
    the tool raises ``ToolError`` for an empty query."""

    async def search(args: SearchArgs) -> str:
        words = query_words(args.query)
        deadline = time.monotonic() + DEADLINE_SECONDS
        found = await find(words, deadline)
        hits, matched, stopped = best_hits(found.records, words, args.limit, deadline=deadline)
        searched = found.searched_through if stopped is None else stopped - 1
        return render(
            args.query,
            hits,
            matched,
            searched_through=searched,
            complete=found.complete and stopped is None,
            reader=reader,
        )

    return FunctionTool(
        name=SEARCH_TOOL,
        description=(
            "Find records of this session's whole history, summarized parts too, holding "
            f"every word given: R<n> and a snippet each; {reader} reads one."
        ),
        args_model=SearchArgs,
        fn=search,
    )
