"""Tools: the registry and its executor helper, ``@tool``, MCP servers' tools, the workspace
tools (and the secret patterns they refuse), and ``recall_artifact``."""

from ._decorator import DecoratedTool, tool
from ._guard import DEFAULT_SECRET_PATTERNS
from ._mcp import MCPServer, MCPTool, MCPToolSource, add_mcp_tools, mcp_server
from ._recall import with_recall
from ._registry import FunctionTool, ToolError, ToolRegistry, execute_call
from ._workspace import workspace_tools

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "DecoratedTool",
    "FunctionTool",
    "MCPServer",
    "MCPTool",
    "MCPToolSource",
    "ToolError",
    "ToolRegistry",
    "add_mcp_tools",
    "execute_call",
    "mcp_server",
    "tool",
    "with_recall",
    "workspace_tools",
]
