"""Properties of the JSONL log reader and the record codec on arbitrary and truncated input.

The codec raises only ``ValueError`` (what it documents) on any bytes; the store raises only
``CorruptLogError``/``StoreError`` on any log. A valid log cut at any byte reads back exactly the
records whose lines are complete, with a torn tail reported iff bytes follow the last newline;
a writer cuts those bytes and nothing else. A log with a bad complete line names the first one.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stowage.core import (
    CorruptLogError,
    ErrorRecord,
    FunctionCallOutput,
    ItemRecord,
    LogRead,
    MicrocompactRecord,
    ProtectedRecord,
    Record,
    SessionRecord,
    StoreError,
    TurnRecord,
    UserMessage,
)
from stowage.storage import JsonlStore, decode_record, encode_record
from stowage.storage.contract import compaction, expected_tail, round_records, session_start

T = TypeVar("T")

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Every record type, several shapes: the lines logs are made of.
SAMPLES: tuple[Record, ...] = (
    *session_start(),
    *round_records(4, 1),
    compaction(8, 5),
    SessionRecord(seq=1, model="m", settings={"nested": {"a": [1, 2.5, None, True]}}),
    ItemRecord(seq=1, item=UserMessage(text='line\n"type":"compaction" é 雪 🚀 \u2028')),
    ItemRecord(seq=1, item=FunctionCallOutput(call_id="c", output="x" * 300, is_error=True)),
    MicrocompactRecord(seq=1, stubbed=(4, 6), reason="r", tokens_before=None, tokens_after=3),
    ProtectedRecord(seq=1, ops=({"type": "compaction"},)),
    TurnRecord(seq=1, turn=1, phase="finished"),
    ErrorRecord(seq=1, kind="tool", message="boom"),
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _line(record: Record, seq: int) -> bytes:
    return encode_record(dataclasses.replace(record, seq=seq))


@st.composite
def mutated_lines(draw: st.DrawFn) -> bytes:
    """A valid record line with a few fields (top level or one object down) deleted or set to
    any JSON value: the near misses random bytes almost never reach."""
    data: dict[str, Any] = orjson.loads(encode_record(draw(st.sampled_from(SAMPLES))))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        target = data
        objects = sorted(key for key, value in data.items() if isinstance(value, dict))
        if objects and draw(st.booleans()):
            target = data[draw(st.sampled_from(objects))]
        key = draw(st.sampled_from(sorted(target)) | st.text(max_size=6)) if target else "v"
        if key in target and draw(st.booleans()):
            del target[key]
        else:
            target[key] = draw(json_values)
    return orjson.dumps(data)


@st.composite
def valid_logs(draw: st.DrawFn) -> list[Record]:
    """A log whose line n holds seq n: the session record, then any records, maybe compactions."""
    log: list[Record] = [session_start()[0]]
    for _ in range(draw(st.integers(min_value=0, max_value=12))):
        seq = len(log) + 1
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            log.append(compaction(seq, draw(st.integers(min_value=0, max_value=seq + 2))))
        else:
            log.append(dataclasses.replace(draw(st.sampled_from(SAMPLES[1:])), seq=seq))
    return log


@st.composite
def rough_logs(draw: st.DrawFn) -> bytes:
    """Lines that are good (right seq), wrong seq, mutated, cut short, or noise; then maybe a
    partial last line. Or, sometimes, bytes of any kind."""
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        return draw(st.binary(max_size=300))
    lines: list[bytes] = []
    for number in range(1, draw(st.integers(min_value=0, max_value=8)) + 1):
        kind = draw(st.sampled_from(["good"] * 6 + ["seq", "mutated", "cut", "noise"]))
        record = draw(st.sampled_from(SAMPLES))
        if kind == "good":
            line = _line(record, number)
        elif kind == "seq":
            line = _line(record, draw(st.integers(min_value=1, max_value=20)))
        elif kind == "mutated":
            line = draw(mutated_lines()) + b"\n"
        elif kind == "cut":
            good = _line(record, number)
            line = good[: draw(st.integers(min_value=0, max_value=len(good) - 1))] + b"\n"
        else:
            line = draw(st.binary(max_size=40)).replace(b"\n", b"") + b"\n"
        lines.append(line)
    tail = draw(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")))
    return b"".join(lines) + tail


def _first_bad_line(data: bytes) -> int | None:
    """The oracle: the first complete line that is not the record of its own seq."""
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            if decode_record(line).seq != number:
                return number
        except ValueError:
            return number
    return None


async def _attempt(call: Callable[[], Awaitable[T]]) -> T | StoreError:
    """The call's result, or the documented error it raised (anything else fails the test)."""
    try:
        return await call()
    except StoreError as exc:  # CorruptLogError, SessionNotFound, ... are StoreErrors
        return exc


