"""The record codec: one JSON line per record, decoded back exactly, bad lines named."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stowage.core import ManifestSection, MilestoneRecord, RequestManifest
from stowage.core._items import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    SystemMessage,
    UserMessage,
)
from stowage.core._records import (
    CompactionFigures,
    CompactionRecord,
    ErrorRecord,
    ItemRecord,
    MicrocompactRecord,
    ProtectedRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SummaryCheck,
    TurnRecord,
    Usage,
)
from stowage.storage import decode_record, encode_record

# -- strategies -----------------------------------------------------------------------------------

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
seqs = st.integers(min_value=1, max_value=2**63 - 1)
json_values = st.recursive(
    st.none() | st.booleans() | ints | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(text, json_values, max_size=4)
items = st.one_of(
    st.builds(SystemMessage, text=text),
    st.builds(UserMessage, text=text, pinned=st.booleans()),
    st.builds(AssistantMessage, text=text),
    st.builds(FunctionCall, call_id=text, name=text, arguments=text),
    st.builds(FunctionCallOutput, call_id=text, output=text, is_error=st.booleans()),
    st.builds(CompactionSummary, text=text),
)
usages = st.none() | st.builds(
    Usage,
    input_tokens=ints,
    output_tokens=ints,
    total_tokens=ints,
    cached_tokens=st.integers(min_value=0, max_value=2**40),
    cache_write_tokens=st.integers(min_value=0, max_value=2**40),
)
hexes = st.text(alphabet="0123456789abcdef", min_size=16, max_size=64)
manifests = st.none() | st.builds(
    RequestManifest,
    sha256=hexes,
    input_sha256=hexes,
    sections=st.lists(
        st.builds(
            ManifestSection,
            name=st.sampled_from(["system", "protected", "summary", "history", "tools"]),
            first_seq=st.none() | seqs,
            last_seq=st.none() | seqs,
            items=ints,
            sha256=hexes,
            tokens=ints,
        ),
        max_size=5,
    ).map(tuple),
)


def every_field(cls: type[Any], **strategies: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``st.builds`` that fails loudly when a record grows a field this test does not vary."""
    names = {f.name for f in dataclasses.fields(cls)}
    assert names == set(strategies), f"{cls.__name__}: vary {sorted(names ^ set(strategies))}"
    return st.builds(cls, **strategies)


records: st.SearchStrategy[Record] = st.one_of(
    every_field(
        SessionRecord,
        seq=seqs,
        ts=text,
        model=text,
        context_window=st.none() | ints,
        tools=st.lists(text, max_size=3).map(tuple),
        settings=json_objects,
    ),
    every_field(ItemRecord, seq=seqs, ts=text, item=items, round=st.none() | ints),
    every_field(
        RoundCommittedRecord,
        seq=seqs,
        ts=text,
        round=ints,
        usage=usages,
        first_seq=ints,
        last_seq=ints,
        interrupted=st.booleans(),
        truncated=st.booleans(),
        reported_usage=usages,
        manifest=manifests,
        resumed=st.booleans(),
    ),
    every_field(
        CompactionRecord,
        seq=seqs,
        ts=text,
        kind=st.sampled_from(["full", "fallback"]),
        summary=text,
        covers_through=ints,
        retained=st.lists(st.builds(HistoryEntry, seq=seqs, item=items), max_size=3).map(tuple),
        reason=text,
        tokens_before=st.none() | ints,
        tokens_after=st.none() | ints,
        removed=ints,
        round=ints,
        turn=ints,
        turn_open=st.booleans(),
        user_budget_chars=st.none() | ints,
        protected=st.none() | json_objects,
        estimated=st.booleans(),
        chars_per_token=st.none() | st.floats(min_value=0.5, max_value=20, allow_nan=False),
        waited=st.none() | st.floats(min_value=0, max_value=3600, allow_nan=False),
        reattached=st.lists(ints, max_size=4).map(tuple),
        regrounded=st.booleans(),
        focus=st.none() | text,
        provider_item=st.none()
        | st.fixed_dictionaries(
            {"type": st.just("compaction"), "id": text, "encrypted_content": text}
        ),
        figures=st.none()
        | st.builds(
            CompactionFigures,
            decided_tokens=st.none() | ints,
            usable=st.none() | ints,
            tool_tokens=ints,
            hard=st.none() | st.floats(min_value=0.1, max_value=1, allow_nan=False),
        ),
        usage=usages,
        check=st.none()
        | st.builds(
            SummaryCheck,
            probes=st.lists(text, max_size=3).map(tuple),
            missed_first=st.lists(text, max_size=2).map(tuple),
            asked_again=st.booleans(),
            appended=st.lists(text, max_size=2).map(tuple),
            left_out=st.lists(text, max_size=2).map(tuple),
        ),
    ),
    every_field(
        MicrocompactRecord,
        seq=seqs,
        ts=text,
        stubbed=st.lists(seqs, max_size=4).map(tuple),
        reason=text,
        tokens_before=st.none() | ints,
        tokens_after=st.none() | ints,
        estimated=st.booleans(),
    ),
    every_field(
        ProtectedRecord,
        seq=seqs,
        ts=text,
        ops=st.lists(json_objects, max_size=3).map(tuple),
        source=st.sampled_from(["user", "summarizer"]),
    ),
    every_field(
        TurnRecord,
        seq=seqs,
        ts=text,
        turn=ints,
        phase=st.sampled_from(["started", "finished", "interrupted", "stopped"]),
    ),
    every_field(ErrorRecord, seq=seqs, ts=text, kind=text, message=text),
    every_field(
        MilestoneRecord,
        seq=seqs,
        ts=text,
        name=text,
        note=st.none() | text,
        source=st.sampled_from(["user", "model"]),
    ),
)


