"""The console's cost tile and each compaction card's cost line, through a real ASGI client:
the figures of ``stowage cost``, and a price's reason escaped like any other text."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from stowage.console import StoreReader, create_app
from stowage.core import (
    CompactionRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    Usage,
)
from stowage.policy import CustomPrice, Prices, session_cost
from stowage.storage import JsonlStore

from .conftest import HOSTILE

pytestmark = pytest.mark.timeout(60)

PRICES = Prices(
    custom={"house": CustomPrice(input=Decimal(2), output=Decimal(8), cached_input=Decimal(1))},
    table=False,
)


def usage(input_tokens: int, cached: int = 0, output: int = 100) -> Usage:
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        total_tokens=input_tokens + output,
        cached_tokens=cached,
    )


def records(model: str = "house") -> list[Record]:
    def committed(seq: int, round_: int, used: Usage, resumed: bool = False) -> Record:
        return RoundCommittedRecord(
            seq=seq, round=round_, usage=used, first_seq=seq, last_seq=seq, resumed=resumed
        )

    return [
        SessionRecord(seq=1, model=model, context_window=60_000),
        committed(2, 1, usage(40_000, cached=30_000)),
        CompactionRecord(
            seq=3, summary="s", covers_through=2, retained=(), reason="r", tokens_before=40_000,
            tokens_after=8_000, removed=3, round=1, usage=usage(40_000, cached=30_000, output=900),
        ),
        committed(4, 2, usage(9_000, cached=1_000)),
        committed(5, 3, usage(10_000, cached=8_960), resumed=True),
    ]  # fmt: skip


async def page(tmp_path: Path, model: str, prices: Prices | None) -> str:
    store = JsonlStore(tmp_path / "store")
    await store.create("c1", records(model))
    await store.aclose()
    reader = StoreReader(JsonlStore(tmp_path / "store"))
    app = create_app(reader, store_label="test", prices=prices)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        got = await client.get("/s/c1")
    assert got.status_code == 200
    return got.text


async def test_the_cost_tile_and_cards_show_the_figures_of_stowage_cost(tmp_path: Path) -> None:
    body = await page(tmp_path, "house", PRICES)
    report = session_cost(records(), PRICES)
    assert report.usd is not None
    assert f'data-usd="{report.usd}">${report.usd:.4f}<' in body
    assert f"{len(report.requests)} requests" in body
    assert "1 resume, the last 90% cached" in body
    (compaction,) = report.compactions
    assert f"summary ${compaction.usd:.4f}" in body
    assert f"over the 2 rounds after it saved ${compaction.usd_saved:.4f}" in body


async def test_without_prices_there_is_no_cost_tile(tmp_path: Path) -> None:
    body = await page(tmp_path, "house", None)
    assert 'data-testid="cost"' not in body and 'class="cost"' not in body


async def test_an_unknown_price_says_why_and_its_text_is_escaped(tmp_path: Path) -> None:
    body = await page(tmp_path, HOSTILE, PRICES)
    assert 'data-usd="">unknown<' in body
    assert "<script>window.__pwned" not in body
    assert "&lt;script&gt;window.__pwned" in body and "[prices." in body
