"""``--mcp COMMAND`` and ``--mcp-url URL``: MCP servers whose tools a session may call."""

from __future__ import annotations

import argparse

from stowage.core import REDACTED, ConfigError, Settings
from stowage.tools import MCPServer, MCPToolSource, mcp_server

from ._config import load_config

__all__ = ["add_mcp_options", "mcp_servers_from", "mcp_servers_of"]


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


def mcp_servers_of(settings: Settings) -> list[MCPServer]:
    """The servers ``settings`` name (``mcp`` commands, then ``mcp_url`` URLs): those a new
    session was given, or those a continued one recorded. Raises ``ConfigError`` as
    ``mcp_servers_from`` does, and for a recorded server whose credentials were redacted and
    that neither an option nor the configuration gives again."""
    for name, option in (("mcp", "--mcp"), ("mcp_url", "--mcp-url")):
        for entry in getattr(settings, name):
            if REDACTED in entry:
                raise ConfigError(
                    f"the session's MCP server {entry!r} needs credentials that are never "
                    f"stored: give it again with {option} (or {name} in stowage.toml)"
                )
    servers = [mcp_server(command) for command in settings.mcp]
    servers.extend(MCPServer(url=url) for url in settings.mcp_url)
    if servers:
        MCPToolSource.check_sdk()
    return servers
