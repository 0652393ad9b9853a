"""Tools from Model Context Protocol servers, through the official ``mcp`` SDK (the ``mcp`` extra,
imported only when a server is started)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import structlog
from anyio.abc import TaskStatus
from stowage.core import ConfigError, Effect, EffectKind, Tool, ToolSpec, redact_url

from ._registry import ToolError, ToolRegistry, declared_effects

if TYPE_CHECKING:  # the SDK is an optional extra: its types only for the type checker
    from mcp import ClientSession

__all__ = ["MCPServer", "MCPTool", "MCPToolSource", "add_mcp_tools", "mcp_server"]

_log = structlog.get_logger("stowage.tools.mcp")

MCP_EXTRA_HINT = "MCP servers need the mcp extra: pip install 'stowage-runtime[mcp]'"
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPServer:
    """Where an MCP server is: a ``command`` to start (stdio) or a ``url`` (streamable HTTP).

    ``name`` prefixes its tools when their names clash with others (default: the command's
    program name or the URL's host). ``call_restart_wait``: seconds a call waits for a
    restarting server before it gets an error output. ``call_timeout``: seconds the server
    may take to answer one call before it counts as hung and is restarted (default: only the
    tool timeout of the executor, which also restarts it).
    """

    command: tuple[str, ...] = ()
    url: str | None = None
    name: str | None = None
    env: dict[str, str] | None = None
    start_timeout: float = 30.0
    call_restart_wait: float = 10.0
    call_timeout: float | None = None
    #: which arguments of which of its tools are paths or commands, by the server's tool
    #: name: ``{"read_text_file": {"path": "read"}}`` (the approval policy and the trail of
    #: files touched read them)
    touches: dict[str, dict[str, EffectKind]] | None = None

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ConfigError("an MCP server needs exactly one of a command or a url")
        if self.url is not None and urlsplit(self.url).scheme not in ("http", "https"):
            raise ConfigError(f"MCP url {redact_url(self.url)!r}: use an http:// or https:// URL")

    @property
    def label(self) -> str:
        """The server's name for tool prefixes and messages (never a credential)."""
        if self.name:
            return self.name
        if self.command:
            program = self.command[0].rsplit("/", 1)[-1]
            if program.startswith(("python", "uv", "npx", "node")):
                # the script or package, not the interpreter: `python -m pkg`, `npx srv`
                args = [a for a in self.command[1:] if not a.startswith("-")]
                program = args[0].rsplit("/", 1)[-1] if args else program
            return _NAME_CHARS.sub("_", program.removesuffix(".py")) or "mcp"
        return _NAME_CHARS.sub("_", urlsplit(self.url or "").hostname or "mcp")


def mcp_server(spec: str | MCPServer) -> MCPServer:
    """An ``MCPServer`` from a command line (``"npx server --flag"``) or an ``http(s)://`` URL.

    Raises ``ConfigError`` on an empty or unparsable command.
    """
    if isinstance(spec, MCPServer):
        return spec
    text = spec.strip()
    if text.startswith(("http://", "https://")):
        return MCPServer(url=text)
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise ConfigError(f"MCP command {text!r}: {exc}") from None
    if not argv:
        raise ConfigError("an MCP command must not be empty")
    return MCPServer(command=argv)


def _import_sdk() -> Any:
    try:
        import mcp
    except ImportError:
        raise ConfigError(MCP_EXTRA_HINT) from None
    return mcp


@dataclass(eq=False)
class MCPToolSource:
    """One MCP server's connection: ``run`` (a task of the runtime) keeps it up and restarts it;
    ``call`` runs one of its tools; ``aclose`` stops it (and the server's process)."""

    server: MCPServer
    _session: ClientSession | None = None
    _ready: anyio.Event = field(default_factory=anyio.Event)
    _broken: anyio.Event = field(default_factory=anyio.Event)
    _stopped: anyio.Event = field(default_factory=anyio.Event)
    _closing: bool = False
    restarts: int = 0

    @staticmethod
    def check_sdk() -> None:
        """Raises ``ConfigError`` naming the extra to install when the ``mcp`` SDK is absent."""
        _import_sdk()

    async def run(self, *, task_status: TaskStatus[tuple[Any, ...]]) -> None:
        """Connect, report the listed tools through ``task_status``, then keep the connection
        up until ``aclose``. Raises ``ConfigError`` if the first connection fails."""
        sdk = _import_sdk()
        log = _log.bind(server=self.server.label)
        first = True
        try:
            while not self._closing:
                try:
                    async with (
                        self._transport() as streams,
                        sdk.ClientSession(streams[0], streams[1]) as session,
                    ):
                        with anyio.fail_after(self.server.start_timeout):
                            await session.initialize()
                            listed = await session.list_tools()
                        broken = self._broken = anyio.Event()
                        self._session = session
                        if first:
                            first = False
                            task_status.started(tuple(listed.tools))
                        else:
                            log.info("mcp_server_restarted", restarts=self.restarts)
                        self._ready.set()
                        await broken.wait()
                except Exception as exc:
                    if first:
                        raise ConfigError(
                            f"MCP server {self.server.label}: could not start: {_describe(exc)}"
                        ) from exc
                    log.warning("mcp_server_failed", error=_describe(exc))
                finally:
                    # unless ``restart`` did it already (then a call may wait on the new one)
                    if self._session is not None:
                        self._session = None
                        self._ready = anyio.Event()
                if not self._closing:
                    self.restarts += 1
                    await anyio.sleep(min(0.2 * self.restarts, 5.0))  # a crash loop backs off
        finally:
            self._stopped.set()

    def _transport(self) -> Any:
        if self.server.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.server.url)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command, *args = self.server.command
        return stdio_client(StdioServerParameters(command=command, args=args, env=self.server.env))

    def restart(self) -> None:
        """Drop the connection (the server's state is unknown); ``run`` starts it again and
        calls wait for that."""
        if self._session is not None:
            self._session = None
            self._ready = anyio.Event()
        self._broken.set()

    async def aclose(self) -> None:
        """Stop the connection and the server's process; waits for ``run`` to end."""
        self._closing = True
        self._broken.set()
        await self._stopped.wait()

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run tool ``name``; the text of its content blocks. Raises ``ToolError`` when the
        tool reports an error, the server fails, or it is restarting for too long. A call
        cancelled mid-way (a timeout, an interrupt) restarts the server."""
        label = self.server.label
        with anyio.move_on_after(self.server.call_restart_wait):
            await self._ready.wait()
        session = self._session
        if session is None:
            raise ToolError(f"MCP server {label} is not available (restarting); try again later")
        try:
            if self.server.call_timeout is None:
                result = await session.call_tool(name, arguments)
            else:
                with anyio.fail_after(self.server.call_timeout):
                    result = await session.call_tool(name, arguments)
        except TimeoutError:
            self.restart()
            raise ToolError(
                f"MCP server {label} did not answer {name} within "
                f"{self.server.call_timeout:g} s; it is being restarted"
            ) from None
        except anyio.get_cancelled_exc_class():
            self.restart()
            raise
        except Exception as exc:
            self.restart()
            raise ToolError(
                f"MCP server {label} failed during {name}: {_describe(exc)}; it is being restarted"
            ) from exc
        text = _render(result.content)
        if result.is_error:
            raise ToolError(text or f"{name} reported an error")
        return text


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _render(content: Sequence[Any]) -> str:
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            parts.append(f"[{getattr(block, 'type', 'content')} content not shown]")
    return "\n".join(parts)


class MCPTool:
    """A tool of an MCP server, as the registry holds it (maybe under a prefixed name)."""

    def __init__(self, source: MCPToolSource, listed: Any, *, name: str) -> None:
        self._source = source
        self._remote_name: str = listed.name
        schema = dict(listed.input_schema or {"type": "object", "properties": {}})
        self._spec = ToolSpec(name=name, description=listed.description or "", parameters=schema)

    def __repr__(self) -> str:
        return f"MCPTool(name={self._spec.name!r}, server={self._source.server.label!r})"

    @property
    def spec(self) -> ToolSpec:
        """Name, description and the server's argument schema."""
        return self._spec

    @property
    def timeout(self) -> float | None:
        """The executor's default."""
        return None

    def validate(self, arguments: Any) -> dict[str, Any]:
        """An object of arguments (the server checks them against its schema)."""
        if not isinstance(arguments, dict):
            raise ValueError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        return arguments

    def effects(self, arguments: Any) -> tuple[Effect, ...]:
        """What a call touches, as the server's ``touches`` declares for this tool."""
        declared = (self._source.server.touches or {}).get(self._remote_name, {})
        return declared_effects(declared, arguments)

    async def run(self, arguments: dict[str, Any]) -> str:
        """Call the tool on its server; raises ``ToolError`` as ``MCPToolSource.call`` does."""
        return await self._source.call(self._remote_name, arguments)


def add_mcp_tools(
    registry: ToolRegistry, source: MCPToolSource, listed: Sequence[Any]
) -> list[Tool]:
    """Add ``listed`` tools of ``source`` to ``registry``: a name already taken gets the
    server's name as a prefix (``server_name``). Returns the tools added.

    Raises ``ConfigError`` if even the prefixed name is taken.
    """
    added: list[Tool] = []
    for item in listed:
        name = _NAME_CHARS.sub("_", item.name)
        if name in registry:
            name = f"{source.server.label}_{name}"
        tool = MCPTool(source, item, name=name)
        registry.add(tool)
        added.append(tool)
    return added
