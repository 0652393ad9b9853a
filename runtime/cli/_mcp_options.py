"""``--mcp COMMAND`` and ``--mcp-url URL``: MCP servers whose tools a session may call.

Repeatable, in the order given; the ``mcp`` extra is needed only when one is used, and its
absence is a one-line usage error (exit 2) naming the extra.
"""

from __future__ import annotations

import argparse

from stowage.tools import MCPServer, MCPToolSource, mcp_server

from ._config import load_config

__all__ = ["add_mcp_options", "mcp_servers_from"]


def add_mcp_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--mcp`` and ``--mcp-url`` (both repeatable) to ``parser``."""
    parser.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="'COMMAND ARGS'",
        help="start an MCP server over stdio and offer its tools (repeatable; needs the mcp extra)",
    )
    parser.add_argument(
        "--mcp-url",
        action="append",
        default=[],
        metavar="URL",
        help="connect to an MCP server over streamable HTTP (repeatable; needs the mcp extra)",
    )


def mcp_servers_from(args: argparse.Namespace) -> list[MCPServer]:
    """The servers the options name; when none is typed, the ``mcp``/``mcp_url`` lists of the
    configuration (``STOWAGE_MCP``, ``stowage.toml``). Raises ``ConfigError`` for an empty
    command, a URL that is not http(s), or when the ``mcp`` extra is not installed."""
    commands: list[str] = getattr(args, "mcp", None) or []
    urls: list[str] = getattr(args, "mcp_url", None) or []
    if not commands and not urls:
        config = load_config()
        commands, urls = config.mcp or [], config.mcp_url or []
    servers = [mcp_server(command) for command in commands]
    servers.extend(MCPServer(url=url) for url in urls)
    if servers:
        MCPToolSource.check_sdk()
    return servers
