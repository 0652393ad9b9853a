"""The compaction machine's terms: its phases, the summary job, the events it hears, the
actions it calls for, its state, and the builder one step fills (``Work``).

``step`` (in ``_machine``) is the machine; these are what it is said in, shared with the
shells that feed it events and carry out its actions.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias

from ._accounting import Accounting
from ._forecast import Forecast
from ._round_index import RoundIndex
from ._snapshot import Plan, Snapshot, Stubs
from ._watermarks import PolicyDecision

__all__ = [
    "Action", "Answer", "Apply", "Boundary", "Decided", "Event", "Hold", "Job", "JobKind",
    "MachineState", "Manual", "Phase", "Skipped", "Step", "Stop", "Stub", "Summarize",
    "SummaryFailed", "SummaryReady", "Work",
]  # fmt: skip


class Phase(enum.Enum):
    """Where the machine is: nothing in flight, a summary being made, a plan with the sampler,
    or the open turn stopped (nothing more is decided for it)."""

    IDLE = "idle"
    SUMMARIZING = "summarizing"
    ADVISED = "advised"
    STOPPED = "stopped"


JobKind: TypeAlias = Literal["auto", "manual", "phase", "threshold", "hard", "refusal"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A summary to make: of ``snapshot``'s history through ``covers_through``. ``urgent``:
    a failure falls back to a digest at once; ``hold``: the next request waits for it."""

    id: int
    snapshot: Snapshot
    covers_through: int
    reason: str
    tokens: int | None
    estimated: bool
    urgent: bool
    hold: bool
    kind: JobKind = "auto"
    focus: str | None = None
    ask_id: int = 0
    started: float = 0.0
    #: make the summary from the original records since the last re-grounding
    reground: bool = False
    #: the figure it was decided at, as a fraction of usable
    fraction: float | None = None


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Boundary:
    """A batch that ends at a boundary is durable (``snapshot.cause`` says which)."""

    snapshot: Snapshot
    now: float = 0.0


@dataclass(frozen=True, slots=True)
class Manual:
    """The user asked for a compaction now (``stowage compact``), on the last boundary."""

    ask_id: int
    focus: str | None = None
    reground: bool = False
    now: float = 0.0
    #: why, when the runtime asked (the record's reason); None: the user asked
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryReady:
    """Job ``job_id``'s summary came back as ``plan``."""

    job_id: int
    plan: Plan
    now: float = 0.0


@dataclass(frozen=True, slots=True)
class SummaryFailed:
    """Job ``job_id`` made no summary (``vetoed``: a before-compaction hook refused it)."""

    job_id: int
    error: str
    vetoed: bool = False
    now: float = 0.0


Event: TypeAlias = Boundary | Manual | SummaryReady | SummaryFailed


# -- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stub:
    """Write these stubs (a ``microcompact`` record) at the next round boundary."""

    stubs: Stubs


@dataclass(frozen=True, slots=True)
class Apply:
    """Apply this plan (a ``compaction`` record) at the next round boundary."""

    plan: Plan


@dataclass(frozen=True, slots=True)
class Hold:
    """The next request waits for a later verdict (a summary is being made for it)."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the open turn: a real compaction loop, or nothing brings it under the limit."""

    kind: Literal["loop", "overflow"]
    message: str


@dataclass(frozen=True, slots=True)
class Summarize:
    """Make this summary (a model call, or the provider's compaction) and report back."""

    job: Job


@dataclass(frozen=True, slots=True)
class Decided:
    """A watermark was crossed (logged and published as ``CompactionDecided``)."""

    decision: PolicyDecision
    round: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """A compaction was considered and not made, and why (``CompactionSkipped``)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Answer:
    """This verdict answers the ask ``ask_id`` (a manual compaction)."""

    ask_id: int


Action: TypeAlias = Stub | Apply | Hold | Stop | Summarize | Decided | Skipped | Answer


# -- state -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineState:
    """One session's compaction state (``MachineState(accounting=...)`` to start)."""

    accounting: Accounting
    phase: Phase = Phase.IDLE
    #: the summary being made (``SUMMARIZING``), or the plan with the sampler (``ADVISED``)
    job: Job | None = None
    plan: Plan | None = None
    #: the newest boundary (what a summary that lands is checked against)
    latest: Snapshot | None = None
    #: outputs given to the sampler as stubs and not yet seen stubbed at a boundary: every
    #: view counts them as stubs (the sampler writes them before its next request)
    stubbing: frozenset[int] = frozenset()
    forecast: Forecast = field(default_factory=Forecast)
    #: microcompaction acts once per crossing of the soft mark (``micro_min_free``)
    armed: bool = True
    #: after a plan was skipped for freeing too little, none is asked for below the hard
    #: mark until the context grew past this many tokens
    hold_until: int | None = None
    seen_compaction: int = 0
    #: the last number given to a job or a plan
    serial: int = 0
    #: steps taken to bring a request under the limit since the last round committed under it
    strikes: int = 0
    #: the open turn (what ``fit``, ``ratio`` and a stop belong to)
    turn: int = 0
    #: tokens a request may carry after a refusal, and the chars per token it stated
    fit: int | None = None
    ratio: float | None = None
    #: where the tool rounds of ``latest``'s history are, extended boundary by boundary (a
    #: cache: what the machine decides never depends on whether it is warm)
    rounds: RoundIndex = field(default=RoundIndex(), compare=False, repr=False)

    def limit(self) -> int | None:
        """Tokens of history no request may reach: the hard mark, or a refusal's fit."""
        return self.accounting.limit(self.fit)


Step: TypeAlias = tuple[MachineState, tuple[Action, ...]]


@dataclass(eq=False, slots=True)
class Work:
    """What one step builds up: the state so far and the actions, in order."""

    state: MachineState
    actions: list[Action]

    def add(self, action: Action) -> None:
        self.actions.append(action)
        if isinstance(action, Stub):
            self.set(stubbing=self.state.stubbing | frozenset(action.stubs.seqs))

    def set(self, **changes: object) -> None:
        self.state = replace(self.state, **changes)  # type: ignore[arg-type]

    def done(self) -> Step:
        return self.state, tuple(self.actions)
