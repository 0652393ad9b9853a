"""Fork and rewind: a fork starts from its parent's log without copying it, a rewind leaves a
discarded branch behind, and either way replay, resume and every request are what a plain log
of the same history gives, on every store."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import anyio
import pytest
from stowage import Runtime, Settings
from stowage.console import session_view
from stowage.core import (
    CompactionRecord,
    ConfigError,
    ForkedFromRecord,
    InvalidSessionId,
    LogStore,
    Record,
    RewindRecord,
    RoundCommittedRecord,
    SessionExists,
    SessionNotFound,
    effective_records,
    lineage_store,
    replay,
    round_end,
)
from stowage.policy import check_log, check_requests
from stowage.storage import (
    JsonlStore,
    PostgresStore,
    SqliteStore,
    decode_record,
    encode_record,
)
from stowage.testing import ScriptedModel

PG_DSN = os.environ.get("STOWAGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

StoreFactory = Callable[[], LogStore]


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens a fresh handle on one store (a runtime closes the store it is given)."""
    if request.param == "jsonl":
        yield lambda: JsonlStore(tmp_path / "logs")
    elif request.param == "sqlite":
        yield lambda: SqliteStore(tmp_path / "logs.db")
    else:
        schema = request.getfixturevalue("pg_schema")
        yield lambda: PostgresStore(PG_DSN, schema=schema)


def _settings(tmp_path: Path) -> Settings:
    # a small threshold: the scripted model's turns compact every few rounds
    return Settings(store=tmp_path, workspace=Path(__file__).parent, compact_threshold=1500)


def _runtime(tmp_path: Path, store: LogStore, model: ScriptedModel | None = None) -> Runtime:
    return Runtime(_settings(tmp_path), store=store, gateway=model or ScriptedModel(tool_rounds=2))


async def _raw(store: LogStore, session_id: str) -> list[bytes]:
    """The session's own log as stored, line by line."""
    return [encode_record(r) for r in (await store.read(session_id, repair=False)).records]


async def _lineage(store: LogStore, session_id: str) -> tuple[Record, ...]:
    return (await lineage_store(store).read(session_id, repair=False)).records


async def _tail(store: LogStore, session_id: str) -> tuple[Record, ...]:
    return (await lineage_store(store).read_tail(session_id, repair=False)).records


def _assert_sound(session_id: str, full: Sequence[Record], tail: Sequence[Record]) -> None:
    report = check_log(session_id, full, tail)
    assert report.ok, report.problems
    requests = check_requests(session_id, full)
    assert requests.ok, requests.problems
    assert requests.checked >= 1


# -- records and pure functions -----------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "type_name"),
    [
        (ForkedFromRecord(seq=1, parent_id="p", through_seq=26, through_round=5), "forked_from"),
        (RewindRecord(seq=57, to_round=3, to_seq=14), "rewind"),
    ],
)
def test_lineage_records_round_trip_through_the_codec(record: Record, type_name: str) -> None:
    line = encode_record(record)
    assert f'"type":"{type_name}"'.encode() in line
    decoded = decode_record(line)
    assert decoded == record and type(decoded) is type(record) and decoded.ts == record.ts


def test_a_rewind_record_missing_its_seq_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="rewind record lacks field 'to_seq'"):
        decode_record(b'{"v":1,"seq":3,"ts":"t","type":"rewind","to_round":1}')


def test_effective_records_leave_out_each_discarded_branch() -> None:
    """Two rewinds, the second into what the first kept: each drops only its own branch."""
    from stowage.core import ErrorRecord

    records: list[Record] = [ErrorRecord(seq=s, kind="k", message="m") for s in range(1, 11)]
    records.append(RewindRecord(seq=11, to_round=1, to_seq=5))
    records += [ErrorRecord(seq=s, kind="k", message="m") for s in range(12, 16)]
    records.append(RewindRecord(seq=16, to_round=2, to_seq=13))
    records.append(ErrorRecord(seq=17, kind="k", message="m"))
    kept = [r.seq for r in effective_records(records)]
    assert kept == [1, 2, 3, 4, 5, 11, 12, 13, 16, 17]
    assert [r.seq for r in effective_records(effective_records(records))] == kept


