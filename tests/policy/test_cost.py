"""The cost ledger, pure: money from a session's log, per compaction and per resume.

Custom prices make the hand-computed figures exact; genai-prices' own table is checked
where it is installed (the ``cost`` extra).
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stowage.core import (
    CompactionRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SettingsChangedRecord,
    Usage,
)
from stowage.policy import CustomPrice, Prices, money, session_cost

MODEL = "house-model"
PRICE = CustomPrice(
    input=Decimal("2"), output=Decimal("8"), cached_input=Decimal("0.5"), cache_write=Decimal("3")
)
BOOK = Prices(custom={MODEL: PRICE}, table=False)
M = Decimal(1_000_000)


def usage(input_tokens: int, cached: int = 0, output: int = 0, written: int = 0) -> Usage:
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        total_tokens=input_tokens + output,
        cached_tokens=cached,
        cache_write_tokens=written,
    )


class Log:
    """A log written by hand: records numbered as they are added."""

    def __init__(self, model: str = MODEL, compact_model: str | None = None) -> None:
        settings = {"compact_model": compact_model} if compact_model else {}
        self.records: list[Record] = [SessionRecord(seq=1, model=model, settings=settings)]
        self.round = 0

    @property
    def seq(self) -> int:
        return len(self.records) + 1

    def round_(self, used: Usage | None, *, resumed: bool = False) -> Log:
        self.round += 1
        self.records.append(
            RoundCommittedRecord(
                seq=self.seq,
                round=self.round,
                usage=used,
                first_seq=self.seq,
                last_seq=self.seq,
                resumed=resumed,
            )
        )
        return self

    def compaction(
        self,
        before: int | None,
        after: int | None,
        used: Usage | None = None,
        kind: str = "full",
    ) -> Log:
        self.records.append(
            CompactionRecord(
                seq=self.seq,
                kind="full" if kind == "full" else "fallback",
                summary="s",
                covers_through=self.seq - 1,
                retained=(),
                reason="r",
                tokens_before=before,
                tokens_after=after,
                removed=1,
                round=self.round,
                usage=used,
            )
        )
        return self

    def model(self, name: str) -> Log:
        old = MODEL
        self.records.append(SettingsChangedRecord(seq=self.seq, changes={"model": [old, name]}))
        return self


def cost(used: Usage, price: CustomPrice = PRICE) -> Decimal:
    fresh = used.input_tokens - used.cached_tokens - used.cache_write_tokens
    return (
        fresh * price.input
        + used.cached_tokens * (price.cached_input or 0)
        + used.cache_write_tokens * (price.cache_write or 0)
        + used.output_tokens * price.output
    ) / M


usages = st.builds(
    lambda fresh, cached, written, output: usage(fresh + cached + written, cached, output, written),
    st.integers(0, 200_000),
    st.integers(0, 200_000),
    st.integers(0, 5_000),
    st.integers(0, 20_000),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("round"), st.none() | usages, st.booleans()),
        st.tuples(
            st.just("compaction"),
            st.none() | usages,
            st.tuples(st.integers(1000, 90_000), st.integers(0, 1000)),
        ),
    ),
    max_size=25,
)


def written(plan: list[tuple[object, ...]], model: str = MODEL) -> Log:
    log = Log(model)
    for step in plan:
        if step[0] == "round":
            _, used, resumed = step
            log.round_(used, resumed=bool(resumed))  # type: ignore[arg-type]
        else:
            _, used, (before, after) = step  # type: ignore[misc]
            log.compaction(before, after, used)  # type: ignore[arg-type]
    return log


@settings(max_examples=200)
@given(steps)
def test_the_total_is_the_sum_of_its_rounds_and_summaries(plan: list[tuple[object, ...]]) -> None:
    report = session_cost(written(plan).records, BOOK)
    rounds = [r for r in report.requests if r.purpose == "round"]
    summaries = [r for r in report.requests if r.purpose == "summary"]
    assert report.usd == sum((cost(r.usage) for r in report.requests), Decimal(0))
    assert report.usd == report.usd_of("round") + report.usd_of("summary")  # type: ignore[operator]
    assert report.usd_of("round") == sum((r.usd for r in rounds), Decimal(0))  # type: ignore[misc]
    assert len(summaries) == sum(1 for s in plan if s[0] == "compaction" and s[1] is not None)
    assert report.tokens.input_tokens == sum(r.usage.input_tokens for r in report.requests)
    assert report.rounds_without_usage == sum(1 for s in plan if s[0] == "round" and s[1] is None)
    if report.tokens.input_tokens:
        assert report.cached_share == report.tokens.cached_tokens / report.tokens.input_tokens
    else:
        assert report.cached_share is None


@settings(max_examples=100)
@given(steps)
def test_an_unknown_model_costs_unknown_never_a_number(plan: list[tuple[object, ...]]) -> None:
    report = session_cost(written(plan, model="nobody-prices-this").records, BOOK)
    assert all(r.usd is None for r in report.requests)
    assert all(c.usd_saved is None for c in report.compactions if c.rounds_after)
    if report.requests:
        assert report.usd is None
        assert any("nobody-prices-this" in why for why in report.unknown)
        assert all("[prices." in why for why in report.unknown)  # it says what to do


@given(usages)
def test_a_custom_price_is_charged_as_set(used: Usage) -> None:
    report = session_cost(Log().round_(used).records, BOOK)
    (request,) = report.requests
    assert request.usd == cost(used)
    assert request.source == "custom"


def test_a_custom_price_without_a_cached_rate_leaves_cached_tokens_unknown() -> None:
    book = Prices(custom={MODEL: CustomPrice(input=Decimal(1), output=Decimal(1))}, table=False)
    plain = session_cost(Log().round_(usage(1000, output=10)).records, book)
    assert plain.usd == Decimal(1010) / M
    cached = session_cost(Log().round_(usage(1000, cached=500)).records, book)
    assert cached.usd is None
    assert "cached_input" in cached.unknown[0]


def test_the_model_of_each_round_is_the_one_the_log_says_then() -> None:
    other = CustomPrice(input=Decimal(100), output=Decimal(0))
    book = Prices(custom={MODEL: PRICE, "bigger": other}, table=False)
    log = Log().round_(usage(1000)).model("bigger").round_(usage(1000))
    report = session_cost(log.records, book)
    assert [r.model for r in report.requests] == [MODEL, "bigger"]
    assert report.usd == Decimal(2000 + 100_000) / M


def test_a_summary_is_priced_with_the_summary_model() -> None:
    cheap = CustomPrice(input=Decimal("0.1"), output=Decimal("0.4"))
    book = Prices(custom={MODEL: PRICE, "cheap": cheap}, table=False)
    log = (
        Log(compact_model="cheap")
        .round_(usage(5000))
        .compaction(5000, 1000, usage(5000, output=500))
    )
    (summary,) = [r for r in session_cost(log.records, book).requests if r.purpose == "summary"]
    assert summary.model == "cheap"
    assert summary.usd == cost(usage(5000, output=500), cheap)


def test_a_compaction_cost_its_summary_and_saved_removed_tokens_on_each_later_round() -> None:
    """Warm cache: the first round after pays the prefix break, later ones save at the
    cached rate; every figure by hand from the module's formula."""
    log = (
        Log()
        .round_(usage(40_000, cached=39_000, output=100))  # I_0 = 40,000, warm
        .compaction(40_000, 10_000, usage(40_000, cached=39_000, output=800))
        .round_(usage(11_000, cached=2_000, output=100))  # the break: 2,000 cached
        .round_(usage(12_000, cached=10_800, output=100))
    )
    (compaction,) = session_cost(log.records, BOOK).compactions
    removed = 30_000
    assert compaction.removed_tokens == removed
    assert compaction.rounds_after == 2
    assert compaction.input_saved == 2 * removed
    # round 1 without it: 41,000 in, cached min(41,000, max(2,000 + 30,000, 40,000)) = 40,000
    # round 2 without it: 42,000 in, cached 10,800 + 30,000 = 40,800
    first = cost(usage(41_000, 40_000, 100)) - cost(usage(11_000, 2_000, 100))
    second = cost(usage(42_000, 40_800, 100)) - cost(usage(12_000, 10_800, 100))
    assert compaction.usd_saved == first + second
    assert compaction.uncached_saved == (1_000 - 9_000) + (1_200 - 1_200)
    assert compaction.usd == cost(usage(40_000, 39_000, 800))
    assert compaction.net_usd == first + second - compaction.usd


