"""The round loop end to end with the scripted model and a real JSONL store."""

from __future__ import annotations

from pathlib import Path

import anyio
import pydantic
import pytest
from stowage import (
    AssistantMessage,
    CompactionSkipped,
    CompactionSummary,
    Event,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    HistoryCompacted,
    ModelResponse,
    ModelResponseError,
    Runtime,
    SessionFailed,
    SessionFailedEvent,
    Settings,
    StoreError,
    SystemMessage,
    ToolRegistry,
    Usage,
    UserMessage,
    replay,
)
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore


class EchoArgs(pydantic.BaseModel):
    text: str


def echo_tools(seen: list[str] | None = None) -> ToolRegistry:
    async def echo(args: EchoArgs) -> str:
        if seen is not None:
            seen.append(args.text)
        return f"echo: {args.text}"

    return ToolRegistry(
        [FunctionTool(name="echo", description="echo", args_model=EchoArgs, fn=echo)]
    )


def call(call_id: str, text: str) -> FunctionCall:
    return FunctionCall(call_id=call_id, name="echo", arguments=f'{{"text": "{text}"}}')


def usage(total: int) -> Usage:
    return Usage(input_tokens=total - 10, output_tokens=10, total_tokens=total)


async def test_compacts_once_reported_usage_crosses_the_threshold_and_next_round_sees_it(
    tmp_path: Path,
) -> None:
    """The seed's integration case: 3 messages in the next request, not 4."""
    with anyio.fail_after(10):
        model = ScriptedModel.from_responses(
            [
                ModelResponse(items=(call("c1", "hi"),), usage=usage(9000)),
                ModelResponse(
                    items=(AssistantMessage(text="SUMMARY: user said hi"),), usage=usage(100)
                ),
                ModelResponse(items=(AssistantMessage(text="done"),), usage=usage(500)),
            ]
        )
        events: list[Event] = []
        settings = Settings(store=tmp_path, compact_threshold=8000)
        async with Runtime(settings, gateway=model, tools=echo_tools()) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", system="be brief")
            result = await session.send("hi")
        assert result.text == "done"
        first, summary_request, after = model.requests
        assert [type(i) for i in first.input] == [SystemMessage, UserMessage]
        # the summary request is the round request plus an instruction: the cache serves it
        assert summary_request.tools == first.tools and summary_request.tool_choice == "none"
        assert summary_request.purpose == "summary"
        # before compaction the history was system, user, call, output: 4 items
        assert [type(i) for i in after.input] == [SystemMessage, CompactionSummary, UserMessage]
        compacted = [e for e in events if isinstance(e, HistoryCompacted)]
        assert len(compacted) == 1
        # decided on the reported usage; applied at what was in use then (the usage and the
        # round's output added since)
        assert compacted[0].decided_tokens == 9000
        assert compacted[0].tokens_before is not None and compacted[0].tokens_before >= 9000
        assert compacted[0].summary == "SUMMARY: user said hi"
        assert compacted[0].removed == 2 and compacted[0].retained == 2
        assert "9000" in compacted[0].reason and "8000" in compacted[0].reason


