"""What the console shows, worked out from a session's records: pure functions, no I/O.

Every figure here is a fold over the log (the source of truth), so the console, ``stowage
show`` and the log agree by construction. Text stays text: templates escape it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from stowage.core import (
    CompactionRecord,
    CorruptLogError,
    ErrorRecord,
    MicrocompactRecord,
    MilestoneRecord,
    ProtectedRecord,
    ProtectedState,
    ProtectedStateViolation,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SessionState,
    effective_records,
)
from stowage.facade import SessionFigures, recorded_budget, session_figures, token_figures
from stowage.policy import CompactionCost, CostReport, PriceBook, session_cost

from ._cards import CompactionCard, CompactionTone, compaction_card, compaction_tone
from ._pages import PAGE_CARDS, PAGE_ROUNDS, Block, PageQuery, Slice, round_blocks, select
from ._timeline import TimelineEntry, cached_tokens, timeline_entries

__all__ = [
    "ChartPoint",
    "Milestone",
    "PendingCall",
    "ProtectedRow",
    "SessionRow",
    "SessionView",
    "paged",
    "session_row",
    "session_view",
]

_MARK_NAMES = ("soft_mark", "compact_mark", "hard_mark")
#: a view not paged yet shows nothing
_NO_PAGE = Slice(start=0, stop=0, newest=True, older=0)
_DEFAULT_MARKS = {"soft_mark": 0.70, "compact_mark": 0.85, "hard_mark": 0.95}


@dataclass(frozen=True, slots=True, kw_only=True)
class ChartPoint:
    """Tokens in use after one committed round (``estimated`` when no usage went into it)."""

    round: int
    seq: int
    tokens: int
    estimated: bool
    #: the usable budget then (None: the log cannot say)
    usable: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedRow:
    """A protected entry with the id it is kept under and who set it."""

    id: str
    kind: str
    text: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRow:
    """One line of the sessions page. Its figures (tokens, usable, percent, tool schemas) are
    ``stowage.facade.session_figures``'s, as those of ``stowage list``."""

    session_id: str
    state: str
    holder: str
    model: str
    turns: int
    rounds: int
    #: tokens of history in the next request; the tool schemas are outside usable and not in it
    tokens: int | None
    usable: int | None
    percent: float | None
    compactions: int
    microcompactions: int
    last_activity: str
    last_seq: int
    #: tokens of the tool schemas every request carries, outside ``usable`` (0 when unknown)
    tool_schemas: int = 0
    #: calls that wait for a person's approval, in call order
    pending: tuple[PendingCall, ...] = ()
    #: what the last error record said, when the session failed
    failure: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingCall:
    """A call that waits for approval, with what a person needs to decide and the commands
    that decide it."""

    call_id: str
    tool: str
    arguments: str
    approve: str
    deny: str
    #: what the call will do, as recorded when it was requested (the diff of an edit, the
    #: whole command line); None for a tool that shows nothing
    detail: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Milestone:
    """A phase that ended, after ``round`` committed rounds: the chart marks it."""

    round: int
    name: str
    seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionView:
    """Everything the session page shows."""

    row: SessionRow
    #: the entries of the page's rounds, oldest first
    timeline: tuple[TimelineEntry, ...]
    #: one point per committed round, the whole session
    chart: tuple[ChartPoint, ...]
    marks: dict[str, float]
    #: every compaction and microcompaction, oldest first
    cards: tuple[CompactionCard, ...]
    protected: tuple[ProtectedRow, ...]
    cached_input: int | None
    errors: tuple[str, ...] = field(default=())
    tone: CompactionTone = field(default_factory=lambda: CompactionTone(tone="none", note=""))
    milestones: tuple[Milestone, ...] = ()
    #: what a failed turn's error records said, by seq: what may follow a round over the mark
    stops: tuple[tuple[int, str], ...] = ()
    #: the session's rounds, oldest first, and which of them the page shows
    blocks: tuple[Block, ...] = ()
    page: Slice = _NO_PAGE
    #: which of ``cards`` the page shows
    card_page: Slice = _NO_PAGE
    #: the records the view was made from (those a rewind discarded left out), for ``paged``
    records: tuple[Record, ...] = field(default=(), repr=False)
    stubbed: frozenset[int] = field(default=frozenset(), repr=False)
    unfolded: frozenset[int] = field(default=frozenset(), repr=False)
    #: what the session cost (None: the console was given no prices)
    cost: CostReport | None = None

    def cost_of(self, seq: int) -> CompactionCost | None:
        """What the compaction at ``seq`` cost and saved (None: no prices, or a
        microcompaction, which calls no model)."""
        if self.cost is None:
            return None
        return next((c for c in self.cost.compactions if c.seq == seq), None)

    def rounds(self) -> list[tuple[Block, list[TimelineEntry]]]:
        """The page's rounds newest first, each with its entries in the order they happened."""
        shown = self.blocks[self.page.start : self.page.stop]
        grouped: list[tuple[Block, list[TimelineEntry]]] = [(block, []) for block in shown]
        index = 0
        for entry in self.timeline:
            while index < len(grouped) - 1 and entry.seq > grouped[index][0].last:
                index += 1
            grouped[index][1].append(entry)
        return grouped[::-1]

    def shown_cards(self) -> list[CompactionCard]:
        """The page's compaction cards, newest first."""
        return list(self.cards[self.card_page.start : self.card_page.stop])[::-1]

    @property
    def older_rounds(self) -> int | None:
        """The seq to ask ``before=`` for the page of rounds older than this one (None: this
        page holds the first round)."""
        return self.blocks[self.page.start].first if self.page.older else None

    @property
    def older_cards(self) -> int | None:
        """The seq to ask ``cards_before=`` for older compaction cards (None: none older)."""
        return self.cards[self.card_page.start].seq if self.card_page.older else None


