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
choice, output cap, cache key), each input item, each tool. Items and entries are immutable,
so a session keeps its last request's lines, running hashes and section layout and carries
them on where the new request starts the same (a round appends): a request costs the lines,
the sections and the hashing of what is new since the last one, not a pass over the history.
A parked session lets go of all that (``LineCache.forget``): it is a copy of the history's
text, and a hundred thousand idle sessions must not each keep one; the first request of its
next run makes it again in one pass, as a resumed session's does.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import is_, is_not
from typing import Any

import orjson

from ._gateway import ModelRequest, ToolSpec
from ._items import CompactionSummary, HistoryEntry, Item, SystemMessage, item_to_dict
from ._records import ManifestSection, RequestManifest, SectionName
from ._sizes import item_chars, tool_schema_tokens

__all__ = [
    "LineCache", "ManifestSection", "RequestManifest", "SectionName", "describe_manifest",
    "request_bytes", "request_manifest",
]  # fmt: skip

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


# a section before it is hashed: its name, first and last seq, and its items' start and end
_Span = tuple[SectionName, int | None, int | None, int, int]


class LineCache:
    """What one session's consecutive requests share, kept between them: each item's line and
    characters by item identity (items are frozen; a stubbed output is a new item each time,
    so it is never served stale), the tools' lines, the header's line, the section layout of
    the last history and the running hashes of the last request's input. A round's request is
    the last one plus what happened since, so its figures are the last ones carried on over
    what is new: a request costs the lines, the layout and the hashing of what is new, not a
    pass over the whole history again."""

    __slots__ = ("_by_id", "_header", "_history", "_last", "_layout", "_tools")

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Let go of everything kept (a session that parks calls this): the next request's
        figures are the same, made from nothing in one pass over its input."""
        self._by_id: dict[int, tuple[Item, bytes, int]] = {}
        self._last = _NO_REQUEST
        # the last history's entries, and its runs of one kind of entry (no protected state)
        self._history: tuple[HistoryEntry, ...] = ()
        self._layout: list[_Span] = []
        self._header: tuple[tuple[object, ...], bytes] | None = None
        self._tools: _Tools | None = None

    def lines(self, items: Sequence[Item]) -> list[bytes]:
        return self.entries(items)[0]

    def entries(self, items: Sequence[Item]) -> tuple[list[bytes], list[int]]:
        """The line and the characters of each of ``items``."""
        lines, chars, _ = self._entries(tuple(items))
        return lines, chars

    def tool_lines(self, tools: tuple[ToolSpec, ...]) -> list[bytes]:
        """The lines of ``tools`` (a session sends the same tuple with every request)."""
        return self._tool_set(tools).lines

    def _entries(self, items: tuple[Item, ...]) -> tuple[list[bytes], list[int], int]:
        """The lines and characters of ``items``."""
        last = self._last
        shared = min(len(last.items), len(items))
        # the positions the last request had another object at: none when a round only
        # appended, and found without a Python step per item
        moved = list(compress(range(shared), map(is_not, last.items, items)))
        lines = last.lines[:shared]
        chars = last.chars[:shared]
        fresh = [*moved, *range(shared, len(items))]
        if fresh:
            grown = len(items) - shared
            lines += [b""] * grown
            chars += [0] * grown
            known = self._by_id
            if len(known) > len(items) + _STALE_LINES:
                # what a compaction dropped goes at once, but the map is not rebuilt for every
                # request (one adds only its new items)
                known = self._by_id = {
                    id(i): h for i in items if (h := known.get(id(i))) is not None
                }
            for at in fresh:
                item = items[at]
                hit = known.get(id(item))
                if hit is None or hit[0] is not item:
                    hit = known[id(item)] = (item, _item_line(item), item_chars(item))
                lines[at] = hit[1]
                chars[at] = hit[2]
        common = shared
        for at in moved:
            # a new object may still have the same line (the protected-state message does)
            if lines[at] != last.lines[at]:
                common = at
                break
        return lines, chars, common

    def _spans(self, history: Sequence[HistoryEntry], has_protected: bool) -> list[_Span]:
        """The sections of the projection of ``history``."""
        before = self._history
        if len(before) <= len(history) and all(map(is_, before, history)):
            layout = self._layout.copy()
            at = len(before)
        else:
            layout = []
            at = 0
        for entry in history[at:]:
            item = entry.item
            kind: SectionName = (
                "summary"
                if isinstance(item, CompactionSummary)
                else "system"
                if at == 0 and isinstance(item, SystemMessage)
                else "history"
            )
            if layout and layout[-1][0] == kind:
                _, first, _, start, _ = layout[-1]
                layout[-1] = (kind, first, entry.seq, start, at + 1)
            else:
                layout.append((kind, entry.seq, entry.seq, at, at + 1))
            at += 1
        self._history = tuple(history)
        self._layout = layout
        if not has_protected:
            return layout
        # a leading system message is a section of one: protected state never splits a run
        at = 1 if layout and layout[0][0] == "system" else 0
        shifted = [
            (name, first, last, start + 1, end + 1) for name, first, last, start, end in layout[at:]
        ]
        return [*layout[:at], ("protected", None, None, at, at + 1), *shifted]

    def _header_line(self, request: ModelRequest) -> bytes:
        """The header's line, made again only when one of its fields is another object."""
        fields = (
            request.model,
            request.tool_choice,
            request.max_output_tokens,
            request.cache_key,
            request.purpose,
            request.parallel_tool_calls,
        )
        cached = self._header
        if cached is None or not all(map(is_, fields, cached[0])):
            cached = self._header = (fields, _header(request))
        return cached[1]

    def _tool_set(self, tools: tuple[ToolSpec, ...]) -> _Tools:
        cached = self._tools
        if cached is None or cached.specs is not tools:
            lines = [*map(_tool_line, tools)]
            cached = self._tools = _Tools(
                specs=tools,
                lines=lines,
                tail=b"\n" + b"\n".join(lines),
                sha256=_digest(lines)[:_SECTION_HEX],
                chars=sum(map(len, lines)),
                tokens=tool_schema_tokens(tools),
            )
        return cached


