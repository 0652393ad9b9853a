"""``recall_artifact``: the built-in tool that gives back a tool output microcompaction stubbed.

A stub names its artifact ``R<seq>``: the seq of the output's record in the log. The live
history still holds the original (stubs exist only in the projection); an output a later
compaction absorbed is read back from the log, where nothing is ever deleted.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

import pydantic
from stowage.core import FunctionCallOutput, HistoryEntry, ItemRecord, Record, Settings
from stowage.policy import effective_threshold

from ._registry import FunctionTool, ToolError, ToolRegistry

__all__ = ["RECALL_TOOL", "recall_tool", "with_recall"]

RECALL_TOOL = "recall_artifact"
_REF = re.compile(r"^\s*R?(\d+)\s*$", re.IGNORECASE)


class RecallArgs(pydantic.BaseModel):
    """Arguments of ``recall_artifact``."""

    ref: str = pydantic.Field(description="the artifact reference a stub names, e.g. R42")


def recall_tool(
    history: Callable[[], Sequence[HistoryEntry]],
    read_log: Callable[[], Awaitable[Sequence[Record]]],
) -> FunctionTool[RecallArgs]:
    """The tool over one session: ``history`` gives its live history, ``read_log`` its whole
    log (read only when the output was compacted away). Raises nothing; the tool raises
    ``ToolError`` for a reference that names no tool output."""

    async def recall(args: RecallArgs) -> str:
        match = _REF.match(args.ref)
        if match is None:
            raise ToolError(f"bad artifact reference {args.ref!r}: expected R<number>, e.g. R42")
        seq = int(match.group(1))
        for entry in history():
            if entry.seq == seq:
                return _output(entry.item, args.ref)
        for record in await read_log():
            if isinstance(record, ItemRecord) and record.seq == seq:
                return _output(record.item, args.ref)
        raise ToolError(f"no artifact {args.ref!r} in this session's log")

    return FunctionTool(
        name=RECALL_TOOL,
        description=(
            "Return the full original output of an earlier tool call that is shown as a stub "
            "('stored as artifact R<n>'). Pass the reference the stub names."
        ),
        args_model=RecallArgs,
        fn=recall,
    )


def _output(item: object, ref: str) -> str:
    if not isinstance(item, FunctionCallOutput):
        raise ToolError(f"{ref} is not a tool output")
    return item.output


def with_recall(
    tools: ToolRegistry,
    settings: Settings,
    *,
    has_stubs: bool,
    history: Callable[[], Sequence[HistoryEntry]],
    read_log: Callable[[], Awaitable[Sequence[Record]]],
) -> ToolRegistry:
    """``tools`` plus ``recall_artifact`` when this session may show stubs (watermark mode
    with auto compaction and tools, or stubs already in its history); ``tools`` itself otherwise, or
    when it has a tool of that name already. Raises nothing."""
    # a session without tools has no outputs to stub (unless an earlier run stubbed some)
    possible = settings.auto_compact and effective_threshold(settings) is None and len(tools) > 0
    if not (possible or has_stubs) or RECALL_TOOL in tools:
        return tools
    return ToolRegistry([*tools, recall_tool(history, read_log)])
