"""What a request was built from: a manifest per round, and the request's canonical bytes.

A round's ``round_committed`` record carries the manifest of the request the round sent: the
sha256 of the request's canonical serialization, the sha256 of its input alone, and per
section (the leading system message, protected state, each summary, each run of history
entries by seq range, the tools) a short hash, an item count and a token estimate. Both wire
bodies are pure functions of the request, so equal canonical bytes mean equal bodies on the
same wire and endpoint.

The input sections are what the log determines: replaying it to the moment a round began and
projecting gives them again (``stowage check --requests``). The tools and the request's
settings are not in the log; their hash is recorded to show when they changed.

The canonical serialization is one JSON line per part, keys sorted: a header (model, tool
choice, output cap, cache key), each input item, each tool. Items are immutable, so the lines
of the history's entries are cached by identity, and so are the running hashes of the last
request: a request costs the lines and the hashing of what is new since the last one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ._gateway import ModelRequest, ToolSpec
from ._items import (
    CompactionSummary,
    HistoryEntry,
    Item,
    SystemMessage,
    item_to_dict,
)
from ._records import ManifestSection, RequestManifest, SectionName
from ._sizes import item_chars

__all__ = [
    "LineCache",
    "ManifestSection",
    "RequestManifest",
    "SectionName",
    "describe_manifest",
    "request_bytes",
    "request_manifest",
]

# hex digits of a section's hash: a short id, not a proof (the request hash is whole)
_SECTION_HEX = 16
_OPTIONS = orjson.OPT_SORT_KEYS
# lines of items no longer in a session's requests that its cache may keep
_STALE_LINES = 32


def _line(value: object) -> bytes:
    # copied to its size: orjson's bytes keep the buffer they grew in (eight times a 2 KB
    # output's line), and a session's cache keeps its lines between rounds
    return bytes(memoryview(orjson.dumps(value, option=_OPTIONS)))


def _header(request: ModelRequest) -> bytes:
    return _line(
        {
            "model": request.model,
            "tool_choice": request.tool_choice,
            "max_output_tokens": request.max_output_tokens,
            "cache_key": request.cache_key,
            "purpose": request.purpose,
            "parallel_tool_calls": request.parallel_tool_calls,
        }
    )


def _tool_line(spec: ToolSpec) -> bytes:
    return _line(
        {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    )


def _item_line(item: Item) -> bytes:
    return _line(item_to_dict(item))


def request_bytes(request: ModelRequest) -> bytes:
    """The canonical serialization of ``request``: header, items, tools, one line each."""
    lines = [_header(request), *map(_item_line, request.input), *map(_tool_line, request.tools)]
    return b"\n".join(lines)


class LineCache:
    """What one session's consecutive requests share, kept between them: each item's line and
    characters by item identity (items are frozen; a stubbed output is a new item each time,
    so it is never served stale), the tools' lines, and the running hashes of the last
    request's input. A round's request is the last one plus what happened since, so its
    hashes are the last ones carried on over the new lines: a request costs hashing what is
    new, not the whole history again."""

    __slots__ = ("_lines", "_previous", "_runs", "_tools")

    def __init__(self) -> None:
        self._lines: dict[int, tuple[Item, bytes, int]] = {}
        # the item lines of the last request, and its running hashes by section
        self._previous: list[bytes] = []
        self._runs: dict[tuple[str, int], _Run] = {}
        self._tools: tuple[tuple[ToolSpec, ...], list[bytes]] | None = None

    def lines(self, items: Sequence[Item]) -> list[bytes]:
        return self.entries(items)[0]

    def entries(self, items: Sequence[Item]) -> tuple[list[bytes], list[int]]:
        """The line and the characters of each of ``items``."""
        known = self._lines
        if len(known) > len(items) + _STALE_LINES:
            # what a compaction dropped goes at once, but the map is not rebuilt for every
            # request (one adds only its new items)
            known = self._lines = {id(i): h for i in items if (h := known.get(id(i))) is not None}
        lines: list[bytes] = []
        chars: list[int] = []
        for item in items:
            hit = known.get(id(item))
            if hit is None or hit[0] is not item:
                hit = known[id(item)] = (item, _item_line(item), item_chars(item))
            lines.append(hit[1])
            chars.append(hit[2])
        return lines, chars

    def tool_lines(self, tools: tuple[ToolSpec, ...]) -> list[bytes]:
        """The lines of ``tools`` (a session sends the same tuple with every request)."""
        cached = self._tools
        if cached is None or cached[0] is not tools:
            cached = self._tools = (tools, [*map(_tool_line, tools)])
        return cached[1]


@dataclass(eq=False, slots=True)
class _Run:
    """A sha256 that has read ``lead`` (if any) and then ``lines[start:end]``, a newline
    between each two."""

    lead: bytes | None
    start: int
    end: int
    hasher: Any


class _Hashes:
    """The running hashes of one request, carried on from the last request's where its lines
    are the same objects (same bytes, so the same hash), computed afresh elsewhere."""

    __slots__ = ("_common", "_lines", "_old", "new")

    def __init__(self, cache: LineCache | None, lines: list[bytes]) -> None:
        self._lines = lines
        self._old: dict[tuple[str, int], _Run] = cache._runs if cache is not None else {}
        self.new: dict[tuple[str, int], _Run] = {}
        previous = cache._previous if cache is not None else []
        common = 0
        for old, line in zip(previous, lines, strict=False):
            if old is not line:
                break
            common += 1
        self._common = common

    def run(self, name: str, start: int, end: int, lead: bytes | None = None) -> Any:
        """The hash of ``lead`` and lines ``start`` to ``end`` (kept for the next request)."""
        lines = self._lines
        old = self._old.get((name, start))
        if (
            old is not None
            and old.lead == lead
            and (old.end > start or lead is not None)  # an empty run has nothing to go on from
            and old.end <= min(end, self._common)
        ):
            hasher = old.hasher.copy()
            at = old.end
        else:
            hasher = hashlib.sha256()
            at = start
            if lead is not None:
                hasher.update(lead)
            elif start < end:
                hasher.update(lines[start])
                at += 1
        if at < end:
            # every line after the first (or after the lead) follows a newline
            hasher.update(b"\n" + b"\n".join(lines[at:end]))
        self.new[(name, start)] = _Run(lead, start, end, hasher)
        return hasher

    def digest(self, name: str, start: int, end: int) -> str:
        return str(self.run(name, start, end).hexdigest())


def _kind(item: Item, first: bool) -> SectionName:
    if isinstance(item, CompactionSummary):
        return "summary"
    if first and isinstance(item, SystemMessage):
        return "system"
    return "history"


def _sections(
    history: Sequence[HistoryEntry], has_protected: bool
) -> Iterator[tuple[SectionName, int | None, int | None, int, int]]:
    """(name, first seq, last seq, start, end) of each section of the projection of
    ``history``: runs of one kind of entry, with protected state (after the leading system
    message, where the projection puts it) a section of its own."""
    tagged: list[tuple[SectionName, int | None]] = [
        (_kind(entry.item, i == 0), entry.seq) for i, entry in enumerate(history)
    ]
    if has_protected:
        at = 1 if history and isinstance(history[0].item, SystemMessage) else 0
        tagged.insert(at, ("protected", None))
    start = 0
    for end in range(1, len(tagged) + 1):
        if end == len(tagged) or tagged[end][0] != tagged[start][0]:
            yield tagged[start][0], tagged[start][1], tagged[end - 1][1], start, end
            start = end


def request_manifest(
    request: ModelRequest,
    history: Sequence[HistoryEntry],
    *,
    has_protected: bool,
    lines: LineCache | None = None,
    chars_per_token: float = 4.0,
) -> RequestManifest:
    """The manifest of ``request``, whose input is the projection of ``history`` (with a
    protected-state message when ``has_protected``). ``lines``: what the session's requests
    share (the figures are the same with or without it).

    Raises ``ValueError`` when the input is not that projection's length.
    """
    projected = request.input
    if len(projected) != len(history) + (1 if has_protected else 0):
        raise ValueError(
            f"the request has {len(projected)} input items; its history projects to "
            f"{len(history) + (1 if has_protected else 0)}"
        )
    cache = lines if lines is not None else LineCache()
    item_lines, item_chars_ = cache.entries(projected)
    hashes = _Hashes(lines, item_lines)
    sections: list[ManifestSection] = []
    for name, first, last, start, end in _sections(history, has_protected):
        sections.append(
            ManifestSection(
                name=name,
                first_seq=first,
                last_seq=last,
                items=end - start,
                sha256=hashes.digest(name, start, end)[:_SECTION_HEX],
                tokens=_tokens(sum(item_chars_[start:end]), chars_per_token),
            )
        )
    tool_lines = cache.tool_lines(request.tools) if request.tools else []
    if tool_lines:
        sections.append(
            ManifestSection(
                name="tools",
                first_seq=None,
                last_seq=None,
                items=len(tool_lines),
                sha256=_digest(tool_lines)[:_SECTION_HEX],
                tokens=_tokens(sum(map(len, tool_lines)), chars_per_token),
            )
        )
    input_sha256 = hashes.digest("input", 0, len(item_lines))
    # the request's canonical bytes: the header, then every item and tool line after a newline
    whole = hashes.run("whole", 0, len(item_lines), lead=_header(request)).copy()
    if tool_lines:
        whole.update(b"\n" + b"\n".join(tool_lines))
    if lines is not None:
        lines._previous = item_lines
        lines._runs = hashes.new
    return RequestManifest(
        sha256=whole.hexdigest(), input_sha256=input_sha256, sections=tuple(sections)
    )


def describe_manifest(manifest: RequestManifest) -> str:
    """What a request was built from, in one line: its hash, its size, then each section with
    the seqs it holds, its items and tokens (``show`` and the console print this)."""
    parts = []
    for section in manifest.sections:
        seqs = ""
        if section.first_seq is not None:
            seqs = (
                f" #{section.first_seq}"
                if section.first_seq == section.last_seq
                else f" #{section.first_seq}-{section.last_seq}"
            )
        parts.append(f"{section.name}{seqs} ({section.items}, ~{section.tokens:,})")
    return f"request {manifest.sha256[:12]} ~{manifest.tokens:,} tokens: " + ", ".join(parts)


def _digest(lines: Collection[bytes]) -> str:
    return hashlib.sha256(b"\n".join(lines)).hexdigest()


def _tokens(chars: int, chars_per_token: float) -> int:
    return math.ceil(chars / chars_per_token)