async def test_no_compaction_when_the_provider_reports_no_usage(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        model = ScriptedModel.from_responses(
            [
                ModelResponse(items=(call("c1", "a"),), usage=None),
                ModelResponse(items=(AssistantMessage(text="ok"),), usage=None),
            ]
        )
        async with Runtime(
            Settings(store=tmp_path, compact_threshold=1), gateway=model, tools=echo_tools()
        ) as rt:
            session = await rt.create("s1")
            await session.send("go")
        assert len(model.requests) == 2
        assert all(r.purpose == "round" for r in model.requests)


async def test_resume_replays_compaction_instead_of_returning_the_uncompacted_transcript(
    tmp_path: Path,
) -> None:
    """The seed's regression: after a resume in a new runtime the dropped items stay gone."""
    with anyio.fail_after(15):
        settings = Settings(store=tmp_path, compact_threshold=8000)
        first = ScriptedModel.from_responses(
            [
                ModelResponse(items=(call("c1", "secret-tool-output"),), usage=usage(9000)),
                ModelResponse(items=(AssistantMessage(text="summary text"),)),
                ModelResponse(items=(AssistantMessage(text="answer one"),), usage=usage(200)),
            ]
        )
        async with Runtime(settings, gateway=first, tools=echo_tools()) as rt:
            session = await rt.create("s1", system="sys")
            await session.send("first question")
            live = session.history
        second = ScriptedModel.from_responses(
            [ModelResponse(items=(AssistantMessage(text="answer two"),))]
        )
        async with Runtime(settings, gateway=second, tools=echo_tools()) as rt:
            session = await rt.resume("s1")
            assert session.history == live
            await session.send("second question")
        sent = second.requests[0].input
        assert not any(isinstance(i, FunctionCall | FunctionCallOutput) for i in sent)
        assert not any("secret-tool-output" in getattr(i, "text", "") for i in sent)
        assert CompactionSummary(text="summary text") in sent


async def test_live_history_equals_replay_of_the_log_after_many_compactions(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        settings = Settings(store=tmp_path, compact_threshold=1500, workspace=Path(__file__).parent)
        compactions: list[HistoryCompacted] = []
        async with Runtime(settings, gateway=ScriptedModel(tool_rounds=2)) as rt:
            rt.subscribe(
                lambda e: compactions.append(e) if isinstance(e, HistoryCompacted) else None
            )
            session = await rt.create("s1", system="sys")
            for n in range(6):
                await session.send(f"question {n}: look at the files")
            live = list(session.state.history)
        store = JsonlStore(tmp_path)
        full = await store.read("s1")
        tail = await store.read_tail("s1")
        await store.aclose()
        assert len(compactions) >= 2
        assert replay("s1", full.records).history == live
        assert replay("s1", tail.records).history == live
        assert len(tail.records) < len(full.records)


async def test_function_calls_are_durable_before_the_tool_runs(tmp_path: Path) -> None:
    """Write-ahead: when the tool runs, its function_call is already in the log on disk."""
    with anyio.fail_after(10):
        logged_when_run: list[bool] = []

        async def probe(args: EchoArgs) -> str:
            text = (tmp_path / "s1.jsonl").read_text()
            logged_when_run.append('"call_id":"c1"' in text.replace(" ", ""))
            return "ok"

        tools = ToolRegistry(
            [FunctionTool(name="echo", description="e", args_model=EchoArgs, fn=probe)]
        )
        model = ScriptedModel.from_responses(
            [
                ModelResponse(items=(call("c1", "x"),), usage=usage(10)),
                ModelResponse(items=(AssistantMessage(text="ok"),), usage=usage(10)),
            ]
        )
        async with Runtime(Settings(store=tmp_path), gateway=model, tools=tools) as rt:
            await (await rt.create("s1")).send("go")
        assert logged_when_run == [True]


async def test_tool_errors_become_outputs_the_model_reads(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        model = ScriptedModel.from_responses(
            [
                ModelResponse(
                    items=(
                        FunctionCall(call_id="a", name="nope", arguments="{}"),
                        FunctionCall(call_id="b", name="echo", arguments="not json"),
                        FunctionCall(call_id="c", name="echo", arguments='{"wrong": 1}'),
                    ),
                    usage=usage(10),
                ),
                ModelResponse(items=(AssistantMessage(text="handled"),), usage=usage(10)),
            ]
        )
        async with Runtime(Settings(store=tmp_path), gateway=model, tools=echo_tools()) as rt:
            result = await (await rt.create("s1")).send("go")
        assert result.text == "handled"
        outputs = [i for i in model.requests[1].input if isinstance(i, FunctionCallOutput)]
        assert [o.call_id for o in outputs] == ["a", "b", "c"]
        assert all(o.is_error and o.output.startswith("error:") for o in outputs)


async def test_a_model_error_fails_the_turn_but_not_the_session(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        model = ScriptedModel.from_responses(
            [
                ModelResponseError("bad answer"),
                ModelResponse(items=(AssistantMessage(text="fine now"),), usage=usage(10)),
            ]
        )
        async with Runtime(Settings(store=tmp_path), gateway=model, tools=echo_tools()) as rt:
            session = await rt.create("s1")
            with pytest.raises(ModelResponseError):
                await session.send("one")
            assert (await session.send("two")).text == "fine now"


class DiskFullFor(JsonlStore):
    """A real JSONL store whose disk is 'full' for one session's appends."""

    def __init__(self, root: Path, broken: str) -> None:
        super().__init__(root)
        self.broken = broken

    async def append_batches(self, batches):  # type: ignore[no-untyped-def]
        ok = [(sid, recs) for sid, recs in batches if sid != self.broken]
        outcomes = await super().append_batches(ok)
        if len(ok) < len(batches):
            outcomes[self.broken] = StoreError(f"no space left on device writing {self.broken}")
        return outcomes


async def test_a_failing_session_leaves_other_sessions_running(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        store = DiskFullFor(tmp_path, broken="bad")
        failed: list[Event] = []
        settings = Settings(store=tmp_path, workspace=tmp_path)
        async with Runtime(settings, store=store, gateway=ScriptedModel()) as rt:
            rt.subscribe(lambda e: failed.append(e) if isinstance(e, SessionFailedEvent) else None)
            good = await rt.create("good")
            bad = await rt.create("bad")
            with pytest.raises(SessionFailed) as info:
                await bad.send("hello")
            assert "no space left" in repr(info.value.__cause__) + str(info.value)
            result = await good.send("hello")
            assert result.text
            with pytest.raises(SessionFailed):
                await bad.send("again")
        assert [e.session_id for e in failed] == ["bad"]  # type: ignore[attr-defined]


async def test_repeated_call_ids_from_the_provider_are_made_unique(tmp_path: Path) -> None:
    """Some servers number calls from 0 on every response; outputs must still pair exactly."""
    with anyio.fail_after(10):
        model = ScriptedModel.from_responses(
            [
                ModelResponse(items=(call("call_0", "a"), call("call_0", "b")), usage=usage(10)),
                ModelResponse(items=(call("call_0", "c"),), usage=usage(10)),
                ModelResponse(items=(AssistantMessage(text="ok"),), usage=usage(10)),
            ]
        )
        seen: list[str] = []
        async with Runtime(Settings(store=tmp_path), gateway=model, tools=echo_tools(seen)) as rt:
            session = await rt.create("s1")
            await session.send("go")
            history = session.history
        calls = [i for i in history if isinstance(i, FunctionCall)]
        outputs = [i for i in history if isinstance(i, FunctionCallOutput)]
        assert len({c.call_id for c in calls}) == 3
        assert [o.call_id for o in outputs] == [c.call_id for c in calls]
        assert sorted(seen) == ["a", "b", "c"]
        store = JsonlStore(tmp_path)
        assert replay("s1", (await store.read("s1")).records).items == history
        await store.aclose()


async def test_threshold_mode_never_compacts_again_before_usage_has_grown(tmp_path: Path) -> None:
    """When what a compaction keeps is itself over the threshold, the next round must not
    compact again (a loop that frees nothing); it waits for a quarter threshold of growth."""
    with anyio.fail_after(10):
        model = ScriptedModel.from_responses(
            [
                ModelResponse(items=(call("c1", "a"),), usage=usage(9000)),
                ModelResponse(items=(AssistantMessage(text="summary one"),)),
                ModelResponse(items=(call("c2", "b"),), usage=usage(8500)),  # base after compaction
                ModelResponse(items=(call("c3", "c"),), usage=usage(9000)),  # +500 < 2000: skip
                ModelResponse(items=(call("c4", "d"),), usage=usage(10600)),  # +2100: compact
                ModelResponse(items=(AssistantMessage(text="summary two"),)),
                ModelResponse(items=(AssistantMessage(text="done"),), usage=usage(9000)),
            ]
        )
        events: list[Event] = []
        settings = Settings(store=tmp_path, compact_threshold=8000)
        async with Runtime(settings, gateway=model, tools=echo_tools()) as rt:
            rt.subscribe(events.append)
            session = await rt.create("s1", system="sys")
            assert (await session.send("go")).text == "done"
        purposes = [r.purpose for r in model.requests]
        assert purposes == ["round", "summary", "round", "round", "round", "summary", "round"]
        skipped = [e for e in events if isinstance(e, CompactionSkipped)]
        # the first round after each compaction sets the base (+0); then +500 is not enough
        assert ["only 0 tokens" in s.reason for s in skipped] == [True, False, True]
        assert "only 500 tokens were added" in skipped[1].reason
