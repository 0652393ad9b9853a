"""A runtime's MCP servers: started when it is entered, their tools added to its own, and
stopped (connection and process) when it is left."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from anyio.abc import TaskGroup
from stowage.tools import MCPServer, MCPToolSource, ToolRegistry, add_mcp_tools, mcp_server

__all__ = ["MCPServers"]


class MCPServers:
    """The MCP servers of ``specs`` (a command line, an http(s) URL, or an ``MCPServer``)."""

    def __init__(self, specs: Sequence[str | MCPServer]) -> None:
        self._servers = [mcp_server(spec) for spec in specs]
        if self._servers:
            MCPToolSource.check_sdk()
        self._sources: list[MCPToolSource] = []
        self._tg: TaskGroup | None = None

    async def start(self, tools: ToolRegistry) -> ToolRegistry:
        """Start every server; ``tools`` with theirs added (prefixed on a clash). Raises
        ``ConfigError`` naming a server that does not start (the others are stopped)."""
        if not self._servers:
            return tools
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        tools = ToolRegistry(tools)
        try:
            for server in self._servers:
                source = MCPToolSource(server)
                listed = await self._tg.start(source.run)
                self._sources.append(source)
                add_mcp_tools(tools, source, listed)
        except BaseException:
            await self.stop()
            raise
        return tools

    async def stop(self) -> None:
        """Stop every server's connection and process (a stuck one is cancelled)."""
        if self._tg is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            for source in self._sources:
                await source.aclose()
        tg, self._tg = self._tg, None
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
