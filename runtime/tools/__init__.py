"""Tools: the registry and its executor helper, ``@tool``, MCP servers' tools, the workspace
tools (and the secret patterns they refuse), ``recall_artifact`` and ``search_history``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from ._acting import applied_after_crash
    from ._command import command_line
    from ._decorator import DecoratedTool, tool
    from ._guard import DEFAULT_SECRET_PATTERNS
    from ._mcp import MCPServer, MCPTool, MCPToolSource, add_mcp_tools, mcp_server
    from ._milestone import (
        MILESTONE_NAME_CHARS,
        MILESTONE_NOTE_CHARS,
        MILESTONE_TOOL,
        MilestoneArgs,
        with_milestone,
    )
    from ._policy import CallVerdict, ToolPolicy
    from ._recall import with_recall
    from ._registry import (
        FunctionTool,
        ToolError,
        ToolRegistry,
        after_crash,
        call_effects,
        call_preview,
        execute_call,
        trail_ops,
    )
    from ._search_history import SEARCH_TOOL, FindRecords, FoundRecords, search_history_tool
    from ._workspace import workspace_tools

__all__ = [
    "after_crash",
    "command_line",
    "applied_after_crash",
    "call_effects",
    "call_preview",
    "trail_ops",
    "ToolPolicy",
    "CallVerdict",
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
    "SEARCH_TOOL",
    "FindRecords",
    "FoundRecords",
    "search_history_tool",
    "MILESTONE_NAME_CHARS",
    "MILESTONE_NOTE_CHARS",
    "MILESTONE_TOOL",
    "MilestoneArgs",
    "with_milestone",
    "workspace_tools",
]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "after_crash": "._registry",
    "command_line": "._command",
    "applied_after_crash": "._acting",
    "call_effects": "._registry",
    "call_preview": "._registry",
    "trail_ops": "._registry",
    "ToolPolicy": "._policy",
    "CallVerdict": "._policy",
    "DecoratedTool": "._decorator",
    "tool": "._decorator",
    "DEFAULT_SECRET_PATTERNS": "._guard",
    "MCPServer": "._mcp",
    "MCPTool": "._mcp",
    "MCPToolSource": "._mcp",
    "add_mcp_tools": "._mcp",
    "mcp_server": "._mcp",
    "with_recall": "._recall",
    "MILESTONE_NAME_CHARS": "._milestone",
    "MILESTONE_NOTE_CHARS": "._milestone",
    "MILESTONE_TOOL": "._milestone",
    "MilestoneArgs": "._milestone",
    "with_milestone": "._milestone",
    "FunctionTool": "._registry",
    "ToolError": "._registry",
    "ToolRegistry": "._registry",
    "execute_call": "._registry",
    "workspace_tools": "._workspace",
    "SEARCH_TOOL": "._search_history",
    "FindRecords": "._search_history",
    "FoundRecords": "._search_history",
    "search_history_tool": "._search_history",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
