"""The pure compaction layer: decide, the summarizer's view, apply, compose."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stowage.core._errors import CompactionError, ConfigError
from stowage.core._history import CompactionResult, apply_compaction, compose_history
from stowage.core._items import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    SystemMessage,
    UserMessage,
)
from stowage.core._sizes import estimate_tokens, item_chars
from stowage.policy._compaction import decide_compaction, summary_view


def entries(*items: Item, start: int = 1) -> tuple[HistoryEntry, ...]:
    return tuple(HistoryEntry(seq=start + i, item=item) for i, item in enumerate(items))


def items_of(history: Sequence[HistoryEntry]) -> list[Item]:
    return [entry.item for entry in history]


def call(
    call_id: str, name: str = "read_file", arguments: str = '{"path": "a.txt"}'
) -> FunctionCall:
    return FunctionCall(call_id=call_id, name=name, arguments=arguments)


def output(call_id: str, text: str = "contents") -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call_id, output=text)


# decide_compaction


def test_decide_skips_when_no_usage_reported() -> None:
    decision = decide_compaction(tokens=None, threshold=8000, history_length=50)
    assert decision.compact is False
    assert decision.tokens is None
    assert "no usage" in decision.reason


def test_decide_skips_below_threshold() -> None:
    decision = decide_compaction(tokens=7999, threshold=8000, history_length=50)
    assert decision.compact is False
    assert decision.tokens == 7999


def test_decide_skips_when_history_too_short() -> None:
    decision = decide_compaction(tokens=9000, threshold=8000, history_length=3)
    assert decision.compact is False
    assert decision.tokens == 9000


def test_decide_triggers_at_threshold_with_both_numbers_in_reason() -> None:
    decision = decide_compaction(tokens=8000, threshold=8000, history_length=4)
    assert decision.compact is True
    assert decision.tokens == 8000
    assert decision.reason == "Reported token usage 8000 reached the compaction threshold 8000"


def test_decide_reason_carries_reported_and_threshold_numbers() -> None:
    decision = decide_compaction(tokens=12345, threshold=8000, history_length=10)
    assert decision.compact is True
    assert "12345" in decision.reason
    assert "8000" in decision.reason


# summary_view (the summary request itself: test_summary_request.py)


def test_the_summarizer_sees_stubbed_outputs_as_their_stubs_and_the_rest_whole() -> None:
    history = entries(
        SystemMessage(text="sys"),
        UserMessage(text="go"),
        call("c1"),
        output("c1", "old " * 500),
        call("c2"),
        output("c2", "new " * 500),
    )
    view = summary_view(history, {4})
    assert [e.seq for e in view] == [e.seq for e in history]
    stubbed, whole = view[3].item, view[5].item
    assert isinstance(stubbed, FunctionCallOutput) and isinstance(whole, FunctionCallOutput)
    assert "old old" not in stubbed.output and "recall_artifact with ref R4" in stubbed.output
    assert stubbed.call_id == "c1"
    assert whole.output == "new " * 500
    # nothing stubbed: the history itself
    assert summary_view(history, ()) == history


# apply_compaction

SUMMARY = "the summary"


def test_apply_keeps_leading_system_summary_and_recent_users() -> None:
    history = entries(
        SystemMessage(text="sys"),
        UserMessage(text="first"),
        AssistantMessage(text="a1"),
        UserMessage(text="second"),
        AssistantMessage(text="a2"),
    )
    result = apply_compaction(history, summary=SUMMARY, summary_seq=6, covers_through=5)
    assert items_of(result.history) == [
        SystemMessage(text="sys"),
        CompactionSummary(text=SUMMARY),
        UserMessage(text="first"),
        UserMessage(text="second"),
    ]
    assert result.history[1] == HistoryEntry(seq=6, item=CompactionSummary(text=SUMMARY))
    assert [e.seq for e in result.retained] == [1, 2, 4]
    assert result.removed == 2


def test_apply_never_leaves_an_orphan_function_call() -> None:
    history = entries(
        SystemMessage(text="sys"),
        UserMessage(text="do it"),
        AssistantMessage(text="calling"),
        call("c1"),
        output("c1"),
        call("c2"),
        output("c2"),
        AssistantMessage(text="done"),
    )
    result = apply_compaction(history, summary=SUMMARY, summary_seq=9, covers_through=8)
    kinds = {type(item) for item in items_of(result.history)}
    assert FunctionCall not in kinds
    assert FunctionCallOutput not in kinds
    assert AssistantMessage not in kinds
    assert result.removed == 6


def test_apply_keeps_newest_user_even_if_it_alone_exceeds_budget() -> None:
    history = entries(
        SystemMessage(text="sys"),
        UserMessage(text="old"),
        AssistantMessage(text="a"),
        UserMessage(text="x" * 50),
    )
    result = apply_compaction(
        history, summary=SUMMARY, summary_seq=5, covers_through=4, user_budget_chars=10
    )
    assert items_of(result.history) == [
        SystemMessage(text="sys"),
        CompactionSummary(text=SUMMARY),
        UserMessage(text="x" * 50),
    ]


def test_apply_drops_older_users_once_budget_is_exhausted() -> None:
    history = entries(
        UserMessage(text="a" * 5),  # would fit on its own, but older than the one that did not
        UserMessage(text="b" * 8),
        UserMessage(text="c" * 4),
        UserMessage(text="d" * 4),
    )
    result = apply_compaction(
        history, summary=SUMMARY, summary_seq=5, covers_through=4, user_budget_chars=10
    )
    assert items_of(result.history) == [
        CompactionSummary(text=SUMMARY),
        UserMessage(text="c" * 4),
        UserMessage(text="d" * 4),
    ]
    assert result.removed == 2


def test_apply_budget_counts_exact_fit() -> None:
    history = entries(UserMessage(text="aaaaa"), UserMessage(text="bbbbb"))
    result = apply_compaction(
        history, summary=SUMMARY, summary_seq=3, covers_through=2, user_budget_chars=10
    )
    assert [e.seq for e in result.retained] == [1, 2]


def test_apply_works_without_leading_system_message() -> None:
    history = entries(
        UserMessage(text="hi"),
        AssistantMessage(text="hello"),
        SystemMessage(text="a later system note"),
        UserMessage(text="more"),
    )
    result = apply_compaction(history, summary=SUMMARY, summary_seq=5, covers_through=4)
    assert items_of(result.history) == [
        CompactionSummary(text=SUMMARY),
        UserMessage(text="hi"),
        UserMessage(text="more"),
    ]


def test_apply_keeps_tail_after_covers_through_verbatim() -> None:
    history = entries(
        SystemMessage(text="sys"),
        UserMessage(text="u1"),
        AssistantMessage(text="a1"),
        call("old"),
        output("old"),
        UserMessage(text="u2"),  # seq 6: first of the tail
        call("new"),
        output("new"),
        AssistantMessage(text="a2"),
    )
    result = apply_compaction(history, summary=SUMMARY, summary_seq=10, covers_through=5)
    assert result.history == (
        history[0],
        HistoryEntry(seq=10, item=CompactionSummary(text=SUMMARY)),
        history[1],
        *history[5:],
    )
    assert result.retained == (history[0], history[1])
    assert result.removed == 3


def test_apply_keeps_pinned_users_regardless_of_budget() -> None:
    history = entries(
        UserMessage(text="P" * 100, pinned=True),
        UserMessage(text="old unpinned"),
        UserMessage(text="y" * 30),
        UserMessage(text="z" * 30),
    )
    result = apply_compaction(
        history, summary=SUMMARY, summary_seq=5, covers_through=4, user_budget_chars=40
    )
    assert [e.seq for e in result.retained] == [1, 4]
    assert items_of(result.history)[1] == UserMessage(text="P" * 100, pinned=True)


def test_apply_drops_older_summaries_in_compacted_part() -> None:
    first = apply_compaction(
        entries(SystemMessage(text="sys"), UserMessage(text="u1"), AssistantMessage(text="a1")),
        summary="first summary",
        summary_seq=4,
        covers_through=3,
    )
    history = (*first.history, *entries(AssistantMessage(text="a2"), start=5))
    second = apply_compaction(history, summary="second", summary_seq=6, covers_through=5)
    assert items_of(second.history) == [
        SystemMessage(text="sys"),
        CompactionSummary(text="second"),
        UserMessage(text="u1"),
    ]
    assert second.removed == 2  # the old summary and a2


def test_apply_result_equals_compose_history_of_its_parts() -> None:
    history = entries(
        SystemMessage(text="sys"),
        UserMessage(text="u1"),
        call("c1"),
        output("c1"),
        UserMessage(text="u2"),
        AssistantMessage(text="tail"),
    )
    result = apply_compaction(history, summary=SUMMARY, summary_seq=7, covers_through=5)
    summary_entry = HistoryEntry(seq=7, item=CompactionSummary(text=SUMMARY))
    assert result.history == compose_history(result.retained, summary_entry, history[5:])


def test_compose_history_puts_summary_after_leading_system_entries() -> None:
    retained = entries(SystemMessage(text="s1"), SystemMessage(text="s2"), UserMessage(text="u"))
    summary = HistoryEntry(seq=9, item=CompactionSummary(text=SUMMARY))
    tail = entries(AssistantMessage(text="t"), start=10)
    assert compose_history(retained, summary, tail) == (
        retained[0],
        retained[1],
        summary,
        retained[2],
        tail[0],
    )


def test_compose_history_with_nothing_retained_starts_with_summary() -> None:
    summary = HistoryEntry(seq=3, item=CompactionSummary(text=SUMMARY))
    assert compose_history((), summary, ()) == (summary,)


def test_apply_counts_removed_entries() -> None:
    history = entries(
        SystemMessage(text="sys"),
        UserMessage(text="u"),
        AssistantMessage(text="a"),
        call("c"),
        output("c"),
    )
    result = apply_compaction(history, summary=SUMMARY, summary_seq=6, covers_through=5)
    assert isinstance(result, CompactionResult)
    assert result.removed == len(history) - len(result.retained) == 3


def test_apply_rejects_negative_covers_through() -> None:
    with pytest.raises(CompactionError, match="covers_through"):
        apply_compaction(
            entries(UserMessage(text="u")), summary=SUMMARY, summary_seq=2, covers_through=-1
        )


def test_apply_rejects_history_whose_seqs_do_not_increase() -> None:
    history = (
        HistoryEntry(seq=2, item=UserMessage(text="a")),
        HistoryEntry(seq=2, item=UserMessage(text="b")),
    )
    with pytest.raises(CompactionError, match="increase"):
        apply_compaction(history, summary=SUMMARY, summary_seq=3, covers_through=2)


def test_apply_rejects_covers_through_that_splits_a_call_from_its_output() -> None:
    history = entries(UserMessage(text="u"), call("c1"), output("c1"))
    with pytest.raises(CompactionError, match="c1"):
        apply_compaction(history, summary=SUMMARY, summary_seq=4, covers_through=2)


def test_apply_rejects_covers_through_older_than_a_previous_summary() -> None:
    first = apply_compaction(
        entries(UserMessage(text="u1"), AssistantMessage(text="a1")),
        summary="s",
        summary_seq=10,
        covers_through=2,
    )  # history is now [summary@10, u1@1]
    with pytest.raises(CompactionError, match="prefix"):
        apply_compaction(first.history, summary="t", summary_seq=11, covers_through=5)


def test_apply_with_covers_through_zero_keeps_everything_after_the_summary() -> None:
    history = entries(UserMessage(text="u"), AssistantMessage(text="a"))
    result = apply_compaction(history, summary=SUMMARY, summary_seq=3, covers_through=0)
    assert result.history == (HistoryEntry(seq=3, item=CompactionSummary(text=SUMMARY)), *history)
    assert result.retained == ()
    assert result.removed == 0


# estimate_tokens / item_chars


def test_item_chars_counts_what_the_model_reads() -> None:
    assert item_chars(UserMessage(text="hello")) == 5
    assert item_chars(FunctionCall(call_id="c1", name="ls", arguments="{}")) == 6
    assert item_chars(FunctionCallOutput(call_id="c1", output="abc")) == 5
    assert item_chars(CompactionSummary(text="")) == 0


def test_estimate_tokens_rounds_up_characters_over_ratio() -> None:
    assert estimate_tokens([UserMessage(text="abcde")]) == 2
    assert estimate_tokens([UserMessage(text="abcdefgh")], chars_per_token=2.0) == 4
    assert estimate_tokens([]) == 0


def test_estimate_tokens_rejects_non_positive_ratio() -> None:
    with pytest.raises(ConfigError):
        estimate_tokens([UserMessage(text="x")], chars_per_token=0)


# Property: on any history made of whole rounds, compaction keeps the invariants.


@st.composite
def round_histories(draw: st.DrawFn) -> tuple[tuple[HistoryEntry, ...], int]:
    """A history of whole steps (user, assistant, call+output pairs) and a boundary between
    steps to compact through."""
    items: list[Item] = []
    boundaries = [0]
    if draw(st.booleans()):
        items.append(SystemMessage(text=draw(st.text(alphabet="abc xyz", max_size=5))))
        boundaries.append(1)
    for number in range(draw(st.integers(min_value=0, max_value=12))):
        kind = draw(st.sampled_from(["user", "assistant", "tool", "system"]))
        text = draw(st.text(alphabet="abc xyz", max_size=30))
        if kind == "user":
            items.append(UserMessage(text=text, pinned=draw(st.booleans())))
        elif kind == "assistant":
            items.append(AssistantMessage(text=text))
        elif kind == "system":
            items.append(SystemMessage(text=text))
        else:
            # A round's calls come first, then their outputs: one step, never split.
            call_ids = [f"c{number}-{pair}" for pair in range(draw(st.integers(1, 3)))]
            items.extend(call(call_id) for call_id in call_ids)
            items.extend(output(call_id) for call_id in call_ids)
        boundaries.append(len(items))
    covers_through = draw(st.sampled_from(boundaries))
    return entries(*items), covers_through


@given(round_histories(), st.integers(min_value=0, max_value=60))
def test_apply_property_no_orphans_system_first_one_summary(
    case: tuple[tuple[HistoryEntry, ...], int], budget: int
) -> None:
    history, covers_through = case
    summary_seq = len(history) + 1
    result = apply_compaction(
        history,
        summary=SUMMARY,
        summary_seq=summary_seq,
        covers_through=covers_through,
        user_budget_chars=budget,
    )
    out = items_of(result.history)

    calls = {i.call_id for i in out if isinstance(i, FunctionCall)}
    outputs = {i.call_id for i in out if isinstance(i, FunctionCallOutput)}
    assert calls == outputs  # every kept call has its output and no output lacks its call

    summaries = [e for e in result.history if isinstance(e.item, CompactionSummary)]
    assert summaries == [HistoryEntry(seq=summary_seq, item=CompactionSummary(text=SUMMARY))]

    if covers_through >= 1 and history and isinstance(history[0].item, SystemMessage):
        assert result.history[0] == history[0]
        assert result.history[1] == summaries[0]

    compacted = [e for e in history if e.seq <= covers_through]
    tail = tuple(e for e in history if e.seq > covers_through)
    assert result.history[len(result.history) - len(tail) :] == tail
    assert result.removed == len(compacted) - len(result.retained)
    assert set(result.retained) <= set(compacted)
    assert all(isinstance(e.item, SystemMessage | UserMessage) for e in result.retained)
    pinned = [e for e in compacted if isinstance(e.item, UserMessage) and e.item.pinned]
    assert set(pinned) <= set(result.retained)
    summary_entry = summaries[0]
    assert result.history == compose_history(result.retained, summary_entry, tail)


@given(round_histories(), round_histories())
def test_apply_property_compacting_again_keeps_one_summary_and_system_first(
    first_case: tuple[tuple[HistoryEntry, ...], int],
    later_case: tuple[tuple[HistoryEntry, ...], int],
) -> None:
    """A second compaction over a compacted history absorbs the first summary."""
    history, _ = first_case
    first = apply_compaction(
        history, summary="one", summary_seq=len(history) + 1, covers_through=len(history)
    )
    later, _ = later_case
    start = len(history) + 2
    later = tuple(HistoryEntry(seq=start + i, item=e.item) for i, e in enumerate(later))
    grown = (*first.history, *later)
    final_seq = start + len(later)
    second = apply_compaction(
        grown, summary="two", summary_seq=final_seq, covers_through=final_seq - 1
    )
    out = items_of(second.history)
    assert [i for i in out if isinstance(i, CompactionSummary)] == [CompactionSummary(text="two")]
    assert not any(isinstance(i, FunctionCall | FunctionCallOutput) for i in out)
    if history and isinstance(history[0].item, SystemMessage):
        assert second.history[0] == history[0]
