"""``recall_artifact``: the built-in tool that gives back a tool output microcompaction stubbed, or
any record ``search_history`` found."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

import pydantic
from stowage.core import (
    HistoryEntry,
    Item,
    ItemRecord,
    Record,
    Settings,
    Tool,
    current_tool_context,
)
from stowage.policy import effective_threshold

from ._registry import FunctionTool, ToolError, ToolRegistry
from ._search_history import SEARCH_TOOL, FindRecords, find_in_log, item_text, search_history_tool

__all__ = ["RECALL_TOOL", "recall_tool", "with_recall"]

RECALL_TOOL = "recall_artifact"
_REF = re.compile(r"^\s*R?(\d+)\s*$", re.IGNORECASE)


#: the most characters one call returns when no ``length`` is given
PAGE_CHARS = 50_000


class RecallArgs(pydantic.BaseModel):
    """Arguments of ``recall_artifact``."""

    ref: str = pydantic.Field(description="the artifact reference a stub names, e.g. R42")
    offset: int = pydantic.Field(
        default=0, ge=0, description="the first character to return (0: from the start)"
    )
    length: int | None = pydantic.Field(
        default=None,
        ge=1,
        description=f"how many characters to return (default: all, at most {PAGE_CHARS})",
    )


def recall_tool(
    history: Callable[[], Sequence[HistoryEntry]],
    read_log: Callable[[], Awaitable[Sequence[Record]]],
) -> FunctionTool[RecallArgs]:
    """The tool over one session's live history and whole log."""

    async def recall(args: RecallArgs) -> str:
        match = _REF.match(args.ref)
        if match is None:
            raise ToolError(f"bad artifact reference {args.ref!r}: expected R<number>, e.g. R42")
        seq = int(match.group(1))
        for entry in history():
            if entry.seq == seq:
                return _page(_output(entry.item, args.ref), args)
        for record in await read_log():
            if isinstance(record, ItemRecord) and record.seq == seq:
                return _page(_output(record.item, args.ref), args)
        raise ToolError(f"no artifact or record {args.ref!r} in this session's log")

    return FunctionTool(
        name=RECALL_TOOL,
        description=(
            "Return the original output of an earlier tool call that is shown as a stub or "
            "cut to its head and tail ('artifact R<n>'), or any record search_history found. "
            "Pass the reference it names; for a long one, an offset and length (at most "
            f"{PAGE_CHARS} characters a call, fewer on a small context window; each part "
            "says where the next one starts)."
        ),
        args_model=RecallArgs,
        fn=recall,
    )


def _page(output: str, args: RecallArgs) -> str:
    """The whole output if it fits one page and no part was asked; else the part, headed."""
    size = len(output)
    context = current_tool_context.get()
    page = PAGE_CHARS
    if context is not None and context.output is not None:
        page = max(1, min(page, context.output.part(size - args.offset)))
    if args.offset == 0 and args.length is None and size <= page:
        return output
    if args.offset >= size and size:
        raise ToolError(f"offset {args.offset} is past the end of {args.ref} ({size} chars)")
    length = min(args.length or page, page)
    end = min(size, args.offset + length)
    rest = f"; {size - end} more from offset {end}" if end < size else "; that is the end"
    return f"[{args.ref}: chars {args.offset}-{end} of {size}{rest}]\n{output[args.offset : end]}"


def _output(item: Item, ref: str) -> str:
    found = item_text(item)
    if found is None:
        raise ToolError(f"{ref} is not a tool output nor a message: nothing to read back")
    return found[1]


def with_recall(
    tools: ToolRegistry,
    settings: Settings,
    *,
    has_stubs: bool,
    history: Callable[[], Sequence[HistoryEntry]],
    read_log: Callable[[], Awaitable[Sequence[Record]]],
    search: FindRecords | None = None,
) -> ToolRegistry:
    """``tools`` plus ``recall_artifact`` when this session may show stubs (watermark mode
    with auto compaction and tools, or stubs already in its history), and ``search_history``
    with it when ``settings.search_history_tool`` is on; ``tools`` itself otherwise, or when
    it has a tool named ``recall_artifact`` already (one named ``search_history`` is kept,
    and ours left out). ``search`` narrows a search where the log is stored (a store's
    search); without it every search reads the whole log with ``read_log``. Raises
    nothing."""
    # a session without tools has no outputs to stub (unless an earlier run stubbed some)
    possible = settings.auto_compact and effective_threshold(settings) is None and len(tools) > 0
    if not (possible or has_stubs) or RECALL_TOOL in tools:
        return tools
    added: list[Tool] = [recall_tool(history, read_log)]
    if settings.search_history_tool and SEARCH_TOOL not in tools:
        added.append(search_history_tool(search or find_in_log(read_log), reader=RECALL_TOOL))
    return ToolRegistry([*tools, *added])
