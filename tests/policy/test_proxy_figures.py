"""Figures a proxy reports, judged purely: usage that cannot be true, a ratio from the count a
provider stated, and which of the current turn's rounds a compaction may keep verbatim."""

from __future__ import annotations

import pytest
from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    ModelRequest,
    SystemMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from stowage.policy import (
    compaction_cut,
    implausible_usage,
    ratio_from_stated,
    request_chars,
    turn_round_cuts,
    turn_rounds,
)


def usage(input_tokens: int) -> Usage:
    return Usage(input_tokens=input_tokens, output_tokens=1, total_tokens=input_tokens + 1)


def test_zero_input_tokens_cannot_be_true() -> None:
    assert "0 input tokens" in (implausible_usage(usage(0), chars=100) or "")


def test_a_count_far_below_what_the_characters_allow_cannot_be_true() -> None:
    # 64,000 characters are at least 8,000 tokens at 8 a token; 50 is a count of something else
    assert "cannot be fewer than 8000" in (implausible_usage(usage(50), chars=64_000) or "")
    assert implausible_usage(usage(1_500), chars=64_000) is None
    assert implausible_usage(usage(16_000), chars=64_000) is None


def test_a_request_counts_its_items_and_its_tool_schemas() -> None:
    request = ModelRequest(model="m", input=(SystemMessage(text="abc"), UserMessage(text="de")))
    assert request_chars(request) == 5
    tool = ToolSpec(name="t", description="d", parameters={})
    assert request_chars(ModelRequest(model="m", input=request.input, tools=(tool,))) > 5


def test_the_stated_count_gives_the_ratio_within_what_tokenizers_do() -> None:
    assert ratio_from_stated(30_000, 10_100, tool_tokens=100) == pytest.approx(3.0)
    assert ratio_from_stated(100, 7_180) == 1.5  # clamped: not a count of this text
    assert ratio_from_stated(1_000, 100, tool_tokens=100) is None


def entries(*items: Item, start: int = 1) -> list[HistoryEntry]:
    return [HistoryEntry(seq=start + n, item=item) for n, item in enumerate(items)]


def round_of(n: int, size: int) -> tuple[Item, Item]:
    return (
        FunctionCall(call_id=f"c{n}", name="read", arguments="{}"),
        FunctionCallOutput(call_id=f"c{n}", output="x" * size),
    )


def turn_history(sizes: list[int]) -> list[HistoryEntry]:
    items: list[Item] = [SystemMessage(text="sys"), UserMessage(text="go")]
    for n, size in enumerate(sizes):
        items.extend(round_of(n, size))
    return entries(*items)


def test_the_cuts_keep_the_turns_newest_rounds_one_more_at_a_time() -> None:
    history = turn_history([100, 100, 100])
    # seqs: 1 sys, 2 user, 3-4 round 0, 5-6 round 1, 7-8 round 2
    assert turn_round_cuts(history) == [6, 4, 2]


def test_rounds_before_the_newest_user_message_are_not_the_turns() -> None:
    items: list[Item] = [SystemMessage(text="sys"), UserMessage(text="old"), *round_of(0, 10)]
    items += [AssistantMessage(text="done"), UserMessage(text="new"), *round_of(1, 10)]
    assert turn_round_cuts(entries(*items)) == [6]


def test_a_summary_newer_than_the_rounds_after_it_blocks_keeping_them() -> None:
    # a compaction (seq 20) kept round 0 (seqs 3-4) verbatim: no compaction can keep it now
    history = [
        HistoryEntry(seq=1, item=SystemMessage(text="sys")),
        HistoryEntry(seq=20, item=CompactionSummary(text="s")),
        HistoryEntry(seq=2, item=UserMessage(text="go")),
        *entries(*round_of(0, 10), start=3),
        *entries(*round_of(1, 10), start=21),
    ]
    assert turn_round_cuts(history) == [20]


def test_the_turns_rounds_are_counted_after_the_newest_user_message_summary_or_not() -> None:
    items: list[Item] = [SystemMessage(text="sys"), UserMessage(text="old"), *round_of(0, 10)]
    assert turn_rounds(entries(*items)) == 1
    items += [AssistantMessage(text="done"), UserMessage(text="new")]
    assert turn_rounds(entries(*items)) == 0
    items += [*round_of(1, 10), *round_of(2, 10)]
    assert turn_rounds(entries(*items)) == 2
    # rounds behind a newer summary still count (no compaction can keep them, stubs can)
    history = [
        HistoryEntry(seq=1, item=SystemMessage(text="sys")),
        HistoryEntry(seq=20, item=CompactionSummary(text="s")),
        HistoryEntry(seq=2, item=UserMessage(text="go")),
        *entries(*round_of(0, 10), start=3),
    ]
    assert turn_rounds(history) == 1
    assert turn_rounds(entries(SystemMessage(text="sys"), *round_of(0, 10))) == 0


def test_a_compaction_keeps_the_newest_rounds_that_fit_the_target() -> None:
    history = turn_history([4000, 4000, 400])

    def cut(target: int, **changes: object) -> int:
        options: dict[str, object] = {
            "last_seq": 8,
            "target_tokens": target,
            "stubbed": (),
            "user_budget_chars": 1000,
            "summary_chars": 400,
            "chars_per_token": 4.0,
            **changes,
        }
        return compaction_cut(history, **options)  # type: ignore[arg-type]

    assert cut(10_000) == 2  # all three rounds fit
    assert cut(1_500) == 4  # the two newest
    assert cut(300) == 6  # only the newest, 400 characters
    assert cut(50) == 8  # not even that: everything is compacted
    assert cut(10_000, keep_at_most=1) == 6
