"""Asking an endpoint about a model: sessions that open together ask once, not once each, and
what it says the model takes (its window, parallel tool calls, the most tools) is recorded
with the new session."""

from __future__ import annotations

from pathlib import Path

import anyio
from aiohttp import web
from stowage.core import SessionRecord, Settings
from stowage.facade import Runtime
from stowage.facade._identity import WindowFinder
from stowage.storage import JsonlStore


async def test_sessions_opening_at_once_ask_the_endpoint_once() -> None:
    asked: list[str] = []

    async def model(request: web.Request) -> web.Response:
        asked.append(request.match_info["name"])
        await anyio.sleep(0.2)  # slow enough that every opener arrives while it is asked
        return web.json_response({"id": "mystery-model", "context_window": 32_000})

    app = web.Application()
    app.router.add_get("/v1/models/{name}", model)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        settings = Settings(
            model="mystery-model", base_url=f"http://127.0.0.1:{port}/v1", api_key="k"
        )
        finder = WindowFinder()
        found = []

        async def open_one() -> None:
            found.append(await finder.find(settings))

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(open_one)
        assert asked == ["mystery-model"]
        assert [f.context_window for f in found] == [32_000] * 8
        assert {f.source for f in found} == {"endpoint"}
        # and later openings are answered from what was found
        assert (await finder.find(settings)).context_window == 32_000
        assert asked == ["mystery-model"]
    finally:
        await runner.cleanup()


async def test_what_the_endpoint_says_the_model_takes_is_recorded_and_options_win(
    tmp_path: Path,
) -> None:
    info = {
        "id": "local-llm",
        "context_window": 32_000,
        "supports_parallel_function_calling": False,
        "max_tools": 16,
    }

    async def model(request: web.Request) -> web.Response:
        return web.json_response(info)

    app = web.Application()
    app.router.add_get("/v1/models/{name}", model)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        base_url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        settings = Settings(model="local-llm", base_url=base_url, api_key="k", tools="none")
        found = await WindowFinder().find(settings)
        assert (found.context_window, found.parallel_tool_calls, found.max_tools) == (
            32_000,
            False,
            16,
        )
        applied = found.applied(settings)
        assert (applied.parallel_tool_calls, applied.max_tools) == (False, 16)
        # an option the user gave wins over what the endpoint says
        assert found.applied(settings.with_(parallel_tool_calls=True)).parallel_tool_calls
        # a new session records it, so a resumed one shapes its requests the same way
        async with Runtime(settings, store=JsonlStore(tmp_path / "st")) as rt:
            session = await rt.create()
            session_id = session.id
        store = JsonlStore(tmp_path / "st")
        try:
            first = (await store.read(session_id)).records[0]
        finally:
            await store.aclose()
        assert isinstance(first, SessionRecord)
        assert first.settings["parallel_tool_calls"] is False
        assert first.settings["max_tools"] == 16
        assert first.context_window == 32_000
    finally:
        await runner.cleanup()
