"""A session's manifests, carried from request to request by its ``LineCache``, are exactly
the manifests of the same requests worked out from nothing: as history grows, is compacted,
stubbed, re-headed, shortened, as the header, the tools and the ratio change, and after the
session parked (its cache forgot everything)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from itertools import groupby

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    LineCache,
    ManifestSection,
    ModelRequest,
    RequestManifest,
    SectionName,
    StubCache,
    SystemMessage,
    ToolSpec,
    UserMessage,
    _manifest,
    build_projection,
    item_chars,
    request_bytes,
    request_manifest,
    tool_schema_tokens,
)

TOOL_SETS: tuple[tuple[ToolSpec, ...], ...] = (
    (),
    (ToolSpec(name="read", description="read a file", parameters={"type": "object"}),),
    (
        ToolSpec(name="read", description="read a file", parameters={"type": "object"}),
        ToolSpec(name="grep", description="search\nfiles", parameters={"required": ["q"]}),
    ),
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_from_nothing(
    request: ModelRequest,
    history: list[HistoryEntry],
    *,
    has_protected: bool,
    chars_per_token: float,
) -> RequestManifest:
    """The manifest as its definition gives it, from the request's canonical bytes (one JSON
    line per part, so a split on newlines gives the lines back) and the history's kinds."""
    canonical = request_bytes(request)
    lines = canonical.split(b"\n")
    count = len(request.input)
    item_lines, tool_lines = lines[1 : 1 + count], lines[1 + count :]
    kinds: list[tuple[SectionName, int | None]] = []
    for at, entry in enumerate(history):
        if isinstance(entry.item, CompactionSummary):
            kinds.append(("summary", entry.seq))
        elif at == 0 and isinstance(entry.item, SystemMessage):
            kinds.append(("system", entry.seq))
        else:
            kinds.append(("history", entry.seq))
    if has_protected:
        leading_system = bool(history) and isinstance(history[0].item, SystemMessage)
        kinds.insert(1 if leading_system else 0, ("protected", None))
    sections = []
    start = 0
    for name, run in groupby(kinds, key=lambda kind: kind[0]):
        seqs = [seq for _, seq in run]
        end = start + len(seqs)
        chars = sum(item_chars(item) for item in request.input[start:end])
        sections.append(
            ManifestSection(
                name=name,
                first_seq=seqs[0],
                last_seq=seqs[-1],
                items=len(seqs),
                sha256=_sha(b"\n".join(item_lines[start:end]))[:16],
                tokens=math.ceil(chars / chars_per_token),
            )
        )
        start = end
    if request.tools:
        sections.append(
            ManifestSection(
                name="tools",
                first_seq=None,
                last_seq=None,
                items=len(tool_lines),
                sha256=_sha(b"\n".join(tool_lines))[:16],
                # the one figure of the schemas, whatever the ratio: the budget's
                tokens=tool_schema_tokens(request.tools),
            )
        )
    return RequestManifest(
        sha256=_sha(canonical), input_sha256=_sha(b"\n".join(item_lines)), sections=tuple(sections)
    )


@dataclasses.dataclass
class Session:
    """One session's history (one list, changed in place as a session's state changes it)
    and what its next request is built with."""

    history: list[HistoryEntry] = dataclasses.field(default_factory=list)
    stubbed: set[int] = dataclasses.field(default_factory=set)
    stubs: StubCache = dataclasses.field(default_factory=dict)
    protected: str | None = None
    cache_key: str = "k"
    tools: tuple[ToolSpec, ...] = TOOL_SETS[1]
    chars_per_token: float = 4.0
    seq: int = 0

    def add(self, item: Item) -> None:
        self.seq += 1
        self.history.append(HistoryEntry(seq=self.seq, item=item))

    def request(self) -> ModelRequest:
        projected = build_projection(
            self.history,
            stubbed=self.stubbed,
            protected_text=self.protected,
            stubs=self.stubs,
        )
        return ModelRequest(
            model="m",
            input=projected,
            tools=self.tools,
            cache_key=self.cache_key,
            parallel_tool_calls=True,
        )

    def check(self, cache: LineCache) -> RequestManifest:
        """The carried manifest of the next request, asserted equal to one from nothing."""
        request = self.request()
        has_protected = bool(self.protected)
        carried = request_manifest(
            request,
            self.history,
            has_protected=has_protected,
            lines=cache,
            chars_per_token=self.chars_per_token,
        )
        expected = manifest_from_nothing(
            request,
            self.history,
            has_protected=has_protected,
            chars_per_token=self.chars_per_token,
        )
        assert carried == expected
        assert carried == request_manifest(
            request,
            self.history,
            has_protected=has_protected,
            chars_per_token=self.chars_per_token,
        )
        return carried


