"""The console in a real browser (Debian's chromium driven by Playwright): the pages, a
compacted session's tile and cards against its log, a live round from another process, and
markup from a tool shown as text. Screenshots go to each test's temp dir."""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from stowage.core import CompactionRecord, MicrocompactRecord, Record
from stowage.storage import JsonlStore

from .browser import chromium
from .conftest import HOSTILE, only_session, run_cli, write_hostile_session
from .longlog import long_session

pytestmark = pytest.mark.slow

Start = Callable[[str, Path], str]
WAIT_MS = 60_000  # a ceiling for a noisy machine, never a figure under test


def _records(store: Path, session_id: str) -> tuple[Record, ...]:
    async def read() -> tuple[Record, ...]:
        s = JsonlStore(store)
        try:
            return (await s.read(session_id, repair=False)).records
        finally:
            await s.aclose()

    return anyio.run(read)


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_sessions_page_lists_the_demo_session_with_its_figures(
    demo_store: Path, console_server: Start, tmp_path: Path
) -> None:
    session_id = only_session(demo_store)
    records = _records(demo_store, session_id)
    compactions = sum(isinstance(r, CompactionRecord) for r in records)
    base = console_server(str(demo_store), demo_store.parent)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(base + "/")
        row = page.locator(f'tr[data-session="{session_id}"]')
        row.wait_for(timeout=WAIT_MS)
        assert row.locator("td.compactions").inner_text() == str(compactions)
        assert "idle" in row.inner_text()
        assert "scripted" in row.inner_text()
        page.screenshot(path=str(tmp_path / "sessions.png"))
        row.locator("a").click()
        page.wait_for_url(f"**/s/{session_id}", timeout=WAIT_MS)
        assert page.locator("h1").inner_text() == f"Session {session_id}"


def test_a_compacted_session_shows_the_tile_and_a_card_per_compaction_as_logged(
    demo_store: Path, console_server: Start, tmp_path: Path
) -> None:
    session_id = only_session(demo_store)
    records = _records(demo_store, session_id)
    full = [r for r in records if isinstance(r, CompactionRecord)]
    micro = [r for r in records if isinstance(r, MicrocompactRecord)]
    assert full, "the demo must compact for this test to mean anything"
    before = _tree_digest(demo_store)
    base = console_server(str(demo_store), demo_store.parent)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(f"{base}/s/{session_id}")
        tile = page.get_by_test_id("compactions-count")
        assert tile.inner_text() == str(len(full))
        assert page.locator("article.card-full").count() == len(full)
        assert page.locator("article.card-micro").count() == len(micro)
        first = full[0]
        card = page.locator(f"#card-{first.seq}")
        assert card.locator(".before").inner_text() == f"{first.tokens_before:,}"
        assert card.locator(".after").inner_text() == f"{first.tokens_after:,}"
        assert card.locator(".removed").inner_text() == str(first.removed)
        assert card.locator(".retained").inner_text() == str(len(first.retained))
        assert card.locator(".reason").inner_text() == first.reason
        assert card.locator(".how").inner_text() == ("estimated" if first.estimated else "reported")
        assert first.waited is not None  # the demo's sampler records how long it held a request
        assert card.locator(".waited").inner_text() == f"{first.waited:.2f} s"
        summary = card.locator("details.summary")
        assert summary.evaluate("d => d.open") is False
        assert not summary.locator("pre").is_visible()
        summary.locator("summary").click()
        assert summary.evaluate("d => d.open") is True
        assert summary.locator("pre").inner_text() == first.summary
        # the chart marks each compaction and draws the watermarks
        assert page.locator("svg.chart line.event-full").count() == len(full)
        assert page.locator("svg.chart line.mark-compact").count() == 1
        page.screenshot(path=str(tmp_path / "session.png"), full_page=False)
    assert (tmp_path / "session.png").stat().st_size > 0
    assert _tree_digest(demo_store) == before, "the console changed the store"


