"""Every store narrows a search of one session's log where the log is stored, keeps every
record that holds the words (compacted or not), honours its deadline, and says how far it got.

Runs on a JSONL directory, a SQLite file and PostgreSQL (``pg_schema``: skipped without a
server, as the contract suite).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from stowage.core import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    LogRead,
    Record,
    SessionNotFound,
    UserMessage,
)
from stowage.storage import JsonlStore, LogStore, PostgresStore, SqliteStore
from stowage.storage._search import (
    WINDOW,
    SearchableStore,
    like_patterns,
    pushdown_words,
    search_records,
)
from stowage.storage.contract import compaction, round_records, session_start

from tests.conftest import PG_DSN

FAR = 1e18  # a deadline that never passes
FACT = "the staging database password rotates every 17 days (ticket OPS-4411)"


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], LogStore]:
    """Makes the store under test (each test closes it through ``opened``)."""
    if request.param == "jsonl":
        return lambda: JsonlStore(tmp_path / "logs", durability="none")
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "logs.db", durability="none")
    schema = request.getfixturevalue("pg_schema")
    return lambda: PostgresStore(PG_DSN, schema=schema, max_size=2)


@asynccontextmanager
async def opened(make: Callable[[], LogStore], seconds: float = 20) -> AsyncIterator[LogStore]:
    """The store, closed afterwards; the block fails after ``seconds``."""
    store = make()
    try:
        with anyio.fail_after(seconds):
            yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


def planted_log(rounds: int = 6) -> list[Record]:
    """A log whose seq 4 user message holds ``FACT``, then ``rounds`` rounds, a compaction
    that absorbed all of it, and one more round."""
    records: list[Record] = [*session_start(), ItemRecord(seq=4, item=UserMessage(text=FACT))]
    for n in range(1, rounds + 1):
        records += round_records(len(records) + 1, n)
    records.append(compaction(len(records) + 1, covers_through=len(records), round_number=rounds))
    records += round_records(len(records) + 1, rounds + 1)
    return records


async def write(store: LogStore, session_id: str, records: Sequence[Record]) -> None:
    await store.create(session_id, records[:3])
    await store.append(session_id, records[3:])


async def test_a_compacted_fact_is_found_with_its_seq_on_every_store(
    make_store: Callable[[], LogStore],
) -> None:
    async with opened(make_store) as store:
        records = planted_log()
        await write(store, "s1", records)
        found = await search_records(store, "s1", ("ROTATES", "ops-4411"), deadline=FAR)
    assert isinstance(store, SearchableStore)  # each store narrows where its rows are
    assert [r.seq for r in found.records] == [4]
    assert found.records[0] == records[3]
    assert found.complete and found.searched_through == records[-1].seq


async def test_every_record_holding_the_words_is_kept_and_only_item_records(
    make_store: Callable[[], LogStore],
) -> None:
    """'round' is in every assistant answer and, as a key or a value, in other records'
    lines: all the answers come back (a superset is allowed), and never a non-item record."""
    async with opened(make_store) as store:
        records = planted_log(rounds=4)
        await write(store, "s1", records)
        found = await search_records(store, "s1", ("round",), deadline=FAR)
    answers = {r.seq for r in records if isinstance(r, ItemRecord) and "round" in _text(r)}
    assert answers <= {r.seq for r in found.records}
    assert all(isinstance(r, ItemRecord) for r in found.records)


async def test_words_a_store_cannot_match_on_its_lines_are_left_to_the_tool(
    make_store: Callable[[], LogStore],
) -> None:
    """Non-ASCII and quoted words are not pushed down: the records holding them still come
    back (with the rest of the log's items), never dropped by the store."""
    async with opened(make_store) as store:
        records = [
            *session_start(),
            ItemRecord(seq=4, item=UserMessage(text='Le CAFÉ "noir" est prêt')),
            ItemRecord(seq=5, item=AssistantMessage(text="ok")),
        ]
        await write(store, "s1", records)
        found = await search_records(store, "s1", ("café", '"noir"'), deadline=FAR)
    assert 4 in {r.seq for r in found.records}


async def test_like_wildcards_in_a_query_are_literal(make_store: Callable[[], LogStore]) -> None:
    async with opened(make_store) as store:
        records = [
            *session_start(),
            ItemRecord(seq=4, item=UserMessage(text="a discount of 50xxoff")),
            ItemRecord(seq=5, item=UserMessage(text="a discount of 50%_off")),
        ]
        await write(store, "s1", records)
        found = await search_records(store, "s1", ("50%_off",), deadline=FAR)
    assert [r.seq for r in found.records] == [5]


async def test_a_passed_deadline_stops_the_search_and_says_how_far_it_got(
    make_store: Callable[[], LogStore],
) -> None:
    """The first window (JSONL: the first 256 lines) is always searched; then the search
    stops and reports the last seq it looked at and that it is incomplete."""
    async with opened(make_store, 60) as store:
        records: list[Record] = list(session_start())
        while len(records) < WINDOW + 300:
            records += round_records(len(records) + 1, len(records))
        records.append(ItemRecord(seq=len(records) + 1, item=UserMessage(text=FACT)))
        await write(store, "s1", records)
        stopped = await search_records(store, "s1", ("ops-4411",), deadline=time.monotonic() - 1)
        whole = await search_records(store, "s1", ("ops-4411",), deadline=FAR)
    assert not stopped.complete
    assert stopped.searched_through == (256 if isinstance(store, JsonlStore) else WINDOW)
    assert stopped.records == ()  # the fact is the last record: not reached
    assert whole.complete and [r.seq for r in whole.records] == [records[-1].seq]


async def test_searching_a_missing_session_raises_session_not_found(
    make_store: Callable[[], LogStore],
) -> None:
    async with opened(make_store) as store:
        await write(store, "s1", planted_log())
        with pytest.raises(SessionNotFound, match="nope"):
            await search_records(store, "nope", ("x",), deadline=FAR)


class ReadOnly:
    """A store with no search of its own: only ``read``."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner

    async def read(self, session_id: str, *, repair: bool = True) -> LogRead:
        return await self.inner.read(session_id, repair=repair)


async def test_a_store_without_a_search_is_read_whole_and_narrowed_the_same_way(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(20):
        inner = JsonlStore(tmp_path, durability="none")
        records = planted_log()
        await write(inner, "s1", records)
        plain = ReadOnly(inner)
        assert not isinstance(plain, SearchableStore)
        found = await search_records(plain, "s1", ("rotates",), deadline=FAR)  # type: ignore[arg-type]
        await inner.aclose()
    assert [r.seq for r in found.records] == [4]
    assert found.complete and found.searched_through == records[-1].seq


def test_pushdown_keeps_printable_ascii_words_without_quotes_or_backslashes() -> None:
    assert pushdown_words(["Timeout", "café", 'say"hi', "a\\b", "x-1/y.z", "timeout"]) == (
        "timeout",
        "x-1/y.z",
    )


def test_like_patterns_escape_the_wildcards_and_the_escape() -> None:
    assert like_patterns(["50%_off", "plain"]) == ["%50\\%\\_off%", "%plain%"]


def _text(record: ItemRecord) -> str:
    item = record.item
    if isinstance(item, UserMessage | AssistantMessage):
        return item.text
    if isinstance(item, FunctionCall):
        return item.arguments
    if isinstance(item, FunctionCallOutput):
        return item.output
    return ""