async def _bytes(path: Path) -> bytes:
    return await anyio.Path(path).read_bytes()


def _in_a_log(data: bytes, check: Callable[[JsonlStore, Path], Awaitable[None]]) -> None:
    """Run ``check(store, path)`` on a fresh store whose log ``s`` holds ``data``."""
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "s.jsonl"
        path.write_bytes(data)

        async def main() -> None:
            with anyio.fail_after(10):
                store = JsonlStore(root, durability="none")
                try:
                    await check(store, path)
                finally:
                    await store.aclose()

        anyio.run(main)


# -- the codec --------------------------------------------------------------------------------


@PROPERTY
@given(st.binary(max_size=200) | mutated_lines())
def test_decode_raises_only_value_error_and_what_it_accepts_round_trips(line: bytes) -> None:
    try:
        record = decode_record(line)
    except ValueError:
        return
    assert decode_record(encode_record(record)) == record


@PROPERTY
@given(st.sampled_from(SAMPLES), st.data())
def test_a_line_cut_short_never_decodes(record: Record, data: st.DataObject) -> None:
    """Every proper prefix of a record line is refused: a torn write is never taken for a
    record (a JSON object ends with its last byte)."""
    line = encode_record(record).rstrip(b"\n")
    cut = data.draw(st.integers(min_value=0, max_value=len(line) - 1))
    with pytest.raises(ValueError):
        decode_record(line[:cut])


# -- the reader on truncated logs ---------------------------------------------------------------


@PROPERTY
@given(valid_logs(), st.data())
def test_a_log_cut_at_any_byte_reads_back_every_complete_line(
    log: Sequence[Record], data: st.DataObject
) -> None:
    whole = b"".join(encode_record(record) for record in log)
    k = data.draw(st.integers(min_value=0, max_value=len(whole)), label="cut at")
    cut = whole[:k]
    complete = cut.count(b"\n")
    good_end = cut.rfind(b"\n") + 1
    torn_bytes = k - good_end

    async def check(store: JsonlStore, path: Path) -> None:
        read = await store.read("s", repair=False)
        tail = await store.read_tail("s", repair=False)
        assert list(read.records) == list(log[:complete])
        assert tail.records == expected_tail(read.records)
        if torn_bytes:
            assert read.torn_tail is not None
            assert (read.torn_tail.line, read.torn_tail.bytes_removed) == (complete + 1, torn_bytes)
            assert not read.torn_tail.removed and tail.torn_tail == read.torn_tail
        else:
            assert read.torn_tail is None and tail.torn_tail is None
        assert await _bytes(path) == cut, "a reader changed the log"
        lease = await store.acquire("s")  # the writer cuts the torn bytes and only them
        assert await _bytes(path) == cut[:good_end]
        assert (lease.repaired is not None) == bool(torn_bytes)
        await lease.release()

    _in_a_log(cut, check)


# -- the reader on rough logs -----------------------------------------------------------------


@PROPERTY
@given(rough_logs())
def test_any_log_reads_back_whole_or_names_its_first_bad_line(data: bytes) -> None:
    """read and read_tail raise nothing but store errors; read either returns one record per
    complete line (seq n on line n) or names the first bad complete line; a writer's acquire
    never removes a complete line, and never touches a log it refuses."""
    bad = _first_bad_line(data)
    complete = data.count(b"\n")
    good_end = data.rfind(b"\n") + 1

    async def check(store: JsonlStore, path: Path) -> None:
        read = await _attempt(partial(store.read, "s", repair=False))
        tail = await _attempt(partial(store.read_tail, "s", repair=False))
        assert await _bytes(path) == data, "a reader changed the log"
        if bad is None:
            assert isinstance(read, LogRead), f"a sound log was refused: {read!r}"
            assert [r.seq for r in read.records] == list(range(1, complete + 1))
            assert (read.torn_tail is not None) == (good_end < len(data))
            assert isinstance(tail, LogRead), f"read_tail refused a sound log: {tail!r}"
            assert tail.records == expected_tail(read.records)
        else:
            assert isinstance(read, CorruptLogError), f"line {bad} is bad, read gave {read!r}"
            assert (read.path, read.line) == (str(path), bad)
            assert f"{path}:{bad}:" in str(read)
        acquired = await _attempt(partial(store.acquire, "s"))
        after = await _bytes(path)
        if isinstance(acquired, StoreError):
            assert after == data, "a refused acquire changed the log"
        else:
            assert after in (data, data[:good_end]), "acquire removed more than a torn tail"
            await acquired.release()

    _in_a_log(data, check)
