"""The orjson event-stream decoder reads what the SDK's decoder reads, a chunk at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from stowage.core import ResponseTooLarge
from stowage.model._http_errors import EventError, TransportError
from stowage.model._sse import JsonEventStream, sse_data


def test_event_data_lines_are_joined_and_comments_have_none() -> None:
    assert sse_data(b'event: response.created\ndata: {"a": 1}') == b'{"a": 1}'
    assert sse_data(b"data: one\ndata: two") == b"one\ntwo"
    assert sse_data(b"data:[DONE]") == b"[DONE]"
    assert sse_data(b": keep-alive") is None


class _Body:
    """A streamed response whose body arrives in the given chunks."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.read: list[bytes] = []
        self.closed: bool | None = None  # whether it was closed read to its end
        self._pieces: AsyncIterator[bytes] = self.pieces()

    async def pieces(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read.append(chunk)
            yield chunk

    async def read_chunk(self) -> bytes:
        return await anext(self._pieces, b"")

    async def close(self, ended: bool) -> None:
        self.closed = ended

    def events(self, **kw: int) -> JsonEventStream:
        return JsonEventStream(self.read_chunk, self.close, status=200, **kw)


async def test_events_that_arrive_together_come_back_as_one_batch() -> None:
    body = _Body(
        b'data: {"n": 1}\n\ndata: {"n": 2}\n\n: keep-alive\n\n',
        b": keep-alive\n\n",  # a chunk with no event is read on, never an empty batch
        b'data: {"n"',
        b': 3}\r\n\r\ndata: [DONE]\n\ndata: {"n": 4}\n\n',
        b"trailing bytes after [DONE]",
    )
    async with body.events() as events:
        assert events.status == 200
        assert await events.next_events() == [{"n": 1}, {"n": 2}]
        assert await events.next_events() == [{"n": 3}]  # split across chunks, CRLF lines
        assert await events.next_events() is None  # [DONE]: nothing after it is an event
    assert body.read == body.chunks  # the body was drained, so its connection can be reused
    assert body.closed is True


async def test_a_last_event_without_its_blank_line_still_counts() -> None:
    async with _Body(b'data: {"n": 1}\n\ndata: {"n": 2}').events() as events:
        assert await events.next_events() == [{"n": 1}]
        assert await events.next_events() == [{"n": 2}]
        assert await events.next_events() is None


async def test_an_error_payload_and_a_broken_body_raise_their_own_errors() -> None:
    body = _Body(b'data: {"error": {"message": "overloaded", "code": "busy"}}\n\n')
    async with body.events() as events:
        with pytest.raises(EventError, match="overloaded") as caught:
            await events.next_events()
    assert caught.value.code == "busy" and caught.value.error["message"] == "overloaded"
    assert body.closed is False  # not read to its end: the connection is not kept

    class Broken(_Body):
        async def pieces(self) -> AsyncIterator[bytes]:
            yield b'data: {"n": 1}\n\n'
            raise TransportError("ClientPayloadError: connection reset")

    async with Broken().events() as events:
        assert await events.next_events() == [{"n": 1}]
        with pytest.raises(TransportError):
            await events.next_events()


async def test_an_event_that_never_ends_is_refused_at_its_limit_not_read_on() -> None:
    piece = b"x" * 65536
    body = _Body(b'data: {"n": 1}\n\ndata: {"text": "', *([piece] * 64))
    with anyio.fail_after(10), pytest.raises(ResponseTooLarge, match="one event of the stream"):
        async with body.events(max_event_bytes=256 * 1024) as events:
            assert await events.next_events() == [{"n": 1}]
            while await events.next_events() is not None:
                pass
    assert len(body.read) <= 6  # about 256 KiB read of the 4 MiB it would have sent
    assert body.closed is False
