"""What a session cost, pure: money, the prompt cache's share, and what each compaction cost
and saved, folded from its log.

Every request the log records usage for is priced by a ``PriceBook``: each round's request
(``RoundCommittedRecord``) with the session's model at that point, each compaction's summary
request (``CompactionRecord.usage``) with the summary model (``compact_model``, else the
model). A round whose usage was set aside as implausible is priced by what the provider
reported all the same (it bills what it counted). The money is unknown, never guessed, when
one priced request is. What the log does not hold is not counted: a summary request that
failed, or whose plan was not applied, and rounds without any usage (counted apart).

What a compaction saved
-----------------------

A compaction took ``removed = tokens_before - tokens_after`` tokens out of every request
after it; its effect lasts until the next compaction. For each round ``k`` after it (reported
input ``I_k``, cached ``c_k``), the request without it would have carried ``I'_k = I_k +
removed`` tokens. The cache: the removed tokens sat at the front of the history, inside the
prefix the provider caches, so they would have been served from the cache wherever the cache
was warm. The round's own request says whether it was (``c_k > 0``); for the first round
after the compaction, whose prefix the summary broke, the round before the compaction says
(``c_0 > 0``), and without the compaction that request would have found the whole previous
request (``I_0``) cached::

    c'_k = min(I'_k, c_k + removed)                     for k > 1, if c_k > 0
    c'_1 = min(I'_1, max(c_1 + removed, I_0))           if c_0 > 0
    c'_k = c_k                                          where the cache was cold

Cache writes and output are taken as they were. Then::

    saved     = sum_k price(I'_k, c'_k) - price(I_k, c_k)
    net saved = saved - price(summary request)

``uncached_saved`` is the same sum over uncached tokens (``I - c``): what the prefix break of
the summary took back shows there as a negative share of the first round. ``tokens_before``
and ``tokens_after`` are the runtime's own figures (reported usage plus estimates), so the
savings are as exact as they are; a compaction without them, or with an unpriced round after
it, saved "unknown".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from stowage.core import (
    CompactionRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SettingsChangedRecord,
    Usage,
)

from ._prices import Charge, PriceBook

__all__ = [
    "CompactionCost", "CostReport", "RequestCost", "ResumeHit", "billed_usage", "money",
    "session_cost",
]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCost:
    """One request the log holds usage for: a round's (``purpose`` "round") or a
    compaction's summary ("summary"); ``usd`` None: unknown, ``source`` says why."""

    seq: int
    round: int
    ts: str
    purpose: Literal["round", "summary"]
    model: str
    usage: Usage
    usd: Decimal | None
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionCost:
    """What one compaction cost (its summary request; 0 for a digest, which calls no model)
    and saved over the ``rounds_after`` it, until the next (see the module's formula)."""

    seq: int
    round: int
    kind: str
    #: its summary request's price (None: unknown, or its usage is not in the log)
    usd: Decimal | None
    #: tokens it took out of every later request (None: its record has no figures)
    removed_tokens: int | None
    rounds_after: int
    input_saved: int | None
    uncached_saved: int | None
    usd_saved: Decimal | None

    @property
    def net_usd(self) -> Decimal | None:
        """Saved minus what it cost (negative: it cost more than it saved)."""
        if self.usd_saved is None or self.usd is None:
            return None
        return self.usd_saved - self.usd


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeHit:
    """The first request after the session was opened from its log: how much of its input
    the provider's cache served (``share`` None: no usage reported)."""

    seq: int
    round: int
    ts: str
    input_tokens: int | None
    cached_tokens: int | None

    @property
    def share(self) -> float | None:
        if self.input_tokens is None or self.cached_tokens is None:
            return None
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CostReport:
    """A session's cost: every priced request, the totals, each compaction, each resume."""

    requests: tuple[RequestCost, ...]
    compactions: tuple[CompactionCost, ...]
    resumes: tuple[ResumeHit, ...]
    #: rounds of this log with no usage at all (not priced, not in the totals)
    rounds_without_usage: int = 0
    #: why a request could not be priced, each reason once
    unknown: tuple[str, ...] = field(default=())

    @property
    def tokens(self) -> Usage:
        """Every priced request's usage, summed."""
        return sum((r.usage for r in self.requests), _NO_USAGE)

    @property
    def cached_share(self) -> float | None:
        """The share of input tokens served from the provider's cache (None: no input)."""
        tokens = self.tokens
        return tokens.cached_tokens / tokens.input_tokens if tokens.input_tokens else None

    @property
    def usd(self) -> Decimal | None:
        """Money spent on every request the log holds usage for; None if one is unknown."""
        return _total(r.usd for r in self.requests)

    def usd_of(self, purpose: Literal["round", "summary"]) -> Decimal | None:
        """Money spent on rounds, or on summaries; None if one of them is unknown."""
        return _total(r.usd for r in self.requests if r.purpose == purpose)