# -- round trip -----------------------------------------------------------------------------------


@settings(max_examples=400)
@given(records)
def test_decode_inverts_encode_exactly(record: Record) -> None:
    line = encode_record(record)
    decoded = decode_record(line)
    assert decoded == record
    assert decoded.ts == record.ts  # ts is compare=False, so check it on its own
    assert type(decoded) is type(record)


@given(records)
def test_encoded_record_is_one_line_ending_in_newline(record: Record) -> None:
    line = encode_record(record)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1


@given(records)
def test_encoding_is_deterministic(record: Record) -> None:
    assert encode_record(record) == encode_record(decode_record(encode_record(record)))


def test_item_record_line_has_the_documented_shape() -> None:
    record = ItemRecord(seq=7, ts="2025-01-01T00:00:00.000+00:00", item=UserMessage(text="hi"))
    assert encode_record(record) == (
        b'{"v":1,"seq":7,"ts":"2025-01-01T00:00:00.000+00:00","type":"item",'
        b'"item":{"type":"user","text":"hi"}}\n'
    )


def test_item_record_round_is_written_only_when_set() -> None:
    with_round = orjson.loads(encode_record(ItemRecord(seq=2, item=UserMessage(text="x"), round=3)))
    without = orjson.loads(encode_record(ItemRecord(seq=2, item=UserMessage(text="x"))))
    assert with_round["round"] == 3
    assert "round" not in without


def test_usage_is_an_object_or_null() -> None:
    usage = Usage(input_tokens=1, output_tokens=2, total_tokens=3)
    line = RoundCommittedRecord(seq=5, round=1, usage=usage, first_seq=2, last_seq=4)
    data = orjson.loads(encode_record(line))
    assert data["usage"] == {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}
    nothing = RoundCommittedRecord(seq=5, round=1, usage=None, first_seq=2, last_seq=4)
    assert orjson.loads(encode_record(nothing))["usage"] is None


def test_compaction_retained_entries_carry_seq_and_item() -> None:
    record = CompactionRecord(
        seq=9,
        summary="s",
        covers_through=6,
        retained=(HistoryEntry(seq=3, item=UserMessage(text="keep")),),
        reason="threshold",
        tokens_before=10,
        tokens_after=5,
        removed=2,
        round=2,
    )
    data = orjson.loads(encode_record(record))
    assert data["type"] == "compaction"
    assert data["retained"] == [{"seq": 3, "item": {"type": "user", "text": "keep"}}]