def test_a_rewind_folded_over_its_own_branch_is_a_corrupt_log() -> None:
    """Live state cannot give records back: applying a rewind after its branch is refused."""
    from stowage.core import CorruptLogError, ErrorRecord, SessionState

    state = SessionState(session_id="s")
    for seq in range(1, 5):
        state.apply(ErrorRecord(seq=seq, kind="k", message="m"))
    with pytest.raises(CorruptLogError, match="rewind to seq 2 folded after seq 4"):
        state.apply(RewindRecord(seq=5, to_round=1, to_seq=2))


# -- fork -------------------------------------------------------------------------------------


async def test_fork_leaves_the_parent_byte_identical_and_the_child_resumes_as_replayed(
    tmp_path: Path, new_store: StoreFactory
) -> None:
    with anyio.fail_after(60):
        async with _runtime(tmp_path, new_store()) as rt:
            for turn in range(3):
                await rt.send("p", f"turn {turn}: list and read files")
        reader = new_store()
        try:
            parent_before = await _raw(reader, "p")
            parent = await _lineage(reader, "p")
        finally:
            await reader.aclose()
        through_seq, _ = round_end("p", parent, 5)

        async with _runtime(tmp_path, new_store()) as rt:
            child = await rt.fork("p", at_round=5)
            assert child.id == "p-fork-1"
            forked_history = child.history
            # the child starts as a fresh replay of the parent's log cut at the round's end
            cut = replay("p", [r for r in parent if r.seq <= through_seq])
            assert forked_history == cut.items
            assert child.state.protected == cut.protected
            result = await child.send("and now something else")
            assert result.stopped == "answered"
            live = child.history
        reader = new_store()
        try:
            assert await _raw(reader, "p") == parent_before
            own = (await reader.read("p-fork-1", repair=False)).records
            full = await _lineage(reader, "p-fork-1")
            tail = await _tail(reader, "p-fork-1")
        finally:
            await reader.aclose()
        # nothing of the parent is copied: the child's log opens with where it came from
        assert own[0] == ForkedFromRecord(
            seq=1, parent_id="p", through_seq=through_seq, through_round=5
        )
        assert not any(isinstance(r, RoundCommittedRecord) and r.round <= 5 for r in own)
        assert replay("p-fork-1", full).items == live
        assert replay("p-fork-1", tail).items == live
        _assert_sound("p-fork-1", full, tail)


async def test_a_fork_sends_the_request_its_parent_would_have_sent(tmp_path: Path) -> None:
    """Fork at the newest round, then the same message to both: the same request input."""
    with anyio.fail_after(60):
        model = ScriptedModel(tool_rounds=2)
        async with _runtime(tmp_path, JsonlStore(tmp_path / "logs"), model) as rt:
            parent = await rt.open("p")
            for turn in range(2):
                await parent.send(f"turn {turn}: list and read files")
            child = await parent.fork(new_id="twin")
            assert child.history == parent.history
            model.requests.clear()
            await parent.send("what next?")
            from_parent = model.requests[0]
            model.requests.clear()
            await child.send("what next?")
            from_child = model.requests[0]
        assert from_child.input == from_parent.input
        assert from_child.tools == from_parent.tools


