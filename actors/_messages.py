"""Typed messages between the actors of a session and the shared persistence actor."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeAlias

from stowage.core import (
    Cycle,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    OutputBudget,
    Record,
    Usage,
)
from stowage.policy import TokenStatus

from ._interrupt import TurnInterrupt
from ._mailbox import Reply

__all__ = [
    "Advice",
    "Append",
    "Ask",
    "CommittedSnapshot",
    "CompactNow",
    "ContinueTurn",
    "Decide",
    "Milestone",
    "Plan",
    "PlanFailed",
    "PlanOutcome",
    "Protect",
    "RunTools",
    "SamplerCommand",
    "SnapshotCause",
    "SnapshotSink",
    "Stubs",
    "TurnResult",
    "UserTurn",
]


SnapshotCause: TypeAlias = Literal[
    "round", "turn", "applied", "approval", "recovered", "seed", "milestone"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedSnapshot:
    """The session as of a durable boundary: the compactor's only input, put in its slot by
    persistence once the batch that ends there is durable (not the ``RoundCommitted`` event
    subscribers get). A boundary is a committed round, a new turn's input, an applied plan, a
    round stopped for approval or closed on recovery: never half a tool step.

    ``status`` is the token figure of the next request built from it (None in threshold mode
    or without a budget: the seed's rule reads ``usage``); ``open_calls`` are calls with no
    output yet (waiting for approval), which no compaction may cover.
    """

    session_id: str
    cause: SnapshotCause
    round: int
    turn: int
    turn_open: bool
    history: tuple[HistoryEntry, ...]
    usage: Usage | None
    last_seq: int
    last_compaction_seq: int
    #: reported usage of the first round after the newest compaction (threshold mode's base)
    usage_after_compaction: int | None = None
    #: the rendered protected state, shown to the summarizer (None when there is none)
    protected_text: str | None = None
    #: seqs of the tool outputs the model sees as stubs (the summarizer sees them so too)
    stubbed: frozenset[int] = frozenset()
    open_calls: frozenset[str] = frozenset()
    status: TokenStatus | None = None
    #: the open turn's compaction cycles when they make a loop (``TurnLedger.looping``)
    looping: tuple[Cycle, ...] | None = None
    #: compactions of the open turn so far
    turn_compactions: int = 0
    #: ``covers_through`` of the newest re-grounded compaction, and full compactions since
    reground_base: int = 0
    fulls_since_reground: int = 0
    #: the phase that just ended, when ``cause`` is "milestone" ("NAME: note")
    milestone: str | None = None
    #: turns finished since the newest compaction (``compact_every_turns``)
    turns_since_compaction: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Ask:
    """The sampler asks the compactor to decide now on the last committed snapshot: a manual
    compaction (``focus`` for its summary), or a request the provider refused as too long
    (``fit``: tokens it may carry; ``level``: how far to go, 1 to 4). Answered by the
    ``Advice`` whose ``answers`` is ``ask_id``."""

    ask_id: int
    kind: Literal["manual", "overflow"]
    focus: str | None = None
    fit: int | None = None
    level: int = 1
    #: chars per token the provider's own count gave (overflow), used in place of the
    #: session's calibrated ratio
    chars_per_token: float | None = None
    #: a manual compaction whose summary is made from the original records (re-grounded)
    reground: bool = False


class SnapshotSink(Protocol):
    """Where persistence puts a committed snapshot once its batch is durable."""

    def put(self, snapshot: CommittedSnapshot, /) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Append:
    """Write ``records`` to the session's log as one batch; ``reply`` once durable.

    ``committed``, when set, is put into ``notify`` after the write is durable.
    """

    session_id: str
    records: tuple[Record, ...]
    reply: Reply[None]
    committed: CommittedSnapshot | None = None
    notify: SnapshotSink | None = None


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
    #: the current turn's tool steps (seqs) kept verbatim although covered
    reattach: tuple[int, ...] = ()
    #: the figure it was planned at as a fraction of usable (for ``CompactionLanded``)
    fraction: float | None = None
    #: its summary was made from the original records since the last re-grounding
    regrounded: bool = False
    #: what the summary was told to cover in full detail (``--focus``, a hook's text)
    focus: str | None = None
    #: a provider-native compaction's item (``summary`` is then its readable line)
    provider_item: dict[str, Any] | None = field(default=None, hash=False)
    #: (kind, message) notes written as error records with the compaction (said once)
    notices: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanFailed:
    """The compactor could not produce a plan for ``round`` (or a before-compaction hook
    refused a manual one: ``vetoed``, not a failure)."""

    round: int
    error: str
    vetoed: bool = False


PlanOutcome: TypeAlias = Plan | PlanFailed


@dataclass(frozen=True, slots=True, kw_only=True)
class Stubs:
    """Tool outputs at ``seqs`` to show as stubs from now on (a microcompaction, or outputs
    above the cap shown as head and tail), with the figures for its record."""

    seqs: tuple[int, ...]
    reason: str
    tokens_before: int | None
    tokens_after: int | None
    estimated: bool
    #: "micro": old outputs past the soft mark; "cap": new outputs above the cap
    kind: Literal["micro", "cap"] = "micro"


@dataclass(frozen=True, slots=True, kw_only=True)
class Advice:
    """The compactor's verdict on the snapshot at ``basis_seq``, for the sampler to apply at
    its next round boundary: stubs to write, a plan to apply, whether the next request must
    wait for a later verdict (``block``: at the hard mark with a plan in flight), and a reason
    to stop the turn (``stop``: a real loop, or a turn that cannot fit). One coalescing slot
    carries it: an unread advice is merged into the next one (``merged_with``), never lost."""

    basis_seq: int
    stubs: tuple[Stubs, ...] = ()
    outcome: PlanOutcome | None = None
    block: bool = False
    stop: str | None = None
    stop_kind: Literal["loop", "overflow"] = "loop"
    #: the ``Ask.ask_id`` this answers (0: none)
    answers: int = 0

    def merged_with(self, older: Advice | None) -> Advice:
        """This advice with what an unread ``older`` one still carries: its stubs, its plan
        when this one has none, its stop, the newest ask answered."""
        if older is None:
            return self
        return replace(
            self,
            stubs=(*older.stubs, *self.stubs),
            outcome=self.outcome if self.outcome is not None else older.outcome,
            stop=self.stop or older.stop,
            stop_kind=self.stop_kind if self.stop else older.stop_kind,
            answers=max(self.answers, older.answers),
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
    """A person's answer for a call that awaits approval; once no call of the round awaits
    one, the round runs (denied calls get a "denied" output) and the turn goes on."""

    call_id: str
    approve: bool
    reason: str | None
    reply: Reply[TurnResult]


SamplerCommand: TypeAlias = UserTurn | ContinueTurn | CompactNow | Protect | Decide | Milestone