@given(
    st.integers(1, 100_000),
    st.lists(st.tuples(st.integers(0, 50_000), st.integers(0, 2_000)), max_size=10),
)
def test_with_a_cold_cache_a_compaction_saves_its_tokens_at_the_input_price(
    removed: int, later: list[tuple[int, int]]
) -> None:
    log = Log().round_(usage(removed + 5_000)).compaction(removed + 5_000, 5_000)
    for input_tokens, output in later:
        log.round_(usage(input_tokens, output=output))
    (compaction,) = session_cost(log.records, BOOK).compactions
    assert compaction.usd == 0 or compaction.usd is None  # no usage recorded: unknown
    assert compaction.usd_saved == removed * len(later) * PRICE.input / M
    assert compaction.uncached_saved == compaction.input_saved == removed * len(later)


def test_savings_end_at_the_next_compaction_and_a_digest_costs_nothing() -> None:
    log = (
        Log()
        .round_(usage(10_000))
        .compaction(10_000, 2_000, kind="fallback")
        .round_(usage(3_000))
        .compaction(3_000, 1_000, usage(3_000))
        .round_(usage(1_500))
        .round_(usage(2_000))
    )
    first, second = session_cost(log.records, BOOK).compactions
    assert (first.usd, first.rounds_after, first.input_saved) == (Decimal(0), 1, 8_000)
    assert (second.rounds_after, second.input_saved) == (2, 4_000)
    assert second.usd == cost(usage(3_000))


