"""What a compaction leaves the turn in flight, pure: no open call covered, recent reads kept."""

from __future__ import annotations

import pytest
from stowage.core import (
    AssistantMessage,
    CompactionError,
    CompactionSummary,
    Cycle,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    SystemMessage,
    UserMessage,
    apply_compaction,
)
from stowage.policy import Forecast, Watermarks, loop_message, reattach_seqs, safe_cover


def history(*items: Item) -> tuple[HistoryEntry, ...]:
    return tuple(HistoryEntry(seq=n, item=item) for n, item in enumerate(items, start=2))


def read(cid: str, path: str) -> FunctionCall:
    return FunctionCall(call_id=cid, name="read_file", arguments=f'{{"path": "{path}"}}')


def out(cid: str, size: int) -> FunctionCallOutput:
    return FunctionCallOutput(call_id=cid, output="x" * size)


TURN = history(
    SystemMessage(text="sys"),  # 2
    UserMessage(text="old turn"),  # 3
    read("o1", "old.txt"),  # 4
    out("o1", 500),  # 5
    AssistantMessage(text="done"),  # 6
    UserMessage(text="read a, b and c"),  # 7
    read("a", "a.txt"),  # 8
    out("a", 1000),  # 9
    read("b", "b.txt"),  # 10
    out("b", 3000),  # 11
    AssistantMessage(text="now c"),  # 12
    read("c", "c.txt"),  # 13
)


def test_a_compaction_never_covers_an_open_call_nor_the_text_of_its_round() -> None:
    assert safe_cover(TURN, 13, open_calls=()) == 13
    # c awaits approval: the round's assistant text and call stay with the output to come
    assert safe_cover(TURN, 14, open_calls={"c"}) == 11
    assert safe_cover(TURN[:-2], 11, open_calls={"gone"}) == 11


def test_reattach_keeps_the_newest_reads_of_the_turn_that_fit_whole_steps_only() -> None:
    closed = TURN[:-1]  # the turn's reads a and b are whole steps
    everything = reattach_seqs(closed, covers_through=11, budget_chars=100_000)
    assert everything == (8, 9, 10, 11)  # never the older turn's read
    # room for one: the newest (b) does not fit, the older, smaller a does
    assert reattach_seqs(closed, covers_through=11, budget_chars=1100) == (8, 9)
    # reads after covers_through stay anyway: nothing to re-attach
    assert reattach_seqs(closed, covers_through=9, budget_chars=100_000) == (8, 9)
    assert reattach_seqs(closed, covers_through=11, budget_chars=0) == ()
    result = apply_compaction(
        closed, summary="s", summary_seq=20, covers_through=11, reattach=(8, 9)
    )
    kept = [e.seq for e in result.history]
    assert kept == [2, 20, 3, 7, 8, 9, 12]  # system, summary, user words, the re-read step


def test_a_reattached_call_without_its_output_is_refused() -> None:
    with pytest.raises(CompactionError, match="whole tool steps"):
        apply_compaction(TURN[:-1], summary="s", summary_seq=20, covers_through=11, reattach=(8,))


def test_the_same_read_twice_is_reattached_once_the_newest() -> None:
    twice = (
        *TURN[:-1],
        HistoryEntry(seq=14, item=read("a2", "a.txt")),
        HistoryEntry(seq=15, item=out("a2", 1000)),
    )
    assert reattach_seqs(twice, covers_through=15, budget_chars=100_000) == (10, 11, 14, 15)


def test_the_loop_message_names_the_call_the_cycle_and_the_figures() -> None:
    cycles = tuple(
        Cycle(reissued=True, call=("read_file", '{"path": "big.txt"}'), output_chars=6000)
        for _ in range(3)
    )
    message = loop_message(
        cycles,
        turn=2,
        compactions=3,
        context_window=8000,
        usable=5000,
        tool_tokens=700,
        chars_per_token=4.0,
    )
    assert "turn 2" in message and "3 times in a row" in message
    assert 'read_file({"path": "big.txt"})' in message and "~1500 tokens" in message
    assert "8000 tokens, 5000 of them usable" in message and "700 tokens of tool schemas" in message


def test_the_forecast_asks_early_when_a_plan_would_land_after_the_hard_mark() -> None:
    forecast = Forecast()
    marks = Watermarks()
    for n, tokens in enumerate((5600, 6200, 6800, 7400)):
        forecast = forecast.observe(tokens, floor=tokens, now=float(n))
    forecast = forecast.plan_took(3.0)  # three rounds' time
    assert forecast.plan_rounds() == 3
    # asked a round later, back 3 rounds after: 7400 + 4 x 600 is past the hard mark (9500)
    why = forecast.lands_late(7400, usable=10_000, marks=marks, micro_min_free=0.2, armed=True)
    assert why is not None and "+600 tokens a round" in why
    calm = Forecast()
    for n, tokens in enumerate((5000, 5010, 5020)):
        calm = calm.observe(tokens, floor=tokens, now=float(n))
    assert calm.lands_late(5020, usable=10_000, marks=marks, micro_min_free=0.2, armed=True) is None


def test_after_a_compaction_the_cover_before_an_open_call_is_past_the_summary() -> None:
    """Retained user words sit after the summary with older seqs: the cover must still be a
    prefix of the history, so it ends at the newest seq before the open round."""
    compacted = (
        HistoryEntry(seq=2, item=SystemMessage(text="sys")),
        HistoryEntry(seq=11, item=CompactionSummary(text="summary")),
        HistoryEntry(seq=3, item=UserMessage(text="deploy")),
        HistoryEntry(seq=12, item=read("d", "deploy.sh")),
    )
    covers = safe_cover(compacted, 12, open_calls={"d"})
    assert covers == 11
    apply_compaction(compacted, summary="s", summary_seq=13, covers_through=covers)


def test_a_second_compaction_while_the_same_call_waits_covers_nothing() -> None:
    """A summary made while a call waited is newer than the call: any cover that reaches past
    that summary would take the call, so none is allowed until the call is answered."""
    compacted = (
        HistoryEntry(seq=2, item=SystemMessage(text="sys")),
        HistoryEntry(seq=60, item=CompactionSummary(text="summary")),
        HistoryEntry(seq=3, item=UserMessage(text="deploy")),
        HistoryEntry(seq=55, item=read("d", "deploy.sh")),
    )
    assert safe_cover(compacted, 61, open_calls={"d"}) == 0