def _marks(meta: SessionRecord | None) -> dict[str, float]:
    settings = meta.settings if meta else {}
    marks = dict(_DEFAULT_MARKS)
    for name in _MARK_NAMES:
        value = settings.get(name)
        if isinstance(value, int | float):
            marks[name] = float(value)
    return marks


def _state(records: Sequence[Record], folded: SessionState, holder: str) -> str:
    last = records[-1] if records else None
    if isinstance(last, ErrorRecord):
        return "failed"
    if folded.awaiting_approval:
        # before "leased": a chat waiting for y/n holds the lease, and a person is what it needs
        return "approval"
    if holder:
        return "leased"
    return "open" if folded.turn_open else "idle"


_ARGUMENTS_SHOWN = 160


def _pending(session_id: str, folded: SessionState) -> tuple[PendingCall, ...]:
    def short(text: str) -> str:
        return text if len(text) <= _ARGUMENTS_SHOWN else text[: _ARGUMENTS_SHOWN - 1] + "\u2026"

    return tuple(
        PendingCall(
            call_id=call.call_id,
            tool=call.name,
            arguments=short(call.arguments),
            approve=f"stowage approve {session_id} {call.call_id}",
            deny=f"stowage deny {session_id} {call.call_id}",
            detail=folded.approval_details.get(call.call_id),
        )
        for call in folded.awaiting_approval
    )


def _figures(records: Sequence[Record], folded: SessionState) -> SessionFigures:
    """How full the next request is; without a usable budget or tool schemas when the log
    cannot say them (one another version wrote, or with no session record first)."""
    try:
        recorded = recorded_budget(records, has_stubs=bool(folded.stubbed))
    except Exception:
        recorded = None
    return session_figures(folded, recorded)


@dataclass(eq=False)
class _Fold:
    """A log folded a record at a time: a record that cannot apply is reported, not fatal (the
    console shows a damaged log rather than failing the page)."""

    state: SessionState
    #: what each record that did not apply raised, in log order
    problems: list[str] = field(default_factory=list)
    #: the seqs of those records
    unfolded: set[int] = field(default_factory=set)

    def applied(self, records: Iterable[Record]) -> Iterator[Record]:
        """Each record of ``records`` that applies, once ``state`` holds it."""
        for record in records:
            try:
                self.state.apply(record)
            except CorruptLogError as exc:
                self.problems.append(f"#{record.seq}: {exc}")
                self.unfolded.add(record.seq)
                continue
            yield record


def _fold(session_id: str, records: Sequence[Record]) -> _Fold:
    """The state after every record of ``records`` that applies."""
    fold = _Fold(SessionState(session_id=session_id))
    for _ in fold.applied(records):
        pass
    return fold


def session_row(session_id: str, records: Sequence[Record], *, holder: str = "") -> SessionRow:
    """The sessions-page line of one log. Raises nothing."""
    records = effective_records(records)  # a rewind's discarded branch is not the session's
    return _row(session_id, records, _fold(session_id, records).state, holder)


def _row(
    session_id: str, records: Sequence[Record], folded: SessionState, holder: str
) -> SessionRow:
    figures = _figures(records, folded)
    last = records[-1] if records else None
    return SessionRow(
        session_id=session_id,
        state=_state(records, folded, holder),
        holder=holder,
        model=folded.meta.model if folded.meta else "?",
        turns=folded.turn,
        rounds=folded.round,
        tokens=figures.tokens,
        usable=figures.usable,
        percent=figures.percent_of_usable,
        compactions=folded.compactions,
        microcompactions=folded.microcompactions,
        last_activity=records[-1].ts if records else "",
        last_seq=records[-1].seq if records else 0,
        tool_schemas=figures.tool_schemas,
        pending=_pending(session_id, folded),
        failure=last.message if isinstance(last, ErrorRecord) else "",
    )


