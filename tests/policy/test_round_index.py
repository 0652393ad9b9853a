"""``RoundIndex``: extended item by item, or after a compaction replaced the history, it is
the index scanned anew, and what it answers is what a whole scan of the history answers."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st
from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    SystemMessage,
    UserMessage,
)
from stowage.policy import RoundIndex, microcompact_candidates, round_groups, turn_rounds

KINDS = ("system", "user", "text", "call", "output", "summary")


def item(kind: str, number: int) -> Item:
    match kind:
        case "system":
            return SystemMessage(text="be brief")
        case "user":
            return UserMessage(text=f"task {number}")
        case "text":
            return AssistantMessage(text=f"thinking {number}")
        case "call":
            return FunctionCall(call_id=f"c{number}", name="read", arguments="{}")
        case "output":
            return FunctionCallOutput(call_id=f"c{number}", output="x" * (number % 7 * 200))
        case _:
            return CompactionSummary(text=f"summary {number}")


def history_of(kinds: Sequence[str], first_seq: int = 1) -> tuple[HistoryEntry, ...]:
    return tuple(
        HistoryEntry(seq=first_seq + i, item=item(kind, first_seq + i))
        for i, kind in enumerate(kinds)
    )


def scanned(history: Sequence[HistoryEntry]) -> list[list[int]]:
    """The groups as a scan of the whole history makes them (the definition, spelled out)."""
    groups: list[list[int]] = []
    current: list[int] | None = None
    after_output = False
    for index, entry in enumerate(history):
        if isinstance(entry.item, AssistantMessage | FunctionCall):
            if current is None or after_output:
                current = []
                groups.append(current)
            current.append(index)
            after_output = False
        elif isinstance(entry.item, FunctionCallOutput) and current is not None:
            current.append(index)
            after_output = True
        else:
            current, after_output = None, False
    return [g for g in groups if any(isinstance(history[i].item, FunctionCall) for i in g)]


kinds = st.lists(st.sampled_from(KINDS), max_size=30)


@given(st.lists(st.tuples(kinds, st.booleans()), min_size=1, max_size=8))
def test_an_index_extended_boundary_by_boundary_is_the_one_scanned_anew(
    steps: list[tuple[list[str], bool]],
) -> None:
    """Each step appends items (a committed batch) or replaces the history (a compaction):
    the index kept across the steps equals the index of the new history made from scratch,
    and its groups are the whole scan's."""
    kept = RoundIndex()
    history: tuple[HistoryEntry, ...] = ()
    for added, replaced in steps:
        seq = history[-1].seq + 1 if history else 1
        if replaced:
            history = history_of(["summary", *added], seq)
        else:
            history = history + history_of(added, seq)
        kept = kept.extended(history)
        assert kept == RoundIndex.of(history)
        assert round_groups(history) == scanned(history)


@given(kinds, kinds, st.integers(0, 4), st.sets(st.integers(1, 60)))
def test_what_an_extended_index_answers_is_what_the_whole_history_answers(
    before: list[str], after: list[str], keep: int, stubbed: set[int]
) -> None:
    """Turn rounds and old outputs read from an index extended by the newest items are those
    of the whole history."""
    head = history_of(before)
    history = head + history_of(after, len(head) + 1)
    kept = RoundIndex.of(head).extended(history)
    groups = scanned(history)
    users = [i for i, e in enumerate(history) if isinstance(e.item, UserMessage)]
    turn = [g for g in groups if users and g[0] > users[-1]]
    assert len(kept.turn_rounds()) == turn_rounds(history) == len(turn)
    old = [
        e.seq
        for g in groups[: max(0, len(groups) - keep)]
        for e in (history[i] for i in g)
        if isinstance(e.item, FunctionCallOutput)
        and e.seq not in stubbed
        and len(e.item.output) >= 600
    ]
    assert microcompact_candidates(history, stubbed, keep, rounds=kept) == tuple(old)
    assert microcompact_candidates(history, stubbed, keep) == tuple(old)
