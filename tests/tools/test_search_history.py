"""``search_history`` finds what compaction took out of the context, by its words, with the
reference ``recall_artifact`` reads whole; it is offered with ``recall_artifact`` when
``search_history_tool`` is on, refuses an
empty query, keeps to its limit, its deadline and its size cap, and the summary request tells
the summarizer it exists."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
import pydantic
import pytest
from stowage import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    ModelRequest,
    ModelResponse,
    Runtime,
    Settings,
    ToolRegistry,
    UserMessage,
)
from stowage.actors._summarizer import SEARCH_NOTE, with_search_note
from stowage.core import ItemRecord, Record, ToolSpec
from stowage.model._brain import ScriptedBrain, is_summary_request, scripted_usage
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore, LogStore, PostgresStore, SqliteStore
from stowage.storage._search import search_records
from stowage.tools import SEARCH_TOOL, FoundRecords, execute_call, with_recall
from stowage.tools._recall import RECALL_TOOL, recall_tool
from stowage.tools._search_history import (
    MAX_LIMIT,
    OUTPUT_CHARS,
    SNIPPET_CHARS,
    best_hits,
    find_in_log,
    search_history_tool,
    snippet,
)

from tests.conftest import PG_DSN

FACT = "the staging database password rotates every 17 days (ticket OPS-4411)"
_REF = re.compile(r"\bR(\d+) \(")


# -- a scripted agent that searches ---------------------------------------------------------


class NoteArgs(pydantic.BaseModel):
    text: str = ""


def note_tools() -> ToolRegistry:
    """One tool of the session's own, so that the runtime offers recall (and search)."""

    async def note(args: NoteArgs) -> str:
        return "noted"

    return ToolRegistry(
        [FunctionTool(name="note", description="note", args_model=NoteArgs, fn=note)]
    )


class Searcher:
    """The scripted brain, but a user message ``find: TOPIC`` makes it call search_history
    with the words ``queries`` gives for TOPIC (the question itself holds none of them),
    then recall_artifact on the first user message found, then answer with what recall gave
    back."""

    def __init__(self, queries: dict[str, str]) -> None:
        self.inner = ScriptedBrain(tool_rounds=0)
        self.queries = queries

    def __call__(self, request: ModelRequest) -> ModelResponse:
        if is_summary_request(request):
            return self.inner(request)
        start = max(i for i, x in enumerate(request.input) if isinstance(x, UserMessage))
        user = request.input[start]
        assert isinstance(user, UserMessage)
        if not user.text.startswith("find: "):
            return self.inner(request)
        assert {t.name for t in request.tools} >= {SEARCH_TOOL, RECALL_TOOL}
        outputs = [i for i in request.input[start:] if isinstance(i, FunctionCallOutput)]
        items: tuple[AssistantMessage | FunctionCall, ...]
        if not outputs:
            query = {"query": self.queries[user.text.removeprefix("find: ")]}
            items = (FunctionCall(call_id="s", name=SEARCH_TOOL, arguments=json.dumps(query)),)
        elif len(outputs) == 1:
            ref = re.search(r"\bR(\d+) \(user message", outputs[0].output)
            assert ref is not None, outputs[0].output
            args = json.dumps({"ref": f"R{ref.group(1)}"})
            items = (FunctionCall(call_id="r", name=RECALL_TOOL, arguments=args),)
        else:
            items = (AssistantMessage(text=outputs[1].output),)
        return ModelResponse(items=items, usage=scripted_usage(request, items), model=request.model)


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], LogStore]:
    if request.param == "jsonl":
        return lambda: JsonlStore(tmp_path / "logs", durability="none")
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "logs.db", durability="none")
    schema = request.getfixturevalue("pg_schema")
    return lambda: PostgresStore(PG_DSN, schema=schema, max_size=4)


@asynccontextmanager
async def opened(make: Callable[[], LogStore]) -> AsyncIterator[LogStore]:
    store = make()
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


async def call(tools: ToolRegistry, name: str, **arguments: object) -> FunctionCallOutput:
    request = FunctionCall(call_id="c", name=name, arguments=json.dumps(arguments))
    return await execute_call(tools, request, default_timeout=10)


