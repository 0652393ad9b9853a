"""An event block's data is found wherever its ``data:`` lines are, and a chunk of several
events is cut into the same events however its blocks fall."""

from __future__ import annotations

import pytest
from stowage.model._http_errors import EventError
from stowage.model._sse import JsonEventStream, sse_data


@pytest.mark.parametrize(
    ("block", "data"),
    [
        (b"data: x", b"x"),
        (b"data:x", b"x"),
        (b"data:  two spaces", b" two spaces"),
        (b"data:", b""),
        (b"event: a\ndata: x", b"x"),
        (b"event: a\ndata: x\nid: 3", b"x"),
        (b"id: 1\nevent: a\ndata: {}", b"{}"),
        (b"data: a\ndata: b", b"a\nb"),
        (b"event: e\ndata: a\nid: 1\ndata:b", b"a\nb"),
        (b": keep-alive", None),
        (b"event: a", None),
        (b"event: a\nxdata: no", None),
        (b"xdata: no", None),
    ],
)
def test_the_data_of_a_block_is_its_data_lines_joined(block: bytes, data: bytes | None) -> None:
    assert sse_data(block) == data


def _stream(*chunks: bytes) -> JsonEventStream:
    """A stream whose body arrives in ``chunks``."""
    pieces = list(chunks)

    async def read() -> bytes:
        return pieces.pop(0) if pieces else b""

    async def close(ended: bool) -> None:
        return None

    return JsonEventStream(read, close)


async def test_a_chunk_of_events_is_cut_at_blank_lines_and_keeps_the_unended_rest() -> None:
    stream = _stream(
        b'event: x\ndata: {"a": 1}\n\n: ping\n\ndata: {"b": 2}\n\ndata: {"c"',
        b": 3}\r\n\r\ndata: [DONE]\n\ndata: {}\n\n",
        b'data: {"d": 4}\n\n',
    )
    async with stream:
        assert await stream.next_events() == [{"a": 1}, {"b": 2}]
        assert await stream.next_events() == [{"c": 3}]
        assert await stream.next_events() is None  # after [DONE] the rest is read and dropped


async def test_an_error_event_in_a_chunk_raises() -> None:
    stream = _stream(b'data: {"a": 1}\n\ndata: {"error": {"message": "boom"}}\n\n')
    with pytest.raises(EventError, match="boom"):
        await stream.next_events()