@dataclass(frozen=True, slots=True, kw_only=True)
class _Request:
    """The last request of a session."""

    items: tuple[Item, ...]
    lines: list[bytes]
    chars: list[int]
    runs: dict[tuple[str, int], _Run]


# the "last request" of a cache that has none: shared, as nothing ever changes it
_NO_REQUEST = _Request(items=(), lines=[], chars=[], runs={})


@dataclass(frozen=True, slots=True, kw_only=True)
class _Tools:
    """A tuple of tools: their lines, what the request's hash reads of them, their section's hash
    and characters."""

    specs: tuple[ToolSpec, ...]
    lines: list[bytes]
    tail: bytes
    sha256: str
    chars: int
    #: the one figure of the schemas' tokens (``tool_schema_tokens``)
    tokens: int


@dataclass(eq=False, slots=True)
class _Run:
    """A sha256 that has read ``lead`` (if any), then ``lines[start:end]``."""

    lead: bytes | None
    start: int
    end: int
    hasher: Any
    hexdigest: str | None = None
    section: ManifestSection | None = None

    def digest(self) -> str:
        if self.hexdigest is None:
            self.hexdigest = str(self.hasher.hexdigest())
        return self.hexdigest


class _Hashes:
    """The running hashes of one request."""

    __slots__ = ("_common", "_lines", "_old", "new")

    def __init__(self, old: dict[tuple[str, int], _Run], lines: list[bytes], common: int) -> None:
        self._lines = lines
        self._old = old
        self._common = common
        self.new: dict[tuple[str, int], _Run] = {}

    def run(self, name: str, start: int, end: int, lead: bytes | None = None) -> _Run:
        """The hash of ``lead`` and lines ``start`` to ``end`` (kept for the next request)."""
        key = (name, start)
        old = self._old.get(key)
        if (
            old is not None
            and old.lead == lead
            and (old.end > start or lead is not None)  # an empty run has nothing to go on from
            and old.end <= end
            and old.end <= self._common
        ):
            run = old
            at = old.end
            if at < end:
                # a copy, not the last run's sha256 read on: one that has read 2 KB at once
                # lets go of the GIL on every later update, and a copy starts without that
                run = _Run(lead, start, end, old.hasher.copy())
        else:
            run = _Run(lead, start, end, hashlib.sha256())
            at = start
            if lead is not None:
                run.hasher.update(lead)
            elif start < end:
                run.hasher.update(self._lines[start])
                at += 1
        if at < end:
            # every line after the first (or after the lead) follows a newline
            run.hasher.update(b"\n" + b"\n".join(self._lines[at:end]))
        self.new[key] = run
        return run


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
    items = tuple(projected)
    item_lines, item_chars_, common = cache._entries(items)
    hashes = _Hashes(cache._last.runs, item_lines, common)
    sections: list[ManifestSection] = []
    for name, first, last, start, end in cache._spans(history, has_protected):
        run = hashes.run(name, start, end)
        tokens = math.ceil(sum(item_chars_[start:end]) / chars_per_token)
        section = run.section
        if (
            section is None
            or section.first_seq != first
            or section.last_seq != last
            or section.tokens != tokens
        ):
            section = run.section = ManifestSection(
                name=name,
                first_seq=first,
                last_seq=last,
                items=end - start,
                sha256=run.digest()[:_SECTION_HEX],
                tokens=tokens,
            )
        sections.append(section)
    tools = cache._tool_set(request.tools) if request.tools else None
    if tools is not None:
        sections.append(
            ManifestSection(
                name="tools",
                first_seq=None,
                last_seq=None,
                items=len(tools.lines),
                sha256=tools.sha256,
                tokens=tools.tokens,
            )
        )
    count = len(item_lines)
    input_sha256 = hashes.run("input", 0, count).digest()
    # the request's canonical bytes: the header, then every item and tool line after a newline
    whole = hashes.run("whole", 0, count, lead=cache._header_line(request))
    if tools is not None:
        hasher = whole.hasher.copy()
        hasher.update(tools.tail)
        sha256 = str(hasher.hexdigest())
    else:
        sha256 = whole.digest()
    cache._last = _Request(items=items, lines=item_lines, chars=item_chars_, runs=hashes.new)
    return RequestManifest(sha256=sha256, input_sha256=input_sha256, sections=tuple(sections))


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
