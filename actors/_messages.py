"""Typed messages between the actors of a session and the shared persistence actor."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, TypeAlias

from stowage.core import FunctionCall, FunctionCallOutput, OutputBudget, Record
from stowage.policy import Plan, Snapshot, Stop, Stubs

from ._interrupt import TurnInterrupt
from ._mailbox import Reply

__all__ = [
    "Append", "BoundarySink", "CompactNow", "ContinueTurn", "Decide", "Milestone", "Protect",
    "RunTools", "SamplerCommand", "TurnResult", "UserTurn", "Verdict",
]  # fmt: skip


class BoundarySink(Protocol):
    """Where persistence hands a boundary once its batch is durable (the compactor's inbox)."""

    def put(self, snapshot: Snapshot, /) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Append:
    """Write ``records`` to the session's log as one batch; ``reply`` once durable, then
    ``boundary`` (when set) into ``notify``: the one message the compactor hears from
    persistence."""

    session_id: str
    records: tuple[Record, ...]
    reply: Reply[None]
    boundary: Snapshot | None = None
    notify: BoundarySink | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTools:
    """Run the calls of one round; their function_call records are already durable."""

    round: int
    calls: tuple[FunctionCall, ...]
    reply: Reply[tuple[FunctionCallOutput, ...]]
    #: the turn's interrupt: calls still running when it is requested get interrupted outputs
    interrupt: TurnInterrupt | None = None
    #: each call's ``ToolContext.output``
    output: OutputBudget | None = None
    #: makes a piece of a call's output durable as it comes: ``progress(call_id, text)``
    progress: Callable[[str, str], Awaitable[None]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What the compaction machine said after an event, for the sampler to apply at its next
    round boundary; an unread verdict is merged into the next one (``merged_with``), never lost."""

    basis_seq: int
    stubs: tuple[Stubs, ...] = ()
    plan: Plan | None = None
    hold: bool = False
    stop: Stop | None = None
    #: the newest manual ask this verdict answers (0: none)
    answers: int = 0
    #: why compactions were considered and not made (what ``compact`` tells its asker)
    skipped: tuple[str, ...] = ()

    def merged_with(self, older: Verdict | None) -> Verdict:
        """This verdict with what an unread ``older`` one still carries: its stubs, its plan
        when this one has none, its stop; the newest word on holding."""
        if older is None:
            return self
        return replace(
            self,
            basis_seq=max(self.basis_seq, older.basis_seq),
            stubs=(*older.stubs, *self.stubs),
            plan=self.plan if self.plan is not None else older.plan,
            stop=self.stop or older.stop,
            answers=max(self.answers, older.answers),
            skipped=(*older.skipped, *self.skipped),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult:
    """What a turn produced: the final text, how many rounds it took, and why it stopped."""

    text: str
    rounds: int
    stopped: str = "answered"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserTurn:
    """User input: run a turn. ``message_id`` (the sender's, from an inbox) is logged with it."""

    text: str
    pinned: bool
    reply: Reply[TurnResult]
    message_id: str | None = None
    #: lets the asker stop the turn while it runs (``stopped="interrupted"``)
    interrupt: TurnInterrupt | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinueTurn:
    """Run the rounds of the turn the log left open (its user input is logged, its answer is
    not: the process that ran it stopped), without logging the input again."""

    reply: Reply[TurnResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactNow:
    """Compact at once, on the last committed snapshot, with optional focus for the summary."""

    focus: str | None
    reply: Reply[bool]
    #: make the summary from the original records (``Session.compact(reground=True)``)
    reground: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Milestone:
    """A phase of the work ended: record it (the compactor may compact at it)."""

    name: str
    note: str | None
    reply: Reply[None]
    source: Literal["user", "model"] = "user"


@dataclass(frozen=True, slots=True, kw_only=True)
class Protect:
    """The user changes protected state; serialized with turns, so never mid-round."""

    ops: tuple[dict[str, Any], ...]
    reply: Reply[None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Decide:
    """A person's answer for a call that awaits approval; the round runs once no call of it
    awaits one."""

    call_id: str
    approve: bool
    reason: str | None
    reply: Reply[TurnResult]


SamplerCommand: TypeAlias = UserTurn | ContinueTurn | CompactNow | Protect | Decide | Milestone
