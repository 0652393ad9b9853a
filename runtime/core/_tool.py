"""The tool boundary: what the tool executor runs, and what a running call may know about
where it runs (its ``ToolContext``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from ._errors import ConfigError, StowageError
from ._gateway import ToolSpec

__all__ = [
    "ApprovalError", "Effect", "EffectKind", "OutputBudget", "Tool", "ToolCancelled", "ToolContext",
    "current_tool_context",
]  # fmt: skip


class ApprovalError(ConfigError):
    """Raised when an approval names no call that awaits one, or a new turn is sent while
    calls await approval."""


class ToolCancelled(StowageError):
    """Raised by ``ToolContext.check`` once the call was cancelled (timeout or interrupt)."""


#: what a call does: reads, lists or searches a path, writes or edits one, runs a command
EffectKind: TypeAlias = Literal["read", "list", "search", "write", "edit", "run"]


@dataclass(frozen=True, slots=True)
class Effect:
    """What one tool call touches: ``target`` is a workspace-relative path, or the command
    line for ``run``. A tool says it (``effects(arguments)``): the approval policy reads it,
    and so does the trail of files touched."""

    kind: EffectKind
    target: str

    @property
    def acts(self) -> bool:
        """Whether it changes something (a write, an edit, a command)."""
        return self.kind in ("write", "edit", "run")


@dataclass(frozen=True, slots=True)
class OutputBudget:
    """How much of one tool output the session's window can take, in characters.

    An output up to ``whole`` is shown whole. Of a longer one, a tool that can page
    (``read_file``, ``recall_artifact``) returns a part of at most ``page`` and says where to
    go on: a part small enough that a compaction in the middle of the turn keeps it, so the
    model is never left to read again what it was just shown. ``part`` says which applies.
    """

    whole: int
    page: int

    def part(self, remaining: int) -> int:
        """The most characters to return of an output with ``remaining`` characters left:
        all of them up to ``whole``, else a page."""
        return remaining if remaining <= self.whole else self.page


@dataclass(eq=False, kw_only=True)
class ToolContext:
    """Where one tool call runs: its session, round and call id, and whether it was cancelled.

    An async tool is cancelled the usual way; a sync tool runs in a worker thread that cannot
    be stopped from outside, so it should look at ``cancelled`` (or call ``check``) between
    steps of long work and give up once it is set.
    """

    session_id: str
    round: int
    call_id: str
    name: str
    #: how much output the session's window can take (``OutputBudget``); None when the
    #: window is not known (nothing is limited then)
    output: OutputBudget | None = None
    #: makes a piece of what the call printed durable as it comes (a command's output):
    #: what a resume shows of a call its process was killed in; None where nothing keeps it
    progress: Callable[[str], Awaitable[None]] | None = None
    # a flag, not a ``threading.Event``: nothing waits on it, and one attribute store is seen
    # by every thread (an Event's condition and lock cost more than the tool call's bookkeeping)
    _cancelled: bool = field(default=False, repr=False)

    @property
    def cancelled(self) -> bool:
        """Whether the call was cancelled: timed out, interrupted, or its session stopped."""
        return self._cancelled

    def check(self) -> None:
        """Raises ``ToolCancelled`` if the call was cancelled; safe from any thread."""
        if self._cancelled:
            raise ToolCancelled(f"tool call {self.call_id} ({self.name}) was cancelled")

    def cancel(self) -> None:
        """Mark the call cancelled (the executor does this; idempotent, thread-safe)."""
        self._cancelled = True


#: the context of the tool call running in this task, set by the executor
current_tool_context: ContextVar[ToolContext | None] = ContextVar(
    "stowage_tool_context", default=None
)


@runtime_checkable
class Tool(Protocol):
    """A callable tool. ``run`` gets arguments already validated against ``spec.parameters``
    (by ``validate``) and returns the text the model will read. It may raise anything: the
    executor turns every exception into an error output, never a crash. While it runs,
    ``current_tool_context`` holds its ``ToolContext``."""

    @property
    def spec(self) -> ToolSpec:
        """Name, description and argument schema, as the model sees them."""
        ...

    @property
    def timeout(self) -> float | None:
        """Seconds this tool may take; ``None`` uses the executor's default."""
        ...

    def validate(self, arguments: Any) -> Any:
        """Check decoded JSON arguments; raise ``ValueError`` with a readable message if bad."""
        ...

    async def run(self, arguments: Any) -> str:
        """Do the work."""
        ...
