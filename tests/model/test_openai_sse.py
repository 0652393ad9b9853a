"""The orjson event-stream decoder reads what the SDK's decoder reads."""

from __future__ import annotations

from stowage.model._sse import sse_data


def test_event_data_lines_are_joined_and_comments_have_none() -> None:
    assert sse_data(b'event: response.created\ndata: {"a": 1}') == b'{"a": 1}'
    assert sse_data(b"data: one\ndata: two") == b"one\ntwo"
    assert sse_data(b"data:[DONE]") == b"[DONE]"
    assert sse_data(b": keep-alive") is None
