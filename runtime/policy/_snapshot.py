"""The values the compaction machine reads and writes: a session at a durable boundary, and
what it proposes to change (stubs, a plan).

They are plain frozen values so that the machine (``_machine``) and the ruler (``_ruler``)
stay pure: the actors build a ``Snapshot`` once a batch is durable, hand it to the machine,
and apply the ``Stubs`` and ``Plan`` it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from stowage.core import Cycle, HistoryEntry, MilestoneRecord, SessionState, SummaryCheck, Usage
from stowage.core import render as render_protected

from ._accounting import Accounting
from ._tokens import TokenStatus

__all__ = ["BoundaryCause", "Plan", "Refusal", "Snapshot", "Stubs", "snapshot_of"]

BoundaryCause: TypeAlias = Literal[
    "round",  # a committed round
    "turn",  # a new turn's input, or a turn closed without an answer
    "applied",  # stubs, a compaction or protected state written
    "approval",  # a round stopped for approval, or an answer logged
    "recovered",  # a round the log left open closed on resume
    "seed",  # the state a session's actors start from
    "milestone",  # a phase of the work ended
    "refused",  # the provider refused a request as too long
    "dropped",  # the sampler did not apply a plan (stale, invalid, no smaller, protected)
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A request the provider refused as too long: ``fit`` is what a request may carry from
    now on (its stated window less the output asked for, with a margin), ``ratio`` the chars
    per token its own count gave, ``window`` the window it stated, ``tokens`` what it counted
    of the refused request's history (its word outranks any estimate of that request)."""

    fit: int | None
    ratio: float | None = None
    window: int | None = None
    tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The session as of a durable boundary: the compaction machine's only view of it, made
    once the batch that ends there is durable. A boundary is never half a tool step.

    ``status`` is the token figure of the next request built from it; ``open_calls`` are calls
    with no output yet (waiting for approval), which no compaction may cover.
    """

    session_id: str
    cause: BoundaryCause
    round: int
    turn: int
    turn_open: bool
    history: tuple[HistoryEntry, ...]
    usage: Usage | None
    last_seq: int
    last_compaction_seq: int
    status: TokenStatus
    #: reported usage of the first round after the newest compaction (threshold mode's base)
    usage_after_compaction: int | None = None
    #: the rendered protected state, shown to the summarizer (None when there is none)
    protected_text: str | None = None
    #: seqs of the tool outputs the model sees as stubs (the summarizer sees them so too)
    stubbed: frozenset[int] = frozenset()
    open_calls: frozenset[str] = frozenset()
    #: the open turn's compaction cycles when they make a loop (``TurnLedger.looping``)
    looping: tuple[Cycle, ...] | None = None
    #: compactions of the open turn so far (summaries, digests, refusals' included)
    turn_compactions: int = 0
    #: ``covers_through`` of the newest re-grounded compaction, and full compactions since
    reground_base: int = 0
    fulls_since_reground: int = 0
    #: the phase that just ended, when ``cause`` is "milestone" ("NAME: note")
    milestone: str | None = None
    #: turns finished since the newest compaction (``compact_every_turns``)
    turns_since_compaction: int = 0
    #: the probes the newest compaction checked, which the next summary must keep too
    probes: tuple[str, ...] = ()
    #: the refusal, when ``cause`` is "refused"
    refusal: Refusal | None = None
    #: the plan the sampler did not apply, when ``cause`` is "dropped", and why
    dropped: int = 0
    dropped_why: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A compaction the sampler may apply at a round boundary (``id``: the machine's number
    for it). Stale when ``based_on_compaction_seq`` is not the newest compaction any more."""

    round: int
    summary: str
    covers_through: int
    reason: str
    tokens_before: int | None
    estimated: bool
    based_on_compaction_seq: int
    id: int = 0
    kind: str = "full"
    #: protected-state ops the summarizer proposed; the sampler checks each before applying
    protected_ops: tuple[dict[str, Any], ...] = ()
    #: what was wrong with the summarizer's updates block (its ops were then dropped whole)
    protected_problems: tuple[str, ...] = ()
    #: the current turn's tool steps (seqs) kept verbatim although covered
    reattach: tuple[int, ...] = ()
    #: the figure it was decided at as a fraction of usable
    fraction: float | None = None
    #: its summary was made from the original records since the last re-grounding
    regrounded: bool = False
    #: what the summary was told to cover in full detail (``--focus``, a hook's text)
    focus: str | None = None
    #: a provider-native compaction's item (``summary`` is then its readable line)
    provider_item: dict[str, Any] | None = field(default=None, hash=False)
    #: (kind, message) notes written as error records with the compaction (said once)
    notices: tuple[tuple[str, str], ...] = ()
    #: what the summary request(s) reported (None: no model call, or none reported)
    usage: Usage | None = None
    #: how the summary fared against its probes (None: not checked)
    check: SummaryCheck | None = None


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


def snapshot_of(
    state: SessionState,
    accounting: Accounting,
    cause: BoundaryCause,
    *,
    protected_text: str | None = None,
    refusal: Refusal | None = None,
    dropped: tuple[int, str] | None = None,
) -> Snapshot:
    """``state`` at a boundary, as the machine reads it (``protected_text``: the rendered
    protected state, when the caller keeps it; else it is rendered here). Raises
    ``CorruptLogError`` as ``SessionState.protected`` does."""
    if protected_text is None:
        protected_text = render_protected(state.protected) or None
    ledger = state.ledger
    repeats = accounting.settings.compaction_loop_repeats
    return Snapshot(
        session_id=state.session_id,
        cause=cause,
        round=state.round,
        turn=state.turn,
        turn_open=state.turn_open,
        history=tuple(state.history),
        usage=state.round_usage,
        last_seq=state.last_seq,
        last_compaction_seq=state.last_compaction_seq,
        usage_after_compaction=state.usage_after_compaction,
        protected_text=protected_text,
        stubbed=frozenset(state.stubbed),
        open_calls=frozenset(state.open_calls),
        status=accounting.status(state, protected_text),
        looping=ledger.looping(repeats) if ledger else None,
        turn_compactions=ledger.compactions if ledger else 0,
        reground_base=state.reground_base,
        fulls_since_reground=state.fulls_since_reground,
        milestone=_phase(state.last_milestone) if cause == "milestone" else None,
        turns_since_compaction=state.turns_since_compaction,
        probes=state.probes,
        refusal=refusal,
        dropped=dropped[0] if dropped else 0,
        dropped_why=dropped[1] if dropped else None,
    )


def _phase(milestone: MilestoneRecord | None) -> str | None:
    """The phase a milestone ended, as the summary is told it."""
    if milestone is None:
        return None
    return f"{milestone.name}: {milestone.note}" if milestone.note else milestone.name
