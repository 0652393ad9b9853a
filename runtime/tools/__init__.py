"""Tools: the registry and its executor helper, the workspace tools, and ``recall_artifact``."""

from ._recall import with_recall
from ._registry import FunctionTool, ToolRegistry, execute_call
from ._workspace import workspace_tools

__all__ = [
    "FunctionTool",
    "ToolRegistry",
    "execute_call",
    "with_recall",
    "workspace_tools",
]