def _new_item(kind: str, n: int) -> list[Item]:
    match kind:
        case "user":
            return [UserMessage(text=f"go on {n}", pinned=n % 2 == 0)]
        case "assistant":
            return [AssistantMessage(text="done\n" * (n % 3))]
        case "summary":
            return [CompactionSummary(text=f"the files were read ({n})")]
        case "provider":
            return [CompactionSummary(text="opaque", provider={"id": f"c{n}", "é": [n]})]
        case "system":
            return [SystemMessage(text=f"a system message in the middle {n}")]
    call_id = f"call_{n}"
    return [
        FunctionCall(call_id=call_id, name="read", arguments=json.dumps({"n": n})),
        FunctionCallOutput(call_id=call_id, output="x" * (n % 7 * 50), is_error=n % 5 == 0),
    ]


KINDS = st.sampled_from(["user", "assistant", "call", "call", "call", "summary", "provider"])
STEPS = st.one_of(
    st.tuples(st.just("append"), st.lists(KINDS, min_size=1, max_size=5)),
    st.tuples(st.just("append"), st.just(["system"])),
    st.tuples(st.just("stub"), st.integers(0, 99)),
    st.tuples(st.just("unstub"), st.integers(0, 99)),
    st.tuples(st.just("replace"), st.integers(0, 99)),
    st.tuples(st.just("reseq"), st.integers(0, 99)),
    st.tuples(st.just("compact"), st.integers(0, 99)),
    st.tuples(st.just("truncate"), st.integers(0, 99)),
    st.tuples(st.just("rehead"), st.sampled_from(["be brief", "be thorough", ""])),
    st.tuples(st.just("protect"), st.sampled_from(["", "OBJECTIVE: ship", "OBJECTIVE: test"])),
    st.tuples(st.just("header"), st.sampled_from(["k", "other"])),
    st.tuples(st.just("tools"), st.integers(0, len(TOOL_SETS) - 1)),
    st.tuples(st.just("ratio"), st.sampled_from([4.0, 3.3])),
    st.tuples(st.just("again"), st.just(0)),
    st.tuples(st.just("park"), st.just(0)),
)


