"""Sessions that open together ask an endpoint for a model's window once, not once each."""

from __future__ import annotations

import anyio
from aiohttp import web
from stowage.core import Settings
from stowage.facade._identity import WindowFinder


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
