"""A small MCP server for the tests, written with the SDK's own server (``MCPServer``).

``python mcp_test_server.py stdio`` or ``python mcp_test_server.py http PORT``. ``CRASH_MARKER``
in the environment names a file: ``crash`` exits the process mid-call unless it exists (and
creates it first), so the restarted server answers.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server import MCPServer

server = MCPServer("testserver")


@server.tool()
def echo(text: str) -> str:
    """Repeat the text."""
    return f"mcp echo: {text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def refuse(reason: str) -> str:
    """Always fails with the reason."""
    raise ValueError(f"refused: {reason}")


@server.tool()
def crash() -> str:
    """Exit the whole server mid-call, once (see CRASH_MARKER)."""
    marker = Path(os.environ["CRASH_MARKER"])
    if not marker.exists():
        marker.write_text("crashed")
        sys.stdout.flush()
        os._exit(3)
    return "survived"


@server.tool()
def hang() -> str:
    """Never answer."""
    time.sleep(3600)
    return "late"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