@pytest.mark.parametrize(
    ("record", "type_name"),
    [
        (SessionRecord(seq=1, model="m"), "session"),
        (ItemRecord(seq=2, item=UserMessage(text="u")), "item"),
        (
            RoundCommittedRecord(seq=3, round=1, usage=None, first_seq=2, last_seq=2),
            "round_committed",
        ),
        (
            CompactionRecord(
                seq=4, summary="s", covers_through=2, retained=(), reason="r",
                tokens_before=None, tokens_after=None, removed=0, round=1,
            ),
            "compaction",
        ),
        (
            MicrocompactRecord(seq=5, stubbed=(2,), reason="r", tokens_before=1, tokens_after=1),
            "microcompact",
        ),
        (ProtectedRecord(seq=6, ops=({"op": "add"},)), "protected"),
        (TurnRecord(seq=7, turn=1, phase="started"), "turn"),
        (ErrorRecord(seq=8, kind="k", message="m"), "error"),
    ],
)  # fmt: skip
def test_every_field_is_written_under_its_type_name(record: Record, type_name: str) -> None:
    data = orjson.loads(encode_record(record))
    assert list(data)[:4] == ["v", "seq", "ts", "type"]
    assert data["v"] == 1
    assert data["type"] == type_name
    fields = {f.name for f in dataclasses.fields(record)}
    if isinstance(record, ItemRecord) and record.round is None:
        fields.discard("round")
    if isinstance(record, RoundCommittedRecord) and record.manifest is None:
        fields.discard("manifest")  # written only when the round sent a request
    if isinstance(record, CompactionRecord) and record.focus is None:
        fields.discard("focus")  # written only when the summary was given a focus
    if isinstance(record, CompactionRecord) and record.provider_item is None:
        fields.discard("provider_item")  # written only for a provider-native compaction
    if isinstance(record, CompactionRecord) and not record.turn_open:
        fields.discard("turn_open")  # written only for a compaction inside a turn
    if isinstance(record, CompactionRecord) and record.figures is None:
        fields.discard("figures")  # not in logs written before them
    if isinstance(record, CompactionRecord) and record.usage is None:
        fields.discard("usage")  # written only when a summary request reported usage
    if isinstance(record, RoundCommittedRecord) and not record.resumed:
        fields.discard("resumed")  # written only for a resumed session's first request
    if isinstance(record, CompactionRecord) and record.check is None:
        fields.discard("check")  # written only for a checked summary
    assert set(data) - {"v", "type"} == fields


# -- refusals -------------------------------------------------------------------------------------

GOOD = encode_record(ItemRecord(seq=2, ts="t", item=UserMessage(text="hi"), round=1))


def _mutated(**changes: Any) -> bytes:
    data = orjson.loads(GOOD)
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    return orjson.dumps(data)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"", "not valid JSON"),
        (b'{"v":1,"seq":2', "not valid JSON"),
        (b"\x00\x00\x00", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (_mutated(v=2), "unknown record version 2"),
        (_mutated(v=...), "unknown record version None"),
        (_mutated(v=True), "unknown record version True"),
        (_mutated(type="bogus"), "unknown record type 'bogus'"),
        (_mutated(type=...), "unknown record type None"),
        (_mutated(seq=...), "item record lacks field 'seq'"),
        (_mutated(item=...), "item record lacks field 'item'"),
        (_mutated(seq="2"), "field 'seq' must be an integer"),
        (_mutated(seq=True), "field 'seq' must be an integer"),
        (_mutated(ts=5), "field 'ts' must be a string"),
        (_mutated(item={"type": "weird"}), "unknown item type 'weird'"),
        (_mutated(item={"type": "user"}), "lacks key 'text'"),
        (_mutated(item=[]), "an item must be an object"),
    ],
)
def test_bad_line_raises_value_error_naming_the_problem(line: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        decode_record(line)


def test_decode_accepts_str_and_a_trailing_newline() -> None:
    assert decode_record(GOOD.decode()) == decode_record(GOOD.rstrip(b"\n"))


def test_encode_refuses_what_is_not_a_record() -> None:
    with pytest.raises(TypeError, match="not a record"):
        encode_record(UserMessage(text="hi"))  # type: ignore[arg-type]


def test_encode_refuses_values_json_cannot_carry() -> None:
    with pytest.raises(TypeError):
        encode_record(SessionRecord(seq=1, model="m", settings={"x": object()}))
