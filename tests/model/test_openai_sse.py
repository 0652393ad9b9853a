"""The orjson event-stream decoder reads what the SDK's decoder reads, a chunk at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import openai
import pytest
from stowage.core import ResponseTooLarge
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
        self.request = httpx.Request("POST", "http://x/v1/chat/completions")
        self.closed = False

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read.append(chunk)
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


async def test_events_that_arrive_together_come_back_as_one_batch() -> None:
    body = _Body(
        b'data: {"n": 1}\n\ndata: {"n": 2}\n\n: keep-alive\n\n',
        b": keep-alive\n\n",  # a chunk with no event is read on, never an empty batch
        b'data: {"n"',
        b': 3}\r\n\r\ndata: [DONE]\n\ndata: {"n": 4}\n\n',
        b"trailing bytes after [DONE]",
    )
    async with JsonEventStream(body) as events:
        assert await events.next_events() == [{"n": 1}, {"n": 2}]
        assert await events.next_events() == [{"n": 3}]  # split across chunks, CRLF lines
        assert await events.next_events() is None  # [DONE]: nothing after it is an event
    assert body.read == body.chunks  # the body was drained, so its connection can be reused
    assert body.closed


async def test_a_last_event_without_its_blank_line_still_counts() -> None:
    async with JsonEventStream(_Body(b'data: {"n": 1}\n\ndata: {"n": 2}')) as events:
        assert await events.next_events() == [{"n": 1}]
        assert await events.next_events() == [{"n": 2}]
        assert await events.next_events() is None


async def test_an_error_payload_and_a_broken_body_keep_the_sdks_error_classes() -> None:
    async with JsonEventStream(_Body(b'data: {"error": {"message": "overloaded"}}\n\n')) as events:
        with pytest.raises(openai.APIError, match="overloaded"):
            await events.next_events()

    class Broken(_Body):
        async def aiter_bytes(self) -> AsyncIterator[bytes]:
            yield b'data: {"n": 1}\n\n'
            raise OSError("connection reset")

    async with JsonEventStream(Broken()) as events:
        assert await events.next_events() == [{"n": 1}]
        with pytest.raises(openai.APIConnectionError):
            await events.next_events()


async def test_an_event_that_never_ends_is_refused_at_its_limit_not_read_on() -> None:
    piece = b"x" * 65536
    body = _Body(b'data: {"n": 1}\n\ndata: {"text": "', *([piece] * 64))
    with anyio.fail_after(10), pytest.raises(ResponseTooLarge, match="one event of the stream"):
        async with JsonEventStream(body, max_event_bytes=256 * 1024) as events:
            assert await events.next_events() == [{"n": 1}]
            while await events.next_events() is not None:
                pass
    assert len(body.read) <= 6  # about 256 KiB read of the 4 MiB it would have sent
    assert body.closed