def apply(session: Session, step: tuple[str, object]) -> None:
    """Change ``session`` as a round, a compaction, a stub or a setting would."""
    name, arg = step
    history = session.history
    at = arg % (len(history) + 1) if isinstance(arg, int) else 0
    match name:
        case "append":
            assert isinstance(arg, list)
            for kind in arg:
                for item in _new_item(kind, session.seq):
                    session.add(item)
        case "stub" | "unstub":
            outputs = [e.seq for e in history if isinstance(e.item, FunctionCallOutput)]
            if outputs:
                seq = outputs[at % len(outputs)]
                if name == "stub":
                    session.stubbed.add(seq)
                else:
                    session.stubbed.discard(seq)
        case "replace" if at < len(history):
            # another object with the same content: the same line, a new identity
            entry = history[at]
            history[at] = HistoryEntry(seq=entry.seq, item=dataclasses.replace(entry.item))
        case "reseq" if at < len(history):
            # the same item at another seq: the same lines, other seqs in the sections
            session.seq += 1
            history[at] = HistoryEntry(seq=session.seq, item=history[at].item)
        case "compact":
            lead = 1 if history and isinstance(history[0].item, SystemMessage) else 0
            session.seq += 1
            summary = HistoryEntry(seq=session.seq, item=CompactionSummary(text=f"{at} items"))
            history[lead : max(at, lead)] = [summary]
        case "truncate":
            del history[at:]
        case "rehead":
            assert isinstance(arg, str)
            has_system = 1 if history and isinstance(history[0].item, SystemMessage) else 0
            if not arg:
                del history[:has_system]
            else:
                session.seq += 1
                history[:has_system] = [HistoryEntry(seq=session.seq, item=SystemMessage(text=arg))]
        case "protect":
            assert isinstance(arg, str)
            session.protected = arg or None
        case "header":
            assert isinstance(arg, str)
            session.cache_key = arg
        case "tools":
            assert isinstance(arg, int)
            session.tools = TOOL_SETS[arg]
        case "ratio":
            assert isinstance(arg, float)
            session.chars_per_token = arg


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=st.lists(STEPS, min_size=1, max_size=30), protected=st.booleans())
def test_carried_manifests_are_the_manifests_from_nothing(
    steps: list[tuple[str, object]], protected: bool
) -> None:
    session = Session(protected="OBJECTIVE: ship" if protected else None)
    session.add(SystemMessage(text="be brief"))
    session.add(UserMessage(text="start"))
    cache = LineCache()
    session.check(cache)
    for step in steps:
        apply(session, step)
        if step[0] == "park":  # the session parked: its cache let go of everything
            cache.forget()
        session.check(cache)


@pytest.mark.parametrize("protected", [None, "OBJECTIVE: ship"])
def test_a_growing_session_makes_lines_only_for_what_each_round_adds(
    protected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds that append four items each: each request serializes its new items (and the
    protected-state message, a new object each time) and nothing of the unchanged prefix."""
    made: list[Item] = []
    item_line = _manifest._item_line

    def counting(item: Item) -> bytes:
        made.append(item)
        return item_line(item)

    session = Session(protected=protected)
    session.add(SystemMessage(text="be brief"))
    session.add(UserMessage(text="start"))
    cache = LineCache()
    session.check(cache)
    while len(session.history) < 60:
        apply(session, ("append", ["call", "call"]))
        request = session.request()
        made.clear()
        with monkeypatch.context() as patch:
            patch.setattr(_manifest, "_item_line", counting)
            carried = request_manifest(
                request, session.history, has_protected=protected is not None, lines=cache
            )
        # the protected-state message follows the system message
        remade = [request.input[1]] if protected is not None else []
        assert made == [*remade, *request.input[-4:]]
        assert carried == manifest_from_nothing(
            request, session.history, has_protected=protected is not None, chars_per_token=4.0
        )


def test_entries_alone_leave_the_carried_hashes_right() -> None:
    """Asking the cache for lines between two requests changes nothing it carries."""
    session = Session()
    session.add(SystemMessage(text="be brief"))
    cache = LineCache()
    session.check(cache)
    apply(session, ("append", ["call", "user"]))
    lines, chars = cache.entries(session.request().input)
    assert lines == request_bytes(session.request()).split(b"\n")[1:-1]
    assert chars == [item_chars(item) for item in session.request().input]
    apply(session, ("append", ["call"]))
    session.check(cache)


def test_item_chars_counts_each_kind_as_the_model_reads_it() -> None:
    assert item_chars(SystemMessage(text="abc")) == 3
    assert item_chars(UserMessage(text="abcd", pinned=True)) == 4
    assert item_chars(AssistantMessage(text="ab")) == 2
    assert item_chars(FunctionCall(call_id="c1", name="ls", arguments="{}")) == 6
    assert item_chars(FunctionCallOutput(call_id="c1", output="abc", is_error=True)) == 5
    assert item_chars(CompactionSummary(text="summary")) == 7
    provider = {"id": "c1", "é": [1]}
    with_provider = CompactionSummary(text="summary", provider=provider)
    assert item_chars(with_provider) == len(json.dumps(provider, separators=(",", ":")))
    with pytest.raises(TypeError):
        item_chars("not an item")  # type: ignore[arg-type]