def _protected_rows(records: Sequence[Record], final: ProtectedState) -> tuple[ProtectedRow, ...]:
    """Who set each entry: the source of the record that first brought its id in."""
    setter: dict[str, str] = {}
    state = ProtectedState()
    for record in records:
        if isinstance(record, ProtectedRecord):
            for op in record.ops:
                try:
                    state = state.apply(op)
                except ProtectedStateViolation:
                    continue
                for entry in state.entries:
                    setter.setdefault(entry.id, record.source)
        elif isinstance(record, CompactionRecord) and record.protected is not None:
            try:
                state = ProtectedState.from_snapshot(record.protected)
            except Exception:  # an unreadable snapshot: keep what was known
                continue
            for entry in state.entries:
                setter.setdefault(entry.id, f"summarizer (compaction #{record.seq})")
    return tuple(
        ProtectedRow(
            id=entry.id, kind=entry.kind, text=entry.line, source=setter.get(entry.id, "?")
        )
        for entry in final.entries
    )


def session_view(
    session_id: str,
    records: Sequence[Record],
    *,
    holder: str = "",
    query: PageQuery | None = None,
    prices: PriceBook | None = None,
    own_from: int = 1,
) -> SessionView:
    """The session page of one log: the chart and tiles of the whole session, the page of
    rounds and compaction cards ``query`` asks for (every one of them without a query), and
    its cost at ``prices`` when given (of the records from ``own_from`` on: a fork's parents
    paid for theirs). Raises nothing: records that do not fold are listed in ``errors``."""
    # a discarded branch's requests were paid for too: the cost reads every record
    cost = session_cost(records, prices, own_from=own_from) if prices is not None else None
    records = effective_records(records)  # a rewind's discarded branch is not the session's
    stubbed: set[int] = set()
    for record in records:
        if isinstance(record, MicrocompactRecord):
            stubbed.update(record.stubbed)
    fold = _Fold(SessionState(session_id=session_id))
    folded, problems = fold.state, fold.problems
    chart: list[ChartPoint] = []
    cards: list[CompactionCard] = []
    counts = {True: 0, False: 0}  # microcompactions and compactions so far
    milestones: list[Milestone] = []
    stops: list[tuple[int, str]] = []
    cached_total: int | None = None
    in_use_at = token_figures(session_id, records)
    for record in fold.applied(records):
        match record:
            case RoundCommittedRecord(round=round_):
                after = in_use_at.get(record.seq)
                if after is not None:
                    chart.append(
                        ChartPoint(
                            round=round_,
                            seq=record.seq,
                            tokens=after.tokens,
                            estimated=after.estimated,
                            usable=after.usable,
                        )
                    )
                cached = cached_tokens(record)
                if cached is not None:
                    cached_total = (cached_total or 0) + cached
            case CompactionRecord() | MicrocompactRecord():
                micro = isinstance(record, MicrocompactRecord)
                counts[micro] += 1
                card = compaction_card(
                    record,
                    number=counts[micro],
                    round_=folded.round,
                    turn=folded.turn,
                    in_use=in_use_at.get(record.seq),
                )
                cards.append(card)
            case MilestoneRecord(name=name):
                milestones.append(Milestone(round=folded.round, name=name, seq=record.seq))
            case ErrorRecord(message=message):
                stops.append((record.seq, message))
    try:
        protected = _protected_rows(records, folded.protected)
    except CorruptLogError as exc:
        problems.append(str(exc))
        protected = ()
    marks = _marks(folded.meta)
    whole = SessionView(
        row=_row(session_id, records, folded, holder),
        timeline=(),
        chart=tuple(chart),
        marks=marks,
        cards=tuple(cards),
        protected=protected,
        cached_input=cached_total,
        errors=tuple(problems),
        tone=compaction_tone(cards, marks),
        milestones=tuple(milestones),
        stops=tuple(stops),
        blocks=round_blocks(records),
        records=tuple(records),
        stubbed=frozenset(stubbed),
        unfolded=frozenset(fold.unfolded),
        cost=cost,
    )
    return paged(whole, query)


def paged(view: SessionView, query: PageQuery | None) -> SessionView:
    """``view`` showing the page ``query`` asks for (every round and card when None): only
    that page's timeline is built, so turning the pages of a long session is cheap once its
    view is made. Raises nothing."""
    if query is None:
        page = Slice(start=0, stop=len(view.blocks), newest=True, older=0)
        card_page = Slice(start=0, stop=len(view.cards), newest=True, older=0)
    else:
        # the records after the newest commit come with the newest page's rounds
        tail = 1 if view.blocks and view.blocks[-1].round is None else 0
        page = select(
            [b.first for b in view.blocks],
            before=query.before,
            since=query.since,
            size=PAGE_ROUNDS + (tail if query.before is None else 0),
        )
        card_page = select(
            [c.seq for c in view.cards],
            before=query.cards_before,
            since=query.cards_since,
            size=PAGE_CARDS,
        )
    shown = view.blocks[page.start : page.stop]
    timeline = (
        timeline_entries(
            view.records,
            first=shown[0].first,
            last=shown[-1].last,
            cards={c.seq: c for c in view.cards},
            stubbed=view.stubbed,
            unfolded=view.unfolded,
        )
        if shown
        else ()
    )
    return dataclasses.replace(view, timeline=timeline, page=page, card_page=card_page)
