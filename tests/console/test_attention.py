"""What the console makes stand out: calls waiting for approval and failed turns (on both
pages, with the commands that decide), the Compactions tile's colour, a spike that does not
squash the chart, watermark labels that never print on each other, and record times said
the way people say them."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from stowage.console import StoreReader, create_app
from stowage.console._app import ago
from stowage.console._cards import CompactionCard
from stowage.console._cards import compaction_tone as _tone
from stowage.console._chart import chart_geometry
from stowage.console._views import ChartPoint
from stowage.core import (
    ApprovalRecord,
    AssistantMessage,
    ErrorRecord,
    FunctionCall,
    ItemRecord,
    ManifestSection,
    MilestoneRecord,
    Record,
    RequestManifest,
    RoundCommittedRecord,
    SessionRecord,
    TurnRecord,
    UserMessage,
    lineage_store,
)
from stowage.storage import JsonlStore


def _waiting() -> list[Record]:
    return [
        SessionRecord(seq=1, model="scripted", context_window=8000),
        ItemRecord(seq=2, item=UserMessage(text="deploy the service")),
        TurnRecord(seq=3, turn=1, phase="started"),
        ItemRecord(
            seq=4,
            round=1,
            item=FunctionCall(call_id="call-7", name="deploy", arguments='{"env": "prod"}'),
        ),
        ApprovalRecord(
            seq=5,
            call_id="call-7",
            decision="requested",
            detail="$ deploy --env prod <script>alert(1)</script>\n(unconfined)",
        ),
    ]


def _failed() -> list[Record]:
    return [
        SessionRecord(seq=1, model="scripted", context_window=8000),
        ItemRecord(seq=2, item=UserMessage(text="hello")),
        TurnRecord(seq=3, turn=1, phase="started"),
        ErrorRecord(seq=4, kind="model", message="endpoint answered 503 three times"),
    ]


async def _pages(tmp_path: Path) -> tuple[str, str, str]:
    store = JsonlStore(tmp_path / "store")
    await store.create("waits", _waiting())
    await store.create("broke", _failed())
    await store.create("fine", _failed()[:2])
    await store.aclose()
    reader = StoreReader(JsonlStore(tmp_path / "store"))
    app = create_app(reader, store_label="test")
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            listing = (await client.get("/")).text
            waits = (await client.get("/s/waits")).text
            broke = (await client.get("/s/broke")).text
    finally:
        await reader.store.aclose()
    return listing, waits, broke


async def test_waiting_and_failed_sessions_stand_out_on_both_pages(tmp_path: Path) -> None:
    listing, waits, broke = await _pages(tmp_path)
    rows = dict(re.findall(r'<tr data-session="([^"]+)" class="row-([a-z]+)"', listing))
    assert rows == {"waits": "approval", "broke": "failed", "fine": "idle"}
    attention = re.search(r'<p class="attention"[^>]*>(.*?)</p>', listing, re.S)
    assert attention, listing
    assert "1 waiting for approval" in attention.group(1)
    assert "1 failed" in attention.group(1)
    assert "endpoint answered 503 three times" in listing  # why it failed, on its row
    # the session page says what waits and how to decide it
    banner = re.search(r'data-testid="pending-approvals">(.*?)</section>', waits, re.S)
    assert banner, waits
    assert "deploy" in banner.group(1)
    assert "call-7" in banner.group(1)
    assert "{&#34;env&#34;: &#34;prod&#34;}" in banner.group(1)  # the arguments, escaped
    assert "stowage approve waits call-7" in banner.group(1)
    assert "stowage deny waits call-7" in banner.group(1)
    # what the call will do, as recorded when it was requested (escaped like all the rest)
    assert (
        '<pre class="approval-detail" data-testid="approval-detail">$ deploy --env prod '
        "&lt;script&gt;alert(1)&lt;/script&gt;\n(unconfined)</pre>"
    ) in banner.group(1)
    assert 'data-testid="failure"' not in waits
    failure = re.search(r'data-testid="failure">(.*?)</section>', broke, re.S)
    assert failure and "endpoint answered 503 three times" in failure.group(1)
    # the state filter knows the new state
    assert '<option value="approval"' in listing


def _card(applied: float | None, kind: str = "auto") -> CompactionCard:
    return CompactionCard(
        number=1, seq=9, ts="", kind=kind, reason="", round=3, turn=1, tokens_before=100,
        tokens_after=10, estimated=False, removed=4, retained=1, covers_through=8,
        applied_at=applied, waited=None, summary="", protected="", in_use=100,
        in_use_estimated=False,
    )  # fmt: skip


def test_the_compactions_tile_colour_says_where_the_newest_compaction_was_applied() -> None:
    marks = {"soft_mark": 0.70, "compact_mark": 0.85, "hard_mark": 0.95}
    assert _tone([], marks).tone == "none"
    assert _tone([_card(0.6)], marks).tone == "ahead"
    assert _tone([_card(0.88)], marks).tone == "at-mark"
    forced = _tone([_card(0.6), _card(0.97)], marks)
    assert forced.tone == "forced"
    assert "97%" in forced.note and "hard mark" in forced.note
    # a microcompaction after it does not change what the tile says about full ones
    assert _tone([_card(0.97), _card(0.5, kind="micro")], marks).tone == "forced"


def _points(tokens: list[int]) -> list[ChartPoint]:
    return [
        ChartPoint(round=i + 1, seq=i + 1, tokens=t, estimated=False) for i, t in enumerate(tokens)
    ]


def test_a_spike_is_clipped_to_the_top_edge_instead_of_squashing_every_other_point() -> None:
    usable = 6000
    steady = [1000 + 400 * (i % 10) for i in range(30)]
    chart = chart_geometry(_points([*steady, 250_000]), [], {"compact_mark": 0.85}, usable)
    (clipped,) = chart.clipped
    assert clipped[2].tokens == 250_000
    assert clipped[1] == chart.plot_top  # drawn at the top edge
    ys = [y for _, y, p in chart.points if p.tokens != 250_000]
    plot_height = chart.plot_bottom - chart.plot_top
    # the steady rounds span a fair part of the plot, not a flat line at its bottom
    assert max(ys) - min(ys) > 0.25 * plot_height
    unclipped = chart_geometry(_points(steady), [], {"compact_mark": 0.85}, usable)
    assert unclipped.clipped == ()


def test_watermark_labels_never_print_on_each_other_or_on_their_lines() -> None:
    marks = {"soft_mark": 0.90, "compact_mark": 0.93, "hard_mark": 0.95}
    chart = chart_geometry(_points([100, 200]), [], marks, 1000)
    label_ys = sorted(label_y for *_, label_y in chart.marks)
    assert len(label_ys) == 4  # usable and three marks
    assert all(b - a >= 15 - 1e-6 for a, b in itertools.pairwise(label_ys))
    assert label_ys[0] >= 11  # the top label is a whole line below the top edge, not cut off
    # labels sit in the right margin, where no line is drawn
    assert chart.plot_right < chart.width - 60


def test_record_times_are_said_the_way_people_say_them() -> None:
    now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)

    def at(delta: timedelta) -> str:
        return (now - delta).isoformat(timespec="milliseconds")

    assert ago(at(timedelta(seconds=10)), now) == "just now"
    assert ago(at(timedelta(minutes=3, seconds=5)), now) == "3 min ago"
    assert ago(at(timedelta(hours=2, minutes=59)), now) == "2 h ago"
    assert ago(at(timedelta(days=5, hours=1)), now) == "5 d ago"
    assert ago("not a time", now) == "not a time"


async def test_milestones_and_request_manifests_are_on_the_session_page(tmp_path: Path) -> None:
    manifest = RequestManifest(
        sha256="ab" * 32,
        input_sha256="cd" * 32,
        sections=(
            ManifestSection(name="system", first_seq=None, last_seq=None, items=1, sha256="0" * 16, tokens=12),
            ManifestSection(name="history", first_seq=2, last_seq=4, items=3, sha256="1" * 16, tokens=140),
        ),
    )  # fmt: skip
    records: list[Record] = [
        SessionRecord(seq=1, model="scripted", context_window=8000),
        ItemRecord(seq=2, item=UserMessage(text="plan the migration")),
        TurnRecord(seq=3, turn=1, phase="started"),
        ItemRecord(seq=4, round=1, item=AssistantMessage(text="the plan: three steps")),
        RoundCommittedRecord(seq=5, round=1, usage=None, first_seq=4, last_seq=4, manifest=manifest),
        TurnRecord(seq=6, turn=1, phase="finished"),
        MilestoneRecord(seq=7, name="planning done", note="three steps agreed"),
    ]  # fmt: skip
    store = JsonlStore(tmp_path / "store")
    await store.create("phased", records)
    await store.aclose()
    reader = StoreReader(JsonlStore(tmp_path / "store"))
    transport = httpx.ASGITransport(app=create_app(reader, store_label="test"))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            page = (await client.get("/s/phased")).text
    finally:
        await reader.store.aclose()
    milestone = re.search(r'<li class="t t-milestone"[^>]*>(.*?)</li>', page, re.S)
    assert milestone, page
    assert "milestone: planning done (said by the user)" in milestone.group(1)
    assert "three steps agreed" in milestone.group(1)
    assert re.search(r'<g class="milestone">.*?planning done', page, re.S)
    round_entry = re.search(r'<li class="t t-round"[^>]*>(.*?)</li>', page, re.S)
    assert round_entry, page
    assert f"request {'ab' * 6} ~152 tokens: system (1, ~12), history #2-4 (3, ~140)" in (
        round_entry.group(1)
    )


async def test_a_fork_shows_its_parents_history_up_to_the_fork_point(tmp_path: Path) -> None:
    parent: list[Record] = [
        SessionRecord(seq=1, model="scripted", context_window=8000),
        ItemRecord(seq=2, item=UserMessage(text="the parent's first message")),
        TurnRecord(seq=3, turn=1, phase="started"),
        ItemRecord(seq=4, round=1, item=AssistantMessage(text="answered in the parent")),
        RoundCommittedRecord(seq=5, round=1, usage=None, first_seq=4, last_seq=4),
        TurnRecord(seq=6, turn=1, phase="finished"),
        ItemRecord(seq=7, item=UserMessage(text="after the fork point")),
    ]
    store = lineage_store(JsonlStore(tmp_path / "store"))
    await store.create("parent", parent)
    child = await store.fork("parent", "child", at_round=1)
    await store.aclose()
    reader = StoreReader(JsonlStore(tmp_path / "store"))
    transport = httpx.ASGITransport(app=create_app(reader, store_label="test"))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            page = (await client.get(f"/s/{child}")).text
    finally:
        await reader.store.aclose()
    assert "the parent&#39;s first message" in page and "answered in the parent" in page
    assert "after the fork point" not in page
    assert 'class="warn"' not in page  # the fork record folds: no damaged-log warning