async def test_a_compacted_fact_is_found_by_its_words_and_read_back_whole_on_every_store(
    make_store: Callable[[], LogStore], tmp_path: Path
) -> None:
    """Through the runtime: a fact said early is compacted out of the history twice over;
    the model's search names its seq and recall of that seq gives the message back whole.
    The store's own search (what a runtime wires as ``search``) finds the same seq."""
    settings = Settings(
        store=tmp_path / "unused",
        model="scripted",
        context_window=200_000,
        user_budget_chars=0,
        search_history_tool=True,
    )
    with anyio.fail_after(60):
        async with opened(make_store) as store:
            model = ScriptedModel(brain=Searcher({"the password": "ROTATES ops-4411"}))
            async with Runtime(settings, store=store, gateway=model, tools=note_tools()) as rt:
                session = await rt.create("s1", system="sys")
                await session.send(FACT)
                # each step says more than its summary keeps (no compaction that grows
                # history is written, a manual one included)
                details = " with the sampling profiler, then write down what it found" * 20
                for step in range(6):
                    await session.send(f"step {step}: profile module m{step:03d}{details}")
                    if step % 3 == 2:
                        assert await session.compact()
                records = (await store.read("s1", repair=False)).records
                [fact_seq] = [r.seq for r in records if _is_fact(r)]
                assert fact_seq not in {e.seq for e in session.state.history}
                answer = await session.send("find: the password")
                found = await call(
                    ToolRegistry([search_history_tool(partial(search_records, store, "s1"))]),
                    SEARCH_TOOL,
                    query="rotates OPS-4411",
                    limit=20,
                )
    assert answer.text == FACT
    assert not found.is_error
    assert f"R{fact_seq} (user message, 2 hits)" in found.output


def _is_fact(record: Record) -> bool:
    return isinstance(record, ItemRecord) and record.item == UserMessage(text=FACT)


def test_search_history_is_offered_with_recall_when_its_setting_is_on() -> None:
    async def no_log() -> Sequence[Record]:
        return ()

    def names(settings: Settings) -> tuple[str, ...]:
        tools = with_recall(note_tools(), settings, has_stubs=False, history=tuple, read_log=no_log)
        return tools.names()

    assert names(Settings(search_history_tool=True)) == ("note", RECALL_TOOL, SEARCH_TOOL)
    assert names(Settings()) == ("note", RECALL_TOOL)  # off by default
    # no recall (a fixed threshold stubs nothing): no search either
    assert names(Settings(compact_threshold=8000, search_history_tool=True)) == ("note",)


# -- the tool over a log in memory ---------------------------------------------------------


def log_of(*texts: str) -> list[Record]:
    """Item records at seq 2.. (one user message each); seq 1 stands for the session."""
    return [ItemRecord(seq=n, item=UserMessage(text=t)) for n, t in enumerate(texts, start=2)]


def tools_over(records: Sequence[Record]) -> ToolRegistry:
    async def read_log() -> Sequence[Record]:
        return records

    return ToolRegistry([search_history_tool(find_in_log(read_log))])


@pytest.mark.parametrize("query", ["", "   \n\t "])
async def test_an_empty_query_is_refused_with_a_clear_tool_error(query: str) -> None:
    with anyio.fail_after(5):
        out = await call(tools_over(log_of("a")), SEARCH_TOOL, query=query)
    assert out.is_error
    assert "empty query: give one or more words" in out.output


async def test_the_limit_is_honoured_and_bounded() -> None:
    records = log_of(*(f"deploy step {n}" for n in range(7)), "unrelated")
    with anyio.fail_after(5):
        two = await call(tools_over(records), SEARCH_TOOL, query="DEPLOY", limit=2)
        default = await call(tools_over(records), SEARCH_TOOL, query="deploy")
        too_many = await call(tools_over(records), SEARCH_TOOL, query="deploy", limit=MAX_LIMIT + 1)
    assert len(_REF.findall(two.output)) == 2
    assert two.output.startswith(
        "search_history: 7 records hold every word of 'DEPLOY'; the best 2"
    )
    assert len(_REF.findall(default.output)) == 5
    assert too_many.is_error and "limit" in too_many.output


async def test_every_word_must_appear_and_matches_rank_by_hits_then_recency() -> None:
    records = log_of(
        "retry the upload",  # seq 2: 'retry' only
        "upload, then retry",  # seq 3: both, 2 hits
        "upload retry",  # seq 4: both, 2 hits, newer
        "retry upload retry upload",  # seq 5: both, 4 hits
    )
    with anyio.fail_after(5):
        out = await call(tools_over(records), SEARCH_TOOL, query="retry UPLOAD")
    assert [int(s) for s in _REF.findall(out.output)] == [5, 4, 3, 2]
    records[0] = ItemRecord(seq=2, item=UserMessage(text="retry only"))
    with anyio.fail_after(5):
        out = await call(tools_over(records), SEARCH_TOOL, query="retry UPLOAD")
    assert [int(s) for s in _REF.findall(out.output)] == [5, 4, 3]