def test_a_round_run_by_another_process_appears_live(tmp_path: Path, console_server: Start) -> None:
    first = run_cli("run", "look around", "--session", "live", "--store", "store", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    base = console_server("store", tmp_path)
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{base}/s/live")
        page.locator("#live-status.on").wait_for(timeout=WAIT_MS)
        rounds_before = page.locator("li.t-round").count()
        assert rounds_before > 0
        turns_before = page.locator("li.t-turn").count()
        # another process continues the session while the page stays open
        other = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stowage.cli",
                "resume",
                "live",
                "and now the tests",
                "--store",
                "store",
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            page.wait_for_function(
                "n => document.querySelectorAll('li.t-round').length > n",
                arg=rounds_before,
                timeout=WAIT_MS,
            )
        finally:
            _, err = other.communicate(timeout=180)
        assert other.returncode == 0, err
        page.wait_for_function(
            "n => document.querySelectorAll('li.t-turn').length >= n + 2",
            arg=turns_before,
            timeout=WAIT_MS,
        )
        assert page.evaluate("Number(document.body.dataset.refreshed || 0)") >= 1
        assert "and now the tests" in page.locator("#timeline").inner_text()
        page.screenshot(path=str(tmp_path / "live.png"))


def test_markup_in_tool_output_is_shown_as_text_and_never_runs(
    tmp_path: Path, console_server: Start
) -> None:
    write_hostile_session(tmp_path / "store")
    base = console_server("store", tmp_path)
    with chromium() as browser:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("dialog", lambda dialog: (errors.append(dialog.message), dialog.dismiss()))
        page.goto(f"{base}/s/hostile")
        output = page.locator("li.t-output pre.text")
        assert output.inner_text() == HOSTILE
        assert page.evaluate("window.__pwned === undefined")
        assert page.title() != "pwned"
        assert page.locator("li.t-output script").count() == 0
        assert page.locator("li.t-output b").count() == 0
        assert page.locator("li.t-call img").count() == 0
        page.screenshot(path=str(tmp_path / "hostile.png"))
    assert errors == []


def test_a_session_started_by_another_process_appears_on_the_sessions_page(
    tmp_path: Path, console_server: Start
) -> None:
    first = run_cli("run", "hello", "--session", "early", "--store", "store", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    base = console_server("store", tmp_path)
    with chromium() as browser:
        page = browser.new_page()
        page.goto(base + "/")
        page.locator("#live-status.on").wait_for(timeout=WAIT_MS)
        assert page.locator('tr[data-session="late"]').count() == 0
        done = run_cli("run", "hello again", "--session", "late", "--store", "store", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        row = page.locator('tr[data-session="late"]')
        row.wait_for(timeout=WAIT_MS)
        assert "scripted" in row.inner_text()


def test_waiting_and_failed_sessions_are_highlighted_and_times_are_local(
    tmp_path: Path, console_server: Start, demo_store: Path
) -> None:
    from .test_attention import _failed, _waiting

    async def write() -> None:
        store = JsonlStore(tmp_path / "store")
        try:
            await store.create("waits", _waiting())
            await store.create("broke", _failed())
        finally:
            await store.aclose()

    anyio.run(write)
    base = console_server("store", tmp_path)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(base + "/")
        waiting = page.locator('tr[data-session="waits"]')
        waiting.wait_for(timeout=WAIT_MS)
        assert "waits for approval (1)" in waiting.inner_text()
        # highlighted: its background is not the table's plain white
        plain = "rgb(255, 255, 255)"
        assert waiting.evaluate("r => getComputedStyle(r).backgroundColor") != plain
        failed = page.locator('tr[data-session="broke"]')
        assert failed.evaluate("r => getComputedStyle(r).backgroundColor") != plain
        assert page.get_by_test_id("attention").is_visible()
        # the page's script rewrote the hover text in the reader's zone and kept "ago" text
        time = waiting.locator("time")
        assert time.get_attribute("title") and "UTC" not in (time.get_attribute("title") or "")
        assert time.inner_text() == "just now" or time.inner_text().endswith("ago")
        page.screenshot(path=str(tmp_path / "attention.png"))
        page.goto(f"{base}/s/waits")
        banner = page.get_by_test_id("pending-approvals")
        assert banner.is_visible()
        assert "stowage approve waits call-7" in banner.inner_text()
    # the demo session's chart: every watermark label is readable, none on another
    demo_id = only_session(demo_store)
    base = console_server(str(demo_store), demo_store.parent)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(f"{base}/s/{demo_id}")
        labels = page.locator("svg.chart text.mark-label")
        assert labels.count() >= 2
        boxes = [labels.nth(i).bounding_box() for i in range(labels.count())]
        assert all(box is not None for box in boxes)
        spans = sorted((b["y"], b["y"] + b["height"]) for b in boxes if b is not None)
        assert all(low_next >= high for (_, high), (low_next, _) in itertools.pairwise(spans))
        page.screenshot(path=str(tmp_path / "chart.png"))


def test_a_31_turn_session_is_one_short_page_that_pages_back_on_demand(
    tmp_path: Path, console_server: Start
) -> None:
    async def write() -> None:
        store = JsonlStore(tmp_path / "store")
        try:
            # 31 turns of 3 rounds, a compaction every 5 rounds: 18 compactions
            await store.create("turns31", long_session(93, per_turn=3, every=5, output="x\n" * 40))
        finally:
            await store.aclose()

    anyio.run(write)
    base = console_server("store", tmp_path)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(f"{base}/s/turns31")
        height = page.evaluate("document.documentElement.scrollHeight")
        heads = page.locator("#timeline .round-head")
        assert heads.first.inner_text().startswith("since the last committed round")
        assert heads.nth(1).inner_text().startswith("round 93 ")
        assert page.locator("#timeline > li.round-block").count() == 11  # 10 rounds and after
        assert page.locator("#cards article.card").count() == 8
        # older rounds and older cards come on demand, below what is shown
        page.locator("#timeline-older a.older").click()
        page.wait_for_function("() => document.body.dataset.older === '1'", timeout=WAIT_MS)
        page.locator("#cards-older a.older").click()
        page.wait_for_function("() => document.body.dataset.older === '2'", timeout=WAIT_MS)
        assert page.locator("#timeline-older li.round-block").count() == 10
        older = page.locator("#timeline-older .round-head").all_inner_texts()
        assert [h.split()[1] for h in older] == [str(r) for r in range(83, 73, -1)]
        assert page.locator("article.card").count() == 16
        page.screenshot(path=str(tmp_path / "turns31.png"))
    print(f"\n31 turns, 93 rounds: the page is {height:,} px high")
    assert height < 12_000
