"""``mark_milestone``: the model says a phase of its work ended (``milestone_tool``)."""

from __future__ import annotations

import pydantic
from stowage.core import Settings

from ._registry import FunctionTool, ToolRegistry

__all__ = [
    "MILESTONE_NAME_CHARS",
    "MILESTONE_NOTE_CHARS",
    "MILESTONE_TOOL",
    "MilestoneArgs",
    "with_milestone",
]

MILESTONE_TOOL = "mark_milestone"


#: the most characters a milestone's name and note may have (the API and the tool alike)
MILESTONE_NAME_CHARS = 200
MILESTONE_NOTE_CHARS = 2_000


class MilestoneArgs(pydantic.BaseModel):
    """What the model says ended."""

    model_config = pydantic.ConfigDict(extra="forbid")

    name: str = pydantic.Field(
        min_length=1, max_length=MILESTONE_NAME_CHARS, description="the phase that ended"
    )
    note: str | None = pydantic.Field(
        default=None,
        max_length=MILESTONE_NOTE_CHARS,
        description="what it found or left, in a sentence",
    )


async def _mark(args: MilestoneArgs) -> str:
    return f"milestone recorded: {args.name}"


def with_milestone(tools: ToolRegistry, settings: Settings) -> ToolRegistry:
    """``tools`` plus ``mark_milestone`` when ``settings.milestone_tool`` is on (and no tool has
    that name already); ``tools`` itself otherwise. Raises nothing."""
    if not settings.milestone_tool or MILESTONE_TOOL in tools:
        return tools
    tool = FunctionTool(
        name=MILESTONE_TOOL,
        description=(
            "Mark that a phase of your work has ended (a milestone), with its name and a short "
            "note. Call it when you finish a distinct part of the task; the history before it "
            "may then be summarized as a finished phase."
        ),
        args_model=MilestoneArgs,
        fn=_mark,
    )
    return ToolRegistry([*tools, tool])