async def test_a_fork_of_a_fork_reads_both_ancestors(
    tmp_path: Path, new_store: StoreFactory
) -> None:
    with anyio.fail_after(60):
        async with _runtime(tmp_path, new_store()) as rt:
            for turn in range(2):
                await rt.send("root", f"turn {turn}: list and read files")
            child = await rt.fork("root", new_id="child")
            await child.send("child turn: list and read files")
            grandchild = await child.fork(at_round=child.state.round, new_id="grandchild")
            assert grandchild.history == child.history
            await grandchild.send("grandchild turn")
            live = grandchild.history
        # a new runtime resumes it from the stores alone
        async with _runtime(tmp_path, new_store()) as rt:
            resumed = await rt.resume("grandchild")
            assert resumed.history == live
        reader = new_store()
        try:
            own = (await reader.read("grandchild", repair=False)).records
            full = await _lineage(reader, "grandchild")
            tail = await _tail(reader, "grandchild")
        finally:
            await reader.aclose()
        assert isinstance(own[0], ForkedFromRecord) and own[0].parent_id == "child"
        assert replay("grandchild", full).items == live
        _assert_sound("grandchild", full, tail)


async def test_a_fork_after_compactions_resumes_from_the_parents_compaction(
    tmp_path: Path, new_store: StoreFactory
) -> None:
    """The child's first tail starts at the parent's newest compaction before the fork point;
    once the child compacts on its own, its tail starts there."""
    with anyio.fail_after(90):
        async with _runtime(tmp_path, new_store()) as rt:
            for turn in range(4):
                await rt.send("p", f"turn {turn}: list and read files")
            parent_compactions = rt.sessions["p"].state.compactions
            await rt.fork("p", new_id="c")
        assert parent_compactions >= 2
        reader = new_store()
        try:
            parent = await _lineage(reader, "p")
            tail = await _tail(reader, "c")
        finally:
            await reader.aclose()
        newest = [r for r in parent if isinstance(r, CompactionRecord)][-1]
        assert tail[0].seq == 1
        assert min(r.seq for r in tail[1:]) == newest.covers_through + 1
        assert newest in tail

        async with _runtime(tmp_path, new_store()) as rt:
            child = await rt.resume("c")
            before = child.state.compactions
            for turn in range(3):
                await child.send(f"child turn {turn}: list and read files")
            assert child.state.compactions > before
            live = child.history
        reader = new_store()
        try:
            own = (await reader.read("c", repair=False)).records
            full = await _lineage(reader, "c")
            tail = await _tail(reader, "c")
        finally:
            await reader.aclose()
        own_compaction = [r for r in own if isinstance(r, CompactionRecord)][-1]
        lineage_compaction = [r for r in full if isinstance(r, CompactionRecord)][-1]
        # written in the child's log at its own line, found in the lineage renumbered
        assert lineage_compaction.summary == own_compaction.summary
        assert isinstance(own[0], ForkedFromRecord)
        assert lineage_compaction.seq == own_compaction.seq + own[0].through_seq
        assert min(r.seq for r in tail[1:]) == lineage_compaction.covers_through + 1
        assert replay("c", tail).items == replay("c", full).items == live
        _assert_sound("c", full, tail)


