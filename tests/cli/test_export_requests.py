"""An export in a provider's shape is a request that provider accepts: every call has its
output. A call still waiting for approval, or one of a round a stop left open, is left out of
``openai-chat`` and ``openai-responses`` and named on stderr; the other formats keep it.

Sessions of many shapes come from the model zoo (driven through the public API: compactions,
approvals, denials, interrupts, restarts, huge outputs) and from logs built by hand for what a
live run cannot end in (a round a crash left open, a rewind past a waiting call). Every one is
exported in every format, and each wire export is checked three ways: the project's own wire
check, the OpenAI SDK's request types (its ``TypedDict`` params, validated by pydantic), and
call by call.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Required, get_origin, get_type_hints

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseFunctionToolCallParam, ResponseInputParam
from pydantic import TypeAdapter
from stowage.cli._export import EXPORT_FORMATS, export_text, paired_items, wire_export
from stowage.core import (
    ApprovalRecord,
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ItemRecord,
    Record,
    RewindRecord,
    RoundCommittedRecord,
    SessionRecord,
    SystemMessage,
    TurnRecord,
    UserMessage,
    lineage_store,
    replay,
)
from stowage.storage import JsonlStore
from stowage.testing import orphan_calls, orphan_outputs

from tests.policy.test_check_pairing import log_with_a_compaction_over_an_open_call
from tests.zoo import ZooHarness, write_zoo_file, zoo_member, zoo_settings

WINDOW = 6000
MAX_OUTPUT = 500

CHAT = TypeAdapter(list[ChatCompletionMessageParam])
RESPONSES = TypeAdapter(ResponseInputParam)
#: openai releases before the fix typed an input ``function_call``'s ``id`` as required, which
#: the Responses API does not ask for (and the export does not invent): under them the
#: Responses export is checked by the project's own wire check alone
OLD_RESPONSES_TYPES = (
    get_origin(get_type_hints(ResponseFunctionToolCallParam, include_extras=True)["id"]) is Required
)


def _exhaust(value: Any) -> Any:
    """pydantic validates an ``Iterable`` field (``tool_calls``) lazily: walk it all."""
    if isinstance(value, dict):
        return {key: _exhaust(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_exhaust(inner) for inner in value]
    if hasattr(value, "__next__"):
        return [_exhaust(inner) for inner in value]
    return value


def assert_valid_request(fmt: str, text: str) -> list[dict[str, Any]]:
    """``text`` is a valid ``fmt`` request input whose every call has its output."""
    wire = json.loads(text)
    body = {"messages": wire} if fmt == "openai-chat" else {"input": wire}
    assert orphan_calls(body) == [] and orphan_outputs(body) == [], text
    if fmt == "openai-chat":
        _exhaust(CHAT.validate_python(wire))
    elif not OLD_RESPONSES_TYPES:
        _exhaust(RESPONSES.validate_python(wire))
    if fmt == "openai-chat":
        calls = [c["id"] for m in wire for c in m.get("tool_calls") or ()]
        outputs = [m["tool_call_id"] for m in wire if m.get("role") == "tool"]
        assert all(m.get("content") is not None or m.get("tool_calls") for m in wire), text
    else:
        calls = [e["call_id"] for e in wire if e.get("type") == "function_call"]
        outputs = [e["call_id"] for e in wire if e.get("type") == "function_call_output"]
    assert sorted(calls) == sorted(outputs), text
    return wire


# -- the pure pairing ----------------------------------------------------------------------

call_ids = st.sampled_from(["a", "b", "c", "d"])
items = st.lists(
    st.one_of(
        call_ids.map(lambda i: FunctionCall(call_id=i, name="t", arguments="{}")),
        call_ids.map(lambda i: FunctionCallOutput(call_id=i, output="ok")),
        st.just(UserMessage(text="u")),
        st.just(AssistantMessage(text="a")),
    ),
    max_size=12,
)


@given(items)
def test_pairing_leaves_out_exactly_the_unpaired_and_keeps_everything_else(
    given_items: list[Item],
) -> None:
    kept, calls_left, outputs_left = paired_items(given_items)
    called: set[str] = set()
    for item in kept:
        if isinstance(item, FunctionCall):
            called.add(item.call_id)
            assert any(
                isinstance(o, FunctionCallOutput) and o.call_id == item.call_id for o in kept
            )
        elif isinstance(item, FunctionCallOutput):
            assert item.call_id in called
    assert len(kept) + len(calls_left) + len(outputs_left) == len(given_items)
    # what was kept is the input in order, less what was left out
    rest = iter(given_items)
    assert all(any(item is other for other in rest) for item in kept)


# -- logs built by hand ----------------------------------------------------------------------


def _call(call_id: str) -> FunctionCall:
    return FunctionCall(call_id=call_id, name="deploy", arguments='{"to": "prod"}')


def _opening() -> list[Record]:
    return [
        SessionRecord(seq=1, model="m"),
        ItemRecord(seq=2, item=SystemMessage(text="be careful")),
        TurnRecord(seq=3, turn=1, phase="started"),
        ItemRecord(seq=4, item=UserMessage(text="deploy it")),
    ]


def waiting_for_approval() -> list[Record]:
    """Two calls in one round, one allowed, one waiting for a person: neither runs before
    the answer."""
    return [
        *_opening(),
        ItemRecord(seq=5, item=AssistantMessage(text="deploying"), round=1),
        ItemRecord(seq=6, item=_call("ok1"), round=1),
        ItemRecord(seq=7, item=_call("wait1"), round=1),
        ApprovalRecord(seq=8, call_id="wait1", decision="requested"),
    ]


def open_after_a_crash() -> list[Record]:
    """A round whose calls were logged and the process killed before their outputs."""
    return [*_opening(), ItemRecord(seq=5, item=_call("lost1"), round=1)]


def rewound_past_a_waiting_call() -> list[Record]:
    """A round answered, then a branch waiting for approval that a rewind discarded."""
    answered = [
        ItemRecord(seq=5, item=_call("done1"), round=1),
        ItemRecord(seq=6, item=FunctionCallOutput(call_id="done1", output="ok"), round=1),
        RoundCommittedRecord(seq=7, round=1, usage=None, first_seq=6, last_seq=7),
    ]
    branch = [
        ItemRecord(seq=8, item=_call("wait2"), round=2),
        ApprovalRecord(seq=9, call_id="wait2", decision="requested"),
    ]
    return [*_opening(), *answered, *branch, RewindRecord(seq=10, to_round=1, to_seq=7)]


HAND_MADE = {
    "waiting": (waiting_for_approval, {"ok1", "wait1"}),
    "crashed": (open_after_a_crash, {"lost1"}),
    "rewound": (rewound_past_a_waiting_call, set()),
}


async def _effective(root: Path, session_id: str, records: list[Record]) -> tuple[Record, ...]:
    """``records`` written as a JSONL log and read back as every command reads it."""
    store = lineage_store(JsonlStore(root))
    try:
        await store.inner.create(session_id, records)
        return (await store.read(session_id, repair=False)).records
    finally:
        await store.aclose()


@pytest.mark.parametrize("shape", sorted(HAND_MADE))
async def test_hand_made_logs_export_as_valid_requests(tmp_path: Path, shape: str) -> None:
    make, left_out = HAND_MADE[shape]
    records = await _effective(tmp_path, shape, make())
    for fmt in ("openai-chat", "openai-responses"):
        wired = wire_export(shape, records, fmt)
        assert_valid_request(fmt, wired.text)
        assert {c.call_id for c in wired.calls_left_out} == left_out
        notice = wired.notice(shape)
        assert (notice is None) == (not left_out)
        for call_id in left_out:
            assert notice is not None and call_id in notice
    # the waiting round's assistant text stays
    if shape == "waiting":
        wire = json.loads(wire_export(shape, records, "openai-chat").text)
        assert wire[-1] == {"role": "assistant", "content": "deploying"}


async def test_an_output_without_its_call_is_left_out_and_named(tmp_path: Path) -> None:
    """A log an old compaction broke (``stowage check`` calls it a problem): it absorbed a
    call awaiting approval, whose output came after; the export still is a valid request."""
    records = await _effective(tmp_path, "b", log_with_a_compaction_over_an_open_call())
    for fmt in ("openai-chat", "openai-responses"):
        wired = wire_export("b", records, fmt)
        assert_valid_request(fmt, wired.text)
        assert wired.outputs_left_out == ("deploy",) and wired.calls_left_out == ()
        notice = wired.notice("b")
        assert notice is not None and "the output of call deploy whose call is not" in notice


# -- the zoo ---------------------------------------------------------------------------------

#: (member, steps): a step is ("send", sizes, guarded), ("approve",), ("deny",),
#: ("interrupt", sizes), ("compact",), ("restart",)
ZOO_RUNS: dict[str, tuple[str, list[tuple[Any, ...]]]] = {
    "reread-compacted": (
        "rereader",
        [("send", (900, 1200), False), ("send", (1500,), False), ("compact",)],
    ),
    "waits": ("approval", [("send", (400,), False), ("send", (300,), True)]),
    "approved-then-waits": (
        "approval",
        [
            ("send", (300,), True),
            ("approve",),
            ("send", (500,), True),
            ("deny",),
            ("send", (300,), True),
        ],
    ),
    "waits-across-restart": ("approval", [("send", (600,), True), ("restart",)]),
    "interrupted": ("interrupt", [("send", (500,), False), ("interrupt", (800, 800))]),
    "huge": ("huge_output", [("send", (400,), False), ("send", (400,), False)]),
    "bursty": ("bursty", [("send", (700, 700, 700), False), ("send", (1200,), False)]),
}


async def _zoo_log(
    root: Path, member: str, steps: list[tuple[Any, ...]]
) -> tuple[tuple[Record, ...], set[str]]:
    workspace = root / "ws"
    workspace.mkdir()
    gateway = zoo_member(member, window=WINDOW, max_output_tokens=MAX_OUTPUT)
    settings = zoo_settings(root / "store", workspace, window=WINDOW, max_output_tokens=MAX_OUTPUT)
    turn = 0
    async with ZooHarness(gateway, settings) as harness:
        await harness.create("s1", system="You read files and quote their tokens.")
        for step in steps:
            turn += 1
            if step[0] in ("send", "interrupt"):
                names = []
                for k, tokens in enumerate(step[1]):
                    name = f"f{turn}_{k}.txt"
                    write_zoo_file(workspace, name, tokens=tokens)
                    names.append(name)
                text = "read " + " ".join(names)
                if step[0] == "send":
                    await harness.send("s1", text + (" then call guarded" if step[2] else ""))
                else:
                    await harness.interrupt("s1", text)
            elif step[0] in ("approve", "deny"):
                await harness.decide("s1", approve=step[0] == "approve")
            elif step[0] == "compact":
                await harness.compact("s1")
            elif step[0] == "restart":
                await harness.restart()
        waiting = {c.call_id for c in harness.sessions["s1"].pending_approvals}
    store = lineage_store(JsonlStore(root / "store"))
    try:
        records = (await store.read("s1", repair=False)).records
    finally:
        await store.aclose()
    return records, waiting


@pytest.mark.parametrize("run", sorted(ZOO_RUNS))
async def test_zoo_sessions_export_in_every_format_and_as_valid_requests(
    tmp_path: Path, run: str
) -> None:
    member, steps = ZOO_RUNS[run]
    with anyio.fail_after(120):
        records, waiting = await _zoo_log(tmp_path, member, steps)
    if run.endswith("waits") or run == "waits-across-restart":
        assert waiting, "the run was meant to end with a call waiting for approval"
    for fmt in EXPORT_FORMATS:
        assert export_text("s1", records, fmt)
    # a round waiting for approval: its calls run once it is answered, so none has an output
    open_calls = set(replay("s1", records).open_calls)
    assert waiting <= open_calls and (open_calls == set()) == (waiting == set())
    for fmt in ("openai-chat", "openai-responses"):
        wired = wire_export("s1", records, fmt)
        wire = assert_valid_request(fmt, wired.text)
        assert {c.call_id for c in wired.calls_left_out} == open_calls
        assert wired.awaiting_approval == waiting
        assert not wired.outputs_left_out
        assert wire, "an export of a session that ran holds its messages"
    if waiting:
        # the waiting call stays in the log's own formats
        for call_id in open_calls:
            assert call_id in export_text("s1", records, "jsonl")
            assert call_id in export_text("s1", records, "markdown")


# -- the command ---------------------------------------------------------------------------


def test_the_command_says_on_stderr_what_it_left_out(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    anyio.run(_effective, tmp_path / "st", "w", waiting_for_approval())
    for fmt in ("openai-chat", "openai-responses"):
        done = subprocess.run(
            [sys.executable, "-m", "stowage.cli", "export", "w", "--format", fmt,
             "--store", "st"],
            cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert_valid_request(fmt, done.stdout)
        assert "wait1" not in done.stdout and "deploying" in done.stdout
        [line] = done.stderr.splitlines()
        assert "left out calls ok1, wait1 of a round that waits for approval of wait1" in line
        assert "'stowage approve w wait1'" in line
    # markdown keeps it, and says nothing on stderr
    done = subprocess.run(
        [sys.executable, "-m", "stowage.cli", "export", "w", "--store", "st"],
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "wait1" in done.stdout and done.stderr == ""
