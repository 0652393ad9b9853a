"""A request's manifest: sections by kind and seq range, hashes that change with what changed."""

from __future__ import annotations

import hashlib

import pytest
from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    LineCache,
    ModelRequest,
    StubCache,
    SystemMessage,
    ToolSpec,
    UserMessage,
    build_projection,
    request_bytes,
    request_manifest,
)

HISTORY = [
    HistoryEntry(seq=2, item=SystemMessage(text="be brief")),
    HistoryEntry(seq=7, item=CompactionSummary(text="the files were read")),
    HistoryEntry(seq=8, item=UserMessage(text="go on")),
    HistoryEntry(seq=9, item=FunctionCall(call_id="c1", name="read", arguments="{}")),
    HistoryEntry(seq=10, item=FunctionCallOutput(call_id="c1", output="x" * 400)),
    HistoryEntry(seq=12, item=AssistantMessage(text="done")),
]
TOOLS = (ToolSpec(name="read", description="read a file", parameters={"type": "object"}),)


def request_for(
    stubbed: tuple[int, ...] = (), protected: str | None = "OBJECTIVE: ship"
) -> ModelRequest:
    items = build_projection(HISTORY, stubbed=stubbed, protected_text=protected)
    return ModelRequest(model="m", input=items, tools=TOOLS, cache_key="k")


def test_sections_follow_the_projection_by_kind_and_seq_range() -> None:
    manifest = request_manifest(request_for(), HISTORY, has_protected=True)
    rows = [(s.name, s.first_seq, s.last_seq, s.items) for s in manifest.sections]
    assert rows == [
        ("system", 2, 2, 1),
        ("protected", None, None, 1),
        ("summary", 7, 7, 1),
        ("history", 8, 12, 4),
        ("tools", None, None, 1),
    ]
    assert manifest.tokens == sum(s.tokens for s in manifest.sections) > 100


def test_the_request_hash_is_the_sha256_of_its_canonical_bytes() -> None:
    request = request_for()
    manifest = request_manifest(request, HISTORY, has_protected=True)
    assert manifest.sha256 == hashlib.sha256(request_bytes(request)).hexdigest()
    # the cache of item lines gives the same figures, twice over
    lines = LineCache()
    assert request_manifest(request, HISTORY, has_protected=True, lines=lines) == manifest
    assert request_manifest(request, HISTORY, has_protected=True, lines=lines) == manifest


def test_a_stub_changes_only_its_section_and_the_whole_hashes() -> None:
    whole = request_manifest(request_for(), HISTORY, has_protected=True)
    stubbed = request_manifest(request_for(stubbed=(10,)), HISTORY, has_protected=True)
    changed = [a.name for a, b in zip(whole.sections, stubbed.sections, strict=True) if a != b]
    assert changed == ["history"]
    assert whole.sha256 != stubbed.sha256 and whole.input_sha256 != stubbed.input_sha256


def test_tools_and_settings_change_the_request_hash_but_not_the_input_hash() -> None:
    request = request_for()
    base = request_manifest(request, HISTORY, has_protected=True)
    other = ModelRequest(model="m", input=request.input, tools=(), cache_key="other")
    changed = request_manifest(other, HISTORY, has_protected=True)
    assert changed.input_sha256 == base.input_sha256 and changed.sha256 != base.sha256
    assert [s.name for s in changed.sections][-1] == "history"


def test_without_protected_state_there_is_no_protected_section() -> None:
    manifest = request_manifest(request_for(protected=None), HISTORY, has_protected=False)
    assert "protected" not in [s.name for s in manifest.sections]


def test_an_input_that_is_not_the_histories_projection_is_refused() -> None:
    with pytest.raises(ValueError, match="7 input items"):
        request_manifest(request_for(), HISTORY, has_protected=False)


def test_a_session_cache_carried_over_growing_and_changing_requests_gives_fresh_figures() -> None:
    """The running hashes a session's cache carries from one request to the next give what
    a manifest computed from nothing gives: as history grows, after a stub, after the
    history is replaced (a compaction), and when the header or the tools change."""
    cache = LineCache()
    history: list[HistoryEntry] = []
    steps: list[tuple[list[HistoryEntry], tuple[int, ...], str | None, str]] = []
    for n, entry in enumerate(HISTORY):
        history.append(entry)
        steps.append((list(history), (), "OBJECTIVE: ship" if n % 3 else None, "k"))
    steps.append((list(history), (10,), "OBJECTIVE: ship", "k"))  # a stub
    steps.append((list(history), (), "OBJECTIVE: ship", "other"))  # another header
    compacted = [HISTORY[0], HistoryEntry(seq=13, item=CompactionSummary(text="all of it"))]
    steps.append((compacted, (), None, "k"))
    steps.append(([*compacted, HistoryEntry(seq=14, item=UserMessage(text="next"))], (), None, "k"))
    steps.append(([], (), None, "k"))
    for entries, stubbed, protected, key in steps:
        items = build_projection(entries, stubbed=stubbed, protected_text=protected)
        tools = TOOLS if key == "k" else ()
        request = ModelRequest(model="m", input=items, tools=tools, cache_key=key)
        has_protected = protected is not None
        fresh = request_manifest(request, entries, has_protected=has_protected)
        carried = request_manifest(request, entries, has_protected=has_protected, lines=cache)
        assert carried == fresh
        assert carried.sha256 == hashlib.sha256(request_bytes(request)).hexdigest()


def test_a_stub_cache_keeps_each_stub_item_while_its_output_is_the_same() -> None:
    """Stub items are reused from the last projection (so cached lines and hashes stay
    valid), made again for an output that changed, and forgotten once not stubbed."""
    stubs: StubCache = {}
    first = build_projection(HISTORY, stubbed=(10,), stubs=stubs)
    again = build_projection(HISTORY, stubbed=(10,), stubs=stubs)
    assert again[4] is first[4] and again == build_projection(HISTORY, stubbed=(10,))
    assert first[4] != HISTORY[4].item  # it is the stub, not the output
    changed = [
        *HISTORY[:4],
        HistoryEntry(seq=10, item=FunctionCallOutput(call_id="c1", output="y")),
    ]
    other = build_projection(changed, stubbed=(10,), stubs=stubs)
    assert other[4] is not first[4] and "1 chars" in str(other[4])
    build_projection(HISTORY, stubs=stubs)
    assert stubs == {}
