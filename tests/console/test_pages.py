"""Paging a long session: the pure page selection (every part reached once, in order, from any
page), the query a URL may carry, and a 10,000-round session's page through the app: small,
newest first, its older pages joining up, turned without reading the log again."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from stowage.console import StoreReader, create_app
from stowage.console._chart import MAX_POINTS
from stowage.console._pages import PAGE_CARDS, PAGE_ROUNDS, page_query, round_blocks, select
from stowage.core import CompactionRecord, ItemRecord, Lineage, LogRead, UserMessage
from stowage.storage import JsonlStore

from .longlog import long_session

pytestmark = pytest.mark.timeout(180)

starts_strategy = st.lists(st.integers(1, 10_000), unique=True, max_size=80).map(sorted)


@given(starts=starts_strategy, size=st.integers(1, 12))
def test_walking_older_pages_from_the_newest_reaches_every_part_once_in_order(
    starts: list[int], size: int
) -> None:
    seen: list[int] = []
    page = select(starts, before=None, since=None, size=size)
    assert page.newest and page.stop == len(starts)
    while True:
        assert 0 <= page.stop - page.start <= size
        seen[:0] = starts[page.start : page.stop]
        if not page.older:
            break
        page = select(starts, before=starts[page.start], since=None, size=size)
        assert page.older == page.start and not page.newest
    assert seen == starts


@given(starts=starts_strategy, size=st.integers(1, 12), data=st.data())
def test_a_refresh_from_a_part_shows_every_part_from_it_on(
    starts: list[int], size: int, data: st.DataObject
) -> None:
    if not starts:
        return
    anchor = data.draw(st.sampled_from(starts))
    page = select(starts, before=None, since=anchor, size=size)
    assert page.newest and page.stop == len(starts)
    if len(starts) - starts.index(anchor) <= 20 * size:
        assert starts[page.start] == anchor
    # a start no part has (the log was rewound past it): the newest page instead
    if anchor + 1 not in starts:
        missing = select(starts, before=None, since=anchor + 1, size=size)
        assert missing == select(starts, before=None, since=None, size=size)


def test_the_query_takes_record_numbers_only_and_names_a_bad_one() -> None:
    assert page_query({"before": "40", "cards_from": "7", "part": "cards"}).before == 40
    for name, bad in [
        ("before", "<script>alert(1)</script>"),
        ("from", "-3"),
        ("cards_before", "1e9"),
        ("cards_from", "\u0661\u0662"),  # digits, but not ASCII ones
        ("before", "0"),
        ("part", "../../etc/passwd"),
    ]:
        with pytest.raises(ValueError, match=re.escape(name)):
            page_query({name: bad})


def test_a_round_block_runs_from_after_one_commit_through_the_next() -> None:
    records = long_session(3, per_turn=2, every=100)
    blocks = round_blocks(records)
    assert [b.round for b in blocks] == [1, 2, 3, None]
    assert blocks[0].first == 1
    assert all(a.last + 1 == b.first for a, b in itertools.pairwise(blocks))
    assert blocks[-1].last == records[-1].seq


class CountingReader(StoreReader):
    """A reader that counts the logs it read: turning pages must not read again."""

    reads: int = 0

    async def read(self, session_id: str) -> LogRead:
        self.reads += 1
        return await super().read(session_id)

    async def lineage(self, session_id: str) -> Lineage:
        self.reads += 1  # the session page reads its lineage (the cost counts every branch)
        return await super().lineage(session_id)


def _rounds_on(html: str) -> list[int]:
    return [int(r) for r in re.findall(r'<div class="round-head">round (\d+) ', html)]


async def _long_store(tmp_path: Path, rounds: int) -> Path:
    store = JsonlStore(tmp_path / f"store-{rounds}")
    await store.create("long", long_session(rounds, spikes=(7, rounds // 2)))
    await store.aclose()
    return tmp_path / f"store-{rounds}"


async def _timed_get(client: httpx.AsyncClient, url: str) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await client.get(url)
    return response, time.perf_counter() - started


async def test_a_10000_round_session_shows_its_newest_rounds_small_and_pages_back(
    tmp_path: Path,
) -> None:
    sizes: dict[int, int] = {}
    for rounds in (100, 10_000):
        root = await _long_store(tmp_path, rounds)
        reader = CountingReader(JsonlStore(root))
        transport = httpx.ASGITransport(app=create_app(reader, store_label="test"))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                page, first_time = await _timed_get(c, "/s/long")
                assert page.status_code == 200
                sizes[rounds] = len(page.content)
                drawn = page.text.count('<circle class="point')
                assert (
                    drawn == rounds
                    if rounds <= MAX_POINTS
                    else MAX_POINTS // 2 < drawn <= MAX_POINTS
                )
                # newest first: the last round on top, PAGE_ROUNDS of them
                shown = _rounds_on(page.text)
                assert shown == list(range(rounds, rounds - PAGE_ROUNDS, -1))
                compactions = (rounds // 20) + sum(r % 20 != 0 for r in (7, rounds // 2))
                assert page.text.count('<article class="card') == min(compactions, PAGE_CARDS)
                # older pages, a link at a time, join up with no round twice or missing
                link = re.search(r'href="(/s/long\?before=\d+)"', page.text)
                walked, older_time = shown, 0.0
                for _ in range(3):
                    assert link, "no link to the older rounds"
                    older, took = await _timed_get(c, link.group(1) + "&part=timeline")
                    older_time = max(older_time, took)
                    assert older.status_code == 200
                    assert "<html" not in older.text  # only the section's entries and link
                    more = _rounds_on(older.text)
                    assert more == list(range(walked[-1] - 1, walked[-1] - 1 - PAGE_ROUNDS, -1))
                    walked = walked + more
                    link = re.search(r'href="(/s/long\?before=\d+)"', older.text)
                assert reader.reads == 1, "turning pages read the log again"
        finally:
            await reader.store.aclose()
        print(
            f"\n{rounds:,} rounds: page {sizes[rounds]:,} bytes in {first_time:.2f} s "
            f"(read and fold once); an older page in {older_time * 1000:.0f} ms"
        )
    # the page's size does not grow with the log: ten rounds, eight cards, a bounded chart
    assert sizes[10_000] < 150_000


async def test_a_live_refresh_from_the_first_shown_round_keeps_every_round_after_it(
    tmp_path: Path,
) -> None:
    root = await _long_store(tmp_path, 40)
    writer = JsonlStore(root)
    reader = StoreReader(JsonlStore(root))
    transport = httpx.ASGITransport(app=create_app(reader, store_label="test", poll=0))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            page = (await c.get("/s/long")).text
            anchor = re.search(r'<ol class="timeline" id="timeline" data-from="(\d+)"', page)
            assert anchor, page
            shown = _rounds_on(page)
            last = long_session(40, spikes=(7, 20))[-1].seq
            await writer.acquire("long")
            await writer.append(
                "long", [ItemRecord(seq=last + 1, item=UserMessage(text="one more thing"))]
            )
            fresh = (await c.get(f"/s/long?fragment=1&from={anchor.group(1)}")).text
            assert f'data-from="{anchor.group(1)}"' in fresh
            assert _rounds_on(fresh) == shown
            assert "since the last committed round" in fresh and "one more thing" in fresh
            # an anchor no round starts at: the newest page, with its own anchor
            other = (await c.get("/s/long?fragment=1&from=3")).text
            assert _rounds_on(other) == shown
            assert 'data-from="3"' not in other
    finally:
        await writer.aclose()
        await reader.store.aclose()


async def test_compaction_cards_come_a_page_at_a_time_newest_first(tmp_path: Path) -> None:
    root = await _long_store(tmp_path, 400)  # a compaction every 20 rounds and two spikes
    reader = StoreReader(JsonlStore(root))
    transport = httpx.ASGITransport(app=create_app(reader, store_label="test"))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            page = (await c.get("/s/long")).text
            numbers = [int(n) for n in re.findall(r"<h3>Compaction #(\d+) ", page)]
            total = sum(isinstance(r, CompactionRecord) for r in long_session(400, spikes=(7, 200)))
            assert numbers == list(range(total, total - PAGE_CARDS, -1))
            link = re.search(r'href="(/s/long\?cards_before=\d+)"', page)
            assert link
            older = (await c.get(link.group(1) + "&part=cards")).text
            more = [int(n) for n in re.findall(r"<h3>Compaction #(\d+) ", older)]
            assert more == list(range(numbers[-1] - 1, numbers[-1] - 1 - PAGE_CARDS, -1))
    finally:
        await reader.store.aclose()


async def test_without_script_older_pages_are_whole_pages_and_a_ring_links_to_any_card(
    tmp_path: Path,
) -> None:
    root = await _long_store(tmp_path, 400)  # spikes at rounds 7 and 200
    reader = StoreReader(JsonlStore(root))
    transport = httpx.ASGITransport(app=create_app(reader, store_label="test"))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            page = (await c.get("/s/long")).text
            link = re.search(r'href="(/s/long\?before=(\d+))"', page)
            assert link
            older = (await c.get(link.group(1))).text
            assert "<html" in older and 'href="/s/long">back to the newest</a>' in older
            assert _rounds_on(older) == list(range(390, 380, -1))
            # an older page is not the newest: a live refresh does not anchor it
            assert '<ol class="timeline" id="timeline">' in older
            # round 7's ring links to compaction #1, on the page of cards that starts with it
            ring = re.search(
                r'<a class="over" data-round="7" data-card="(\d+)" href="([^"]+)"', page
            )
            assert ring, page
            seq, href = ring.groups()
            assert href == f"/s/long?cards_before={int(seq) + 1}#card-{seq}"
            target = (await c.get(href.split("#")[0])).text
            first_card = re.search(r'<article class="card[^"]*" id="card-(\d+)"', target)
            assert first_card and first_card.group(1) == seq
    finally:
        await reader.store.aclose()
