"""Typed messages between the actors of a session and the shared persistence actor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from stowage.core import FunctionCall, FunctionCallOutput, HistoryEntry, Record, Usage

from ._interrupt import TurnInterrupt
from ._mailbox import Reply, Slot

__all__ = [
    "Append",
    "CommittedSnapshot",
    "CompactNow",
    "ContinueTurn",
    "Decide",
    "Plan",
    "PlanFailed",
    "PlanOutcome",
    "PlanRequest",
    "Protect",
    "RunTools",
    "SamplerCommand",
    "TurnResult",
    "UserTurn",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """The sampler's watermark policy asks for a plan: why, on which figures, and whether it is
    blocked waiting for it (``urgent``: a failed summary must fall back at once)."""

    reason: str
    tokens: int | None
    estimated: bool
    urgent: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedSnapshot:
    """The history as of the last committed round: the compactor's only input. Sent by
    persistence once the round is durable (not the ``RoundCommitted`` event subscribers get).

    ``manual`` marks a snapshot the sampler re-sent because the user asked to compact now;
    it still describes the last committed round, never a half one.
    """

    session_id: str
    round: int
    history: tuple[HistoryEntry, ...]
    usage: Usage | None
    last_seq: int
    last_compaction_seq: int
    #: reported usage of the first round after the newest compaction (threshold mode's base)
    usage_after_compaction: int | None = None
    manual: bool = False
    focus: str | None = None
    #: the rendered protected state, shown to the summarizer (None when there is none)
    protected_text: str | None = None
    #: set when the sampler re-sent this snapshot because its watermark policy wants a plan
    request: PlanRequest | None = None
    #: seqs of the tool outputs the model sees as stubs (the summarizer sees them so too)
    stubbed: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class Append:
    """Write ``records`` to the session's log as one batch; ``reply`` once durable.

    ``committed``, when set, is put into ``notify`` after the write is durable.
    """

    session_id: str
    records: tuple[Record, ...]
    reply: Reply[None]
    committed: CommittedSnapshot | None = None
    notify: Slot[CommittedSnapshot] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTools:
    """Run the calls of one round; their function_call records are already durable."""

    round: int
    calls: tuple[FunctionCall, ...]
    reply: Reply[tuple[FunctionCallOutput, ...]]
    #: the turn's interrupt: calls still running when it is requested get interrupted outputs
    interrupt: TurnInterrupt | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A compaction the sampler may apply at a round boundary.

    Stale when ``based_on_compaction_seq`` is not the session's newest compaction any more.
    """

    round: int
    summary: str
    covers_through: int
    reason: str
    tokens_before: int | None
    estimated: bool
    based_on_compaction_seq: int
    kind: str = "full"
    #: protected-state ops the summarizer proposed; the sampler checks each before applying
    protected_ops: tuple[dict[str, Any], ...] = ()
    #: what was wrong with the summarizer's updates block (its ops were then dropped whole)
    protected_problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanFailed:
    """The compactor could not produce a plan for ``round`` (or a before-compaction hook
    refused a manual one: ``vetoed``, not a failure)."""

    round: int
    error: str
    vetoed: bool = False


PlanOutcome: TypeAlias = Plan | PlanFailed


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Protect:
    """The user changes protected state; serialized with turns, so never mid-round."""

    ops: tuple[dict[str, Any], ...]
    reply: Reply[None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Decide:
    """A person's answer for a call that awaits approval; once no call of the round awaits
    one, the round runs (denied calls get a "denied" output) and the turn goes on."""

    call_id: str
    approve: bool
    reason: str | None
    reply: Reply[TurnResult]


SamplerCommand: TypeAlias = UserTurn | ContinueTurn | CompactNow | Protect | Decide