_NO_USAGE = Usage(input_tokens=0, output_tokens=0, total_tokens=0)


def money(usd: Decimal | None, *, unknown: str = "unknown") -> str:
    """``$12.34``, ``$0.0123`` below a dollar, ``$0.000042`` below a hundredth of a cent,
    ``-$0.0012`` below zero, or ``unknown``. Raises nothing."""
    if usd is None:
        return unknown
    sign, size = ("-" if usd < 0 else ""), abs(usd)
    if size and size < Decimal("0.0001"):
        return f"{sign}${size:.2g}"
    return f"{sign}${size:.4f}" if size < 1 else f"{sign}${size:,.2f}"


def _total(values: Iterable[Decimal | None]) -> Decimal | None:
    total = Decimal(0)
    for value in values:
        if value is None:
            return None
        total += value
    return total


@dataclass(slots=True)
class _Models:
    """The model and summary model as the log says at each point."""

    model: str = ""
    compact_model: str | None = None

    def fold(self, record: Record) -> None:
        if isinstance(record, SessionRecord):
            self.model = record.model
            compact = record.settings.get("compact_model")
            self.compact_model = compact if isinstance(compact, str) and compact else None
        elif isinstance(record, SettingsChangedRecord):
            model = _changed_to(record, "model")
            if model:
                self.model = model
            if "compact_model" in record.changes:
                self.compact_model = _changed_to(record, "compact_model") or None


def _changed_to(record: SettingsChangedRecord, name: str) -> str | None:
    """The new value of setting ``name`` (``changes`` maps it to ``[old, new]``), if a text."""
    change = record.changes.get(name)
    if isinstance(change, list | tuple) and change and isinstance(change[-1], str):
        return change[-1]
    return None


def billed_usage(record: RoundCommittedRecord) -> Usage | None:
    """What the provider billed a round for: its usage, or what it reported although it was
    set aside as implausible."""
    return record.usage if record.usage is not None else record.reported_usage


def session_cost(records: Sequence[Record], book: PriceBook, *, own_from: int = 1) -> CostReport:
    """The cost of a session from its records (a lineage's, discarded branches included:
    their requests were paid for); only records from seq ``own_from`` on are this session's
    (a fork's parent paid for the rest, which are read for its model and the round before a
    compaction). Raises nothing."""
    models = _Models()
    requests: list[RequestCost] = []
    resumes: list[ResumeHit] = []
    unknown: dict[str, None] = {}
    without = 0
    # the rounds (own or not) in order, and the compactions, for the savings
    rounds: list[tuple[RoundCommittedRecord, Usage, str]] = []
    compactions: list[tuple[CompactionRecord, RequestCost | None]] = []

    def priced(charge: Charge) -> Decimal | None:
        if charge.usd is None:
            unknown[charge.source] = None
        return charge.usd

    for record in records:
        models.fold(record)
        own = record.seq >= own_from
        if isinstance(record, RoundCommittedRecord):
            usage = billed_usage(record)
            if own and record.resumed:
                resumes.append(
                    ResumeHit(
                        seq=record.seq,
                        round=record.round,
                        ts=record.ts,
                        input_tokens=usage.input_tokens if usage else None,
                        cached_tokens=usage.cached_tokens if usage else None,
                    )
                )
            if usage is None:
                without += own
                continue
            rounds.append((record, usage, models.model))
            if own:
                charge = book.charge(models.model, usage, at=record.ts)
                requests.append(
                    _request(record, "round", models.model, usage, charge, priced(charge))
                )
        elif isinstance(record, CompactionRecord) and own:
            summary: RequestCost | None = None
            if record.usage is not None:
                model = models.model
                if record.provider_item is None and models.compact_model:
                    model = models.compact_model
                charge = book.charge(model, record.usage, at=record.ts)
                summary = _request(record, "summary", model, record.usage, charge, priced(charge))
                requests.append(summary)
            compactions.append((record, summary))
    ends = [c.seq for c, _ in compactions[1:]]
    costs = tuple(
        _compaction_cost(record, summary, rounds, book, ends[i] if i < len(ends) else None)
        for i, (record, summary) in enumerate(compactions)
    )
    return CostReport(
        requests=tuple(requests),
        compactions=costs,
        resumes=tuple(resumes),
        rounds_without_usage=without,
        unknown=tuple(unknown),
    )


