"""The console app on each store, through a real ASGI client: pages, figures, escaping, change
detection, and that reading changes nothing."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from stowage.console import StoreReader, create_app
from stowage.core import (
    CompactionRecord,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    ItemRecord,
    LogStore,
    ProtectedRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SystemMessage,
    TurnRecord,
    Usage,
    UserMessage,
)
from stowage.storage import JsonlStore, PostgresStore, SqliteStore

from ..conftest import PG_DSN
from .conftest import HOSTILE

pytestmark = pytest.mark.timeout(60)


def records() -> list[Record]:
    """A session with a user constraint, two rounds (one output hostile markup) and a compaction."""
    system = SystemMessage(text="be brief")
    return [
        SessionRecord(seq=1, model="scripted", context_window=6000),
        ItemRecord(seq=2, item=system),
        ProtectedRecord(seq=3, ops=({"op": "add_constraint", "id": "c1", "text": "never delete files"},)),
        ItemRecord(seq=4, item=UserMessage(text="start")),
        TurnRecord(seq=5, turn=1, phase="started"),
        ItemRecord(seq=6, round=1, item=FunctionCall(call_id="c1", name="read_file", arguments="{}")),
        ItemRecord(seq=7, round=1, item=FunctionCallOutput(call_id="c1", output=HOSTILE)),
        RoundCommittedRecord(
            seq=8, round=1, first_seq=7, last_seq=8,
            usage=Usage(input_tokens=2900, output_tokens=100, total_tokens=3000, cached_tokens=1200),
        ),
        CompactionRecord(
            seq=9, summary="goal: start <i>now</i>", covers_through=8,
            retained=(HistoryEntry(seq=2, item=system), HistoryEntry(seq=4, item=UserMessage(text="start"))),
            reason="3000 tokens at or above the compact mark", tokens_before=3000, tokens_after=700,
            removed=3, round=1, turn=1,
        ),
    ]  # fmt: skip


def _digest(path: Path) -> dict[str, str]:
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
async def store_and_reader(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[LogStore, StoreReader, Path | None]]:
    """A store written through its own API, and a second store object the console reads with."""
    kind = request.param
    if kind == "jsonl":
        writer: LogStore = JsonlStore(tmp_path / "store")
        reader_store: LogStore = JsonlStore(tmp_path / "store")
        watched: Path | None = tmp_path / "store"
        sqlite_path = None
    elif kind == "sqlite":
        writer = SqliteStore(tmp_path / "s.db")
        reader_store = SqliteStore(tmp_path / "s.db")
        watched, sqlite_path = tmp_path / "s.db", str(tmp_path / "s.db")
    else:
        schema = await _pg_schema()
        writer = PostgresStore(PG_DSN, schema=schema)
        reader_store = PostgresStore(PG_DSN, schema=schema)
        watched, sqlite_path = None, None
    await writer.create("s1", records())
    try:
        yield writer, StoreReader(reader_store, sqlite_path=sqlite_path), watched
    finally:
        await reader_store.aclose()
        await writer.aclose()
        if kind == "postgres":
            conn = await asyncpg.connect(PG_DSN, timeout=3)
            try:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            finally:
                await conn.close()


async def _pg_schema() -> str:
    """A fresh schema name, once PostgreSQL answers (as tests/conftest.py's ``pg_schema``)."""
    try:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL at {PG_DSN} under CI: {exc}")
        pytest.skip(f"no PostgreSQL at {PG_DSN}: {exc}")
    await conn.close()
    return f"stowage_test_{secrets.token_hex(6)}"


async def _get(reader: StoreReader, url: str) -> httpx.Response:
    app = create_app(reader, store_label="test")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.get(url)


async def test_every_store_shows_the_session_its_figures_and_escapes_text(
    store_and_reader: tuple[LogStore, StoreReader, Path | None],
) -> None:
    _, reader, _ = store_and_reader
    listing = await _get(reader, "/")
    assert listing.status_code == 200
    row = re.search(r"<tr data-session=\"s1\"[^>]*>(.*?)</tr>", listing.text, re.S)
    assert row, listing.text
    assert '<td class="n compactions">1</td>' in row.group(1)
    # the writer store still holds the lease create took: leased, and by whom
    assert '<span class="state state-leased">leased</span>' in row.group(1)
    assert f"by pid {os.getpid()} on " in row.group(1)
    page = await _get(reader, "/s/s1")
    assert page.status_code == 200
    body = page.text
    assert 'data-testid="compactions-count">1<' in body
    assert '<span class="before">3,000</span>' in body
    assert '<span class="after">700</span>' in body
    assert re.search(r"cached input</div><div class=\"value\">1,200<", body)
    assert '<span class="removed">3</span> / <span class="retained">2</span>' in body
    # model and tool text is escaped, never markup
    assert "<script>window.__pwned" not in body
    assert "&lt;script&gt;window.__pwned" in body
    assert "goal: start &lt;i&gt;now&lt;/i&gt;" in body
    # protected state with its id and who set it
    assert re.search(
        r"<td>c1</td><td>constraint</td><td>\[c1\] never delete files</td><td>user</td>", body
    )


async def test_a_missing_session_and_a_bad_id_are_answered_without_reading(
    store_and_reader: tuple[LogStore, StoreReader, Path | None],
) -> None:
    _, reader, _ = store_and_reader
    missing = await _get(reader, "/s/nope")
    assert missing.status_code == 404 and "No session nope" in missing.text
    bad = await _get(reader, "/s/..%2Fetc")
    assert bad.status_code in (400, 404)
    assert bad.headers["content-type"].startswith("text/plain")


async def test_the_fingerprint_moves_on_append_and_reading_writes_nothing(
    store_and_reader: tuple[LogStore, StoreReader, Path | None],
) -> None:
    writer, reader, watched = store_and_reader
    before = await reader.fingerprint()
    digest = _digest(watched) if watched else None
    assert (await _get(reader, "/s/s1")).status_code == 200
    assert (await _get(reader, "/")).status_code == 200
    assert await reader.fingerprint() == before
    if watched:
        assert _digest(watched) == digest, "the console wrote to the store"
    await writer.append("s1", [ItemRecord(seq=10, item=UserMessage(text="more"))])
    assert await reader.fingerprint() != before


async def test_a_request_for_another_host_name_is_refused(
    store_and_reader: tuple[LogStore, StoreReader, Path | None],
) -> None:
    """A page elsewhere that rebinds its name to 127.0.0.1 cannot read the console."""
    _, reader, _ = store_and_reader
    app = create_app(reader, store_label="test")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://evil.example") as client:
        refused = await client.get("/s/s1")
    assert refused.status_code == 400
    assert "pwned" not in refused.text
