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
of the history's entries are cached by identity: a request costs the lines of what is new
since the last one, plus one hash pass.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterator, Sequence

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


def _line(value: object) -> bytes:
    return orjson.dumps(value, option=_OPTIONS)


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
    """Item lines by item identity, for the items of the newest requests (items are frozen;
    a stubbed output is a new item each time, so it is never served stale)."""

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: dict[int, tuple[Item, bytes]] = {}

    def lines(self, items: Sequence[Item]) -> list[bytes]:
        known = self._lines
        fresh: dict[int, tuple[Item, bytes]] = {}
        out: list[bytes] = []
        for item in items:
            hit = known.get(id(item))
            if hit is None or hit[0] is not item:
                hit = (item, _item_line(item))
            fresh[id(item)] = hit
            out.append(hit[1])
        self._lines = fresh  # only what the newest request holds is kept
        return out


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
    protected-state message when ``has_protected``).

    Raises ``ValueError`` when the input is not that projection's length.
    """
    projected = request.input
    if len(projected) != len(history) + (1 if has_protected else 0):
        raise ValueError(
            f"the request has {len(projected)} input items; its history projects to "
            f"{len(history) + (1 if has_protected else 0)}"
        )
    item_lines = lines.lines(projected) if lines is not None else [*map(_item_line, projected)]
    sections: list[ManifestSection] = []
    for name, first, last, start, end in _sections(history, has_protected):
        part = item_lines[start:end]
        chars = sum(item_chars(item) for item in projected[start:end])
        sections.append(
            ManifestSection(
                name=name,
                first_seq=first,
                last_seq=last,
                items=end - start,
                sha256=_digest(part)[:_SECTION_HEX],
                tokens=_tokens(chars, chars_per_token),
            )
        )
    if request.tools:
        tool_lines = [*map(_tool_line, request.tools)]
        sections.append(
            ManifestSection(
                name="tools",
                first_seq=None,
                last_seq=None,
                items=len(request.tools),
                sha256=_digest(tool_lines)[:_SECTION_HEX],
                tokens=_tokens(sum(map(len, tool_lines)), chars_per_token),
            )
        )
    else:
        tool_lines = []
    whole = hashlib.sha256(_header(request))
    for line in (*item_lines, *tool_lines):
        whole.update(b"\n")
        whole.update(line)
    return RequestManifest(
        sha256=whole.hexdigest(), input_sha256=_digest(item_lines), sections=tuple(sections)
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