def _request(
    record: RoundCommittedRecord | CompactionRecord,
    purpose: Literal["round", "summary"],
    model: str,
    usage: Usage,
    charge: Charge,
    usd: Decimal | None,
) -> RequestCost:
    return RequestCost(
        seq=record.seq,
        round=record.round,
        ts=record.ts,
        purpose=purpose,
        model=model,
        usage=usage,
        usd=usd,
        source=charge.source,
    )


def _compaction_cost(
    record: CompactionRecord,
    summary: RequestCost | None,
    rounds: Sequence[tuple[RoundCommittedRecord, Usage, str]],
    book: PriceBook,
    next_seq: int | None,
) -> CompactionCost:
    # a digest called no model: it cost nothing; a summary whose usage is not in the log:
    # unknown
    usd = (
        summary.usd if summary is not None else (Decimal(0) if record.kind == "fallback" else None)
    )
    before = [u for r, u, _ in rounds if r.seq < record.seq]
    after = [
        (r, u, m)
        for r, u, m in rounds
        if r.seq > record.seq and (next_seq is None or r.seq < next_seq)
    ]
    removed = (
        record.tokens_before - record.tokens_after
        if record.tokens_before is not None and record.tokens_after is not None
        else None
    )
    saved = (
        _savings(after, removed, before[-1] if before else None, book)
        if removed is not None
        else (None, None)
    )
    return CompactionCost(
        seq=record.seq,
        round=record.round,
        kind=record.kind,
        usd=usd,
        removed_tokens=removed,
        rounds_after=len(after),
        input_saved=None if removed is None else removed * len(after),
        uncached_saved=saved[0],
        usd_saved=saved[1],
    )


def _savings(
    after: Sequence[tuple[RoundCommittedRecord, Usage, str]],
    removed: int,
    previous: Usage | None,
    book: PriceBook,
) -> tuple[int, Decimal | None]:
    """Uncached tokens and money the rounds ``after`` a compaction saved (module docstring)."""
    uncached_saved = 0
    usd_saved: Decimal | None = Decimal(0)
    for k, (r, actual, model) in enumerate(after):
        without = _without(actual, removed, previous if k == 0 else None, first=k == 0)
        uncached_saved += (without.input_tokens - without.cached_tokens) - (
            actual.input_tokens - actual.cached_tokens
        )
        if usd_saved is not None:
            then = book.charge(model, without, at=r.ts).usd
            now = book.charge(model, actual, at=r.ts).usd
            usd_saved = None if then is None or now is None else usd_saved + then - now
    return uncached_saved, usd_saved


def _without(actual: Usage, removed: int, previous: Usage | None, *, first: bool) -> Usage:
    """The usage a request after a compaction would have had without it (module docstring)."""
    total = actual.input_tokens + removed
    cached = actual.cached_tokens
    if first:
        if previous is not None and previous.cached_tokens > 0:
            cached = min(total, max(actual.cached_tokens + removed, previous.input_tokens))
    elif actual.cached_tokens > 0:
        cached = min(total, actual.cached_tokens + removed)
    return Usage(
        input_tokens=total,
        output_tokens=actual.output_tokens,
        total_tokens=actual.total_tokens + removed,
        cached_tokens=cached,
        cache_write_tokens=actual.cache_write_tokens,
    )