async def test_a_fork_is_refused_for_a_missing_session_or_round(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with _runtime(tmp_path, JsonlStore(tmp_path / "logs")) as rt:
            await rt.send("p", "hello")
            with pytest.raises(SessionNotFound):
                await rt.fork("nobody")
            with pytest.raises(ConfigError, match="session p has no committed round 99: its"):
                await rt.fork("p", at_round=99)
            with pytest.raises(InvalidSessionId):
                await rt.fork("p", new_id="no/slash")
            await rt.fork("p", new_id="taken")
            with pytest.raises(SessionExists):
                await rt.fork("p", new_id="taken")
            assert (await rt.fork("p")).id == "p-fork-1"
            assert (await rt.fork("p")).id == "p-fork-2"
            assert sorted(await rt.store.list_sessions()) == ["p", "p-fork-1", "p-fork-2", "taken"]


# -- rewind -----------------------------------------------------------------------------------


async def test_rewind_then_continue_replays_as_the_cut_log(
    tmp_path: Path, new_store: StoreFactory
) -> None:
    with anyio.fail_after(90):
        async with _runtime(tmp_path, new_store()) as rt:
            for turn in range(3):
                await rt.send("r", f"turn {turn}: list and read files")
            before = await _lineage(rt.store, "r")
            rewind = await rt.rewind("r", to_round=3)
            session = await rt.open("r")
            cut = [r for r in before if r.seq <= rewind.to_seq]
            assert session.history == replay("r", cut).items
            assert session.state.round == 3
            await session.send("a different second turn")
            live = session.history
        reader = new_store()
        try:
            raw = (await reader.read("r", repair=False)).records
            full = await _lineage(reader, "r")
            tail = await _tail(reader, "r")
        finally:
            await reader.aclose()
        # the discarded branch stays in the log, and the fold skips it
        assert [encode_record(r) for r in raw[: len(before)]] == [encode_record(r) for r in before]
        assert raw[len(before)] == rewind
        after = [r for r in raw if r.seq > rewind.seq]
        assert replay("r", full).items == replay("r", [*cut, rewind, *after]).items == live
        assert replay("r", raw).items == live
        _assert_sound("r", full, tail)
        # the console folds the log as replay does: no error, nothing of the branch shown
        view = session_view("r", raw)
        assert view.errors == ()
        shown = {entry.seq for entry in view.timeline}
        assert shown and not shown & {r.seq for r in raw if rewind.to_seq < r.seq < rewind.seq}


async def test_rewind_to_before_a_compaction(tmp_path: Path, new_store: StoreFactory) -> None:
    with anyio.fail_after(90):
        async with _runtime(tmp_path, new_store()) as rt:
            for turn in range(3):
                await rt.send("r", f"turn {turn}: list and read files")
            assert rt.sessions["r"].state.compactions >= 1
            before = await _lineage(rt.store, "r")
            first = next(r for r in before if isinstance(r, CompactionRecord))
            rewind = await rt.rewind("r", to_round=2)
            assert rewind.to_seq < first.seq
        async with _runtime(tmp_path, new_store()) as rt:
            session = await rt.resume("r")
            assert session.state.compactions == 0
            cut = [r for r in before if r.seq <= rewind.to_seq]
            assert session.history == replay("r", cut).items
            await session.send("start again: list and read files")
            live = session.history
        reader = new_store()
        try:
            full = await _lineage(reader, "r")
            tail = await _tail(reader, "r")
        finally:
            await reader.aclose()
        assert replay("r", tail).items == live
        _assert_sound("r", full, tail)


async def test_a_rewind_of_a_fork_into_its_parents_rounds(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with _runtime(tmp_path, SqliteStore(tmp_path / "logs.db")) as rt:
            for turn in range(2):
                await rt.send("p", f"turn {turn}: list and read files")
            child = await rt.fork("p", new_id="c")
            await child.send("child turn")
            parent = await _lineage(rt.store, "p")
            rewind = await rt.rewind("c", to_round=2)
            resumed = await rt.open("c")
            assert (
                resumed.history == replay("p", [r for r in parent if r.seq <= rewind.to_seq]).items
            )
            await resumed.send("again")
            full = await _lineage(rt.store, "c")
            tail = await _tail(rt.store, "c")
            assert replay("c", tail).items == resumed.history
        _assert_sound("c", full, tail)


async def test_a_rewind_is_refused_for_a_round_not_committed_or_the_current_end(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        async with _runtime(tmp_path, JsonlStore(tmp_path / "logs")) as rt:
            await rt.send("r", "hello")
            last = rt.sessions["r"].state.round
            with pytest.raises(ConfigError, match="already ends at round"):
                await rt.rewind("r", to_round=last)
            with pytest.raises(ConfigError, match="no committed round 40"):
                await rt.rewind("r", to_round=40)
            with pytest.raises(SessionNotFound):
                await rt.rewind("nobody", to_round=1)
