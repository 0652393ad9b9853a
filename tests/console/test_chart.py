"""The tokens chart: a one-round session's point and marks, each round above the hard mark
marked with what followed it (in the figures ``stowage show`` prints for that compaction),
and a chart that stays small for 10,000 rounds."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import anyio
import httpx
from hypothesis import given
from hypothesis import strategies as st
from stowage.console import StoreReader, create_app
from stowage.console._cards import CompactionCard
from stowage.console._chart import MAX_POINTS, _round_labels, chart_geometry
from stowage.console._views import ChartPoint
from stowage.storage import JsonlStore

from .conftest import run_cli
from .longlog import long_session

MARKS = {"soft_mark": 0.70, "compact_mark": 0.85, "hard_mark": 0.95}


def _points(tokens: list[int], usable: int | None = 1000) -> list[ChartPoint]:
    return [
        ChartPoint(round=i + 1, seq=10 * (i + 1), tokens=t, estimated=False, usable=usable)
        for i, t in enumerate(tokens)
    ]


def _compaction(
    seq: int, round_: int, *, before: int, after: int, number: int = 1
) -> CompactionCard:
    return CompactionCard(
        number=number, seq=seq, ts="", kind="full", reason="", round=round_, turn=1,
        tokens_before=before, tokens_after=after, estimated=False, removed=4, retained=1,
        covers_through=seq - 1, in_use=before, in_use_estimated=False,
        applied_at=before / 1000, waited=None, summary="", protected="",
        decided_tokens=before - 50, usable=1000,
    )  # fmt: skip


def test_a_one_round_session_has_its_point_in_the_middle_with_its_figure_and_the_marks() -> None:
    chart = chart_geometry(_points([300]), [], MARKS, 1000)
    ((x, y, _),) = chart.points
    assert x == (chart.plot_left + chart.plot_right) / 2
    assert chart.plot_top < y < chart.plot_bottom
    assert chart.single == "round 1: 300 tokens, 30% of usable"
    assert chart.point_radius > 3  # a marker, not a speck
    assert [css for _, _, css, _ in chart.marks] == ["soft", "compact", "hard", "usable"]
    assert chart.x_labels == ((x, "1"),)
    # every watermark is on the plot, above the point
    assert all(chart.plot_top <= line_y < y for line_y, *_ in chart.marks)


def test_a_session_with_no_round_yet_has_an_empty_chart() -> None:
    chart = chart_geometry([], [], MARKS, 1000)
    assert chart.points == () and chart.polyline == "" and chart.single == ""


def test_a_round_above_the_hard_mark_is_marked_with_the_compaction_that_followed() -> None:
    points = _points([400, 600, 1390, 300, 350])
    card = _compaction(35, 3, before=1395, after=280, number=2)
    chart = chart_geometry(points, [card], MARKS, 1000)
    (over,) = chart.overs
    assert over.point.round == 3 and over.card == card
    assert over.share == 1.39 and over.label == "\u2192 #2"
    assert over.note == (
        "round 3: 1,390 tokens in use, 139% of usable 1,000, above the hard mark 95%. "
        "Then Compaction #2 (record #35, round 3) applied at 1,395 tokens, 140% of usable; "
        "freed 1,115 (1,395 \u2192 280)."
    )


def test_a_round_above_the_hard_mark_that_a_stopped_turn_followed_says_so() -> None:
    chart = chart_geometry(
        _points([400, 1200]), [], MARKS, 1000, stops=[(25, "the turn cannot fit: 1,200 > 950")]
    )
    (over,) = chart.overs
    assert over.card is None and over.label == "stopped"
    assert over.note.endswith(
        "Then the turn stopped (record #25): the turn cannot fit: 1,200 > 950"
    )
    # nothing after it at all
    (last,) = chart_geometry(_points([400, 1200]), [], MARKS, 1000).overs
    assert last.note.endswith("No compaction has followed yet.") and last.label == ""


def test_10000_rounds_draw_a_bounded_chart_that_keeps_every_spike() -> None:
    tokens = [300 + (i % 20) * 30 for i in range(10_000)]
    for spike in (6, 5_000, 9_999):
        tokens[spike] = 1_500
    cards = [
        _compaction(10 * (r + 1) + 5, r + 1, before=900, after=300, number=n + 1)
        for n, r in enumerate(range(19, 10_000, 20))
    ]
    chart = chart_geometry(_points(tokens), cards, MARKS, 1000)
    assert len(chart.points) <= MAX_POINTS and chart.per_point > 1
    assert sorted(o.point.round for o in chart.overs) == [7, 5_001, 10_000]
    # 500 compactions: ticks on the axis, never more markers than the plot has room for
    assert chart.dense_events
    assert len(chart.events) <= (chart.plot_right - chart.plot_left) / 3 + 1
    named = sum(len(re.findall(r"#\d+", label)) for _, label, _ in chart.events)
    more = sum(int(n) for _, label, _ in chart.events for n in re.findall(r"and (\d+) more", label))
    assert named + more == len(cards)


@given(first=st.integers(0, 100_000), length=st.integers(0, 100_000))
def test_round_labels_are_few_in_order_and_never_crowded(first: int, length: int) -> None:
    last = first + length
    labels = _round_labels(first, last)
    assert labels[0] == first and all(first <= r <= last for r in labels)
    assert len(labels) <= 12
    gaps = [b - a for a, b in itertools.pairwise(labels)]
    assert all(gap > 0 for gap in gaps)
    if len(gaps) > 1:
        assert min(gaps) >= max(gaps) / 2


def test_the_chart_says_what_stowage_show_says_of_the_compaction_after_a_spike(
    tmp_path: Path,
) -> None:
    async def write() -> None:
        store = JsonlStore(tmp_path / "store")
        await store.create("spiky", long_session(31, spikes=(12,), every=10))
        await store.aclose()

    async def page() -> str:
        reader = StoreReader(JsonlStore(tmp_path / "store"))
        transport = httpx.ASGITransport(app=create_app(reader, store_label="test"))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                return (await c.get("/s/spiky")).text
        finally:
            await reader.store.aclose()

    anyio.run(write)
    html = anyio.run(page)
    shown = run_cli("show", "spiky", "--store", "store", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    # stowage show: "== compaction 2 ... applied at 7,020 tokens in use (reported), 140% of
    # usable (5,000 tokens)"
    block = shown.stdout.split("== compaction 2 ")[1]
    applied = re.search(r"applied at ([\d,]+) tokens in use \((\w+)\), (\d+)% of usable", block)
    assert applied, shown.stdout
    tokens, how, percent = applied.groups()
    listed = re.search(r'<ul class="overs"[^>]*><li>(.*?)</li>', html, re.S)
    assert listed, html
    assert "Then Compaction #2 (record #" in listed.group(1)
    assert f"applied at {tokens} tokens, {percent}% of usable" in listed.group(1)
    card = re.search(
        r'<article class="card card-full" id="card-(\d+)"[^>]*>\s*<h3>Compaction #2 .*?</article>',
        html,
        re.S,
    )
    assert card, html
    assert f'<span class="in-use">{tokens}</span> tokens {how}' in card.group(0)
    assert f'<span class="share">{percent}%</span>' in card.group(0)
    # the ring on the chart links to that card, on this page
    assert f'href="#card-{card.group(1)}"' in html
