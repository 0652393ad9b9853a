"""The window of a model outside the registry, asked of its endpoint over real HTTP."""

from __future__ import annotations

import anyio
import pytest
from stowage.model import discover_context_window, window_from_model_info
from stowage.testing import FakeOpenAIServer


@pytest.mark.parametrize(
    "field", ["max_model_len", "context_length", "context_window", "max_context_length"]
)
async def test_the_window_is_read_from_the_field_the_server_uses(field: str) -> None:
    with anyio.fail_after(20):
        async with FakeOpenAIServer(context_window=131_072, window_field=field) as server:
            found = await discover_context_window(server.base_url, "sk-test", "org/local-llm")
    assert found == 131_072


async def test_a_server_that_names_no_window_gives_none() -> None:
    with anyio.fail_after(20):
        async with FakeOpenAIServer() as server:
            assert await discover_context_window(server.base_url, None, "local-llm") is None


async def test_an_endpoint_that_is_down_gives_none_without_raising() -> None:
    with anyio.fail_after(20):
        async with FakeOpenAIServer() as server:
            url = server.base_url
        # the server is gone: nothing listens on its port any more
        assert await discover_context_window(url, None, "local-llm", wait=2) is None


def test_nested_and_implausible_fields() -> None:
    assert window_from_model_info({"id": "x", "top_provider": {"context_length": 32_768}}) == 32_768
    assert window_from_model_info({"max_model_len": 8192, "context_length": 4096}) == 8192
    assert window_from_model_info({"context_length": 0, "context_window": True}) is None
    assert window_from_model_info({"id": "x"}) is None