@dataclass(frozen=True, slots=True, kw_only=True)
class Partial:
    records: tuple[ItemRecord, ...]
    searched_through: int
    complete: bool


async def test_a_text_said_again_is_shown_once_by_its_first_record() -> None:
    """A recall output that repeats a user message does not push other matches out."""
    records = log_of("deploy key is K-1", "deploy log rotated", "deploy key is K-1")
    with anyio.fail_after(5):
        out = await call(tools_over(records), SEARCH_TOOL, query="deploy")
    assert [int(s) for s in _REF.findall(out.output)] == [3, 2]
    assert out.output.startswith("search_history: 2 records hold")


async def test_a_search_the_store_stopped_at_its_deadline_says_so() -> None:
    first, _ = log_of("alpha one", "alpha two")
    assert isinstance(first, ItemRecord)

    async def stopped(words: Sequence[str], deadline: float) -> FoundRecords:
        assert deadline <= time.monotonic() + 2
        return Partial(records=(first,), searched_through=2, complete=False)

    with anyio.fail_after(5):
        out = await call(ToolRegistry([search_history_tool(stopped)]), SEARCH_TOOL, query="alpha")
    assert "search stopped after 2 records at the 2 s limit" in out.output
    assert _REF.findall(out.output) == ["2"]


def test_matching_stops_at_its_deadline_and_names_where() -> None:
    records = [ItemRecord(seq=n, item=UserMessage(text=f"x {n}")) for n in range(2, 302)]
    hits, matched, stopped = best_hits(records, ("x",), 5, deadline=time.monotonic() - 1)
    assert stopped == records[64].seq and matched == 64
    assert [h.seq for h in hits] == [65, 64, 63, 62, 61]
    _, matched, stopped = best_hits(records, ("x",), 5, deadline=time.monotonic() + 60)
    assert stopped is None and matched == 300


async def test_the_answer_is_capped_whatever_the_texts() -> None:
    records = log_of(*(f"{n} " + ("needle " + "hay " * 5_000) * 3 for n in range(40)))
    with anyio.fail_after(10):
        out = await call(tools_over(records), SEARCH_TOOL, query="needle", limit=MAX_LIMIT)
    assert len(out.output) <= OUTPUT_CHARS
    assert len(_REF.findall(out.output)) == MAX_LIMIT


def test_a_snippet_shows_the_rarest_word_within_its_width() -> None:
    text = "common " * 200 + "the RARE-token\nis here " + "common " * 200
    cut = snippet(text, ("common", "rare-token"))
    assert "RARE-token is here" in cut
    assert cut.startswith("…") and cut.endswith("…")
    assert len(cut) <= SNIPPET_CHARS + 2
    assert snippet("short text", ("text",)) == "short text"


async def test_recall_reads_back_any_message_search_finds_whole() -> None:
    records: list[Record] = [
        *log_of("a user message " * 50),
        ItemRecord(seq=3, item=AssistantMessage(text="an answer")),
        ItemRecord(seq=4, item=FunctionCall(call_id="c", name="note", arguments='{"text": "t"}')),
    ]

    async def read_log() -> Sequence[Record]:
        return records

    tools = ToolRegistry([recall_tool(tuple, read_log)])
    with anyio.fail_after(5):
        user = await call(tools, RECALL_TOOL, ref="R2")
        answer = await call(tools, RECALL_TOOL, ref="R3")
        arguments = await call(tools, RECALL_TOOL, ref="R4")
    assert user.output == "a user message " * 50
    assert answer.output == "an answer"
    assert arguments.output == '{"text": "t"}'


def test_the_summary_request_tells_the_summarizer_that_search_history_exists() -> None:
    search = ToolSpec(name=SEARCH_TOOL, description="d", parameters={})
    request = ModelRequest(
        model="m", input=(UserMessage(text="hi"), UserMessage(text="Summarize.")), tools=(search,)
    )
    noted = with_search_note(request)
    assert noted.input[0] == request.input[0]  # the cached prefix is the same
    assert noted.input[-1] == UserMessage(text=f"Summarize.\n\n{SEARCH_NOTE}")
    assert SEARCH_TOOL in SEARCH_NOTE
    without = ModelRequest(model="m", input=request.input)
    assert with_search_note(without) is without
