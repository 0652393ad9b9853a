"""Tools: the registry and its executor helper, the workspace tools (and the secret patterns
they refuse), and ``recall_artifact``."""

from ._guard import DEFAULT_SECRET_PATTERNS
from ._recall import with_recall
from ._registry import FunctionTool, ToolRegistry, execute_call
from ._workspace import workspace_tools

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "FunctionTool",
    "ToolRegistry",
    "execute_call",
    "with_recall",
    "workspace_tools",
]