def test_a_compaction_without_figures_saved_unknown() -> None:
    log = Log().round_(usage(1000)).compaction(None, None).round_(usage(500))
    (compaction,) = session_cost(log.records, BOOK).compactions
    assert compaction.usd is None  # a full compaction whose usage is not in the log
    assert compaction.usd_saved is None and compaction.input_saved is None


def test_each_resume_reports_the_cache_hit_of_its_first_request() -> None:
    log = (
        Log()
        .round_(usage(1000))
        .round_(usage(2000, cached=1000))
        .round_(usage(3000, cached=0), resumed=True)  # the cache had expired
        .round_(usage(4000, cached=2944))
        .round_(usage(5000, cached=3840), resumed=True)
        .round_(None, resumed=True)
    )
    resumes = session_cost(log.records, BOOK).resumes
    assert [r.round for r in resumes] == [3, 5, 6]
    assert [r.share for r in resumes] == [0.0, 3840 / 5000, None]


def test_a_fork_pays_only_for_its_own_records() -> None:
    log = Log().round_(usage(1000)).round_(usage(2000))
    own_from = log.seq
    log.round_(usage(3000)).compaction(3000, 1000, usage(3000)).round_(usage(1200))
    report = session_cost(log.records, BOOK, own_from=own_from)
    assert [r.round for r in report.requests if r.purpose == "round"] == [3, 4]
    assert report.usd == cost(usage(3000)) * 2 + cost(usage(1200))


def test_genai_prices_table_prices_a_model_it_knows() -> None:
    pytest.importorskip("genai_prices")
    report = session_cost(Log("gpt-4o").round_(usage(1_000_000, output=0)).records, Prices())
    (request,) = report.requests
    assert request.source == "genai-prices"
    assert request.usd is not None and request.usd > 0


def test_a_custom_price_wins_over_the_table() -> None:
    pytest.importorskip("genai_prices")
    book = Prices(custom={"gpt-4o": PRICE})
    (request,) = session_cost(Log("gpt-4o").round_(usage(1_000_000)).records, book).requests
    assert (request.usd, request.source) == (Decimal(2), "custom")


def test_the_table_says_unknown_for_a_model_it_does_not_know() -> None:
    pytest.importorskip("genai_prices")
    report = session_cost(Log("scripted").round_(usage(1000)).records, Prices())
    assert report.usd is None
    assert "not in genai-prices' table" in report.unknown[0]


@pytest.mark.parametrize(
    ("usd", "shown"),
    [
        (None, "unknown"),
        (Decimal("12.346"), "$12.35"),
        (Decimal("1234.5"), "$1,234.50"),
        (Decimal("0.01234"), "$0.0123"),
        (Decimal("0.0000421"), "$0.000042"),
        (Decimal("-0.0012"), "-$0.0012"),
        (Decimal(0), "$0.0000"),
    ],
)
def test_money_is_shown_in_dollars(usd: Decimal | None, shown: str) -> None:
    assert money(usd) == shown
