"""Every token is counted once, and never below what the characters imply.

A session with 15,000 tokens of tool schemas (an MCP server's, say) on a 32,000-token window:
the schemas are outside the usable budget, so they are not in the tokens in use either, on
the estimated path and on the reported one (where the provider counted them in its input).
An endpoint that reports 10 output tokens for a 30 MB answer does not hide it: the figure is
at least what the characters of the history imply.
"""

from __future__ import annotations

import math

import pytest
from stowage.core import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    ModelResponse,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    Settings,
    SystemMessage,
    ToolSpec,
    Usage,
    UserMessage,
    replay,
)
from stowage.policy import (
    Budget,
    TokenStatus,
    Watermarks,
    answer_chars,
    decide,
    oversized_answer,
    resolve_budget,
    token_status,
)

WINDOW = 32_000
# six tools whose descriptions take 10,000 characters each: about 15,000 tokens of schemas
SPECS = tuple(
    ToolSpec(
        name=f"mcp_tool_{n}",
        description=("Reads one record of the catalogue and explains each of its fields. " * 150)[
            :10_000
        ],
        parameters={"type": "object", "properties": {"id": {"type": "string"}}},
    )
    for n in range(6)
)
SYSTEM = "You keep the catalogue tidy. " * 20
USER = "Find the record about the blue kettle and tell me its price. " * 10
OUTPUT = "id: 42\nname: blue kettle\nprice: 19.90\n" * 30


def _budget() -> Budget:
    budget = resolve_budget(Settings(model="mcp-model", context_window=WINDOW), SPECS)
    assert budget is not None
    return budget


def _log(usage: Usage | None, *, answer: str = "Let me look it up.") -> list[Record]:
    """session, system, user, then one round: an answer and a call, its output, committed with
    ``usage`` (None: the provider reported none)."""
    return [
        SessionRecord(seq=1, model="mcp-model", context_window=WINDOW),
        ItemRecord(seq=2, item=SystemMessage(text=SYSTEM)),
        ItemRecord(seq=3, item=UserMessage(text=USER)),
        ItemRecord(seq=4, item=AssistantMessage(text=answer), round=1),
        ItemRecord(
            seq=5,
            item=FunctionCall(call_id="c1", name="mcp_tool_0", arguments='{"id": "42"}'),
            round=1,
        ),
        ItemRecord(seq=6, item=FunctionCallOutput(call_id="c1", output=OUTPUT), round=1),
        RoundCommittedRecord(seq=7, round=1, usage=usage, first_seq=4, last_seq=7),
    ]


def _provider_usage(tool_tokens: int, *, output_tokens: int) -> Usage:
    """What a provider reports for the round's request (system and user): the schemas and
    the history it read, counted a little denser than 4 characters a token."""
    history_tokens = math.ceil(len(SYSTEM + USER) / 3.8)
    input_tokens = tool_tokens + history_tokens
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


def test_usable_leaves_out_the_tool_schemas_of_a_big_tool_set() -> None:
    budget = _budget()
    assert 15_000 <= budget.tool_tokens < 15_200
    assert budget.usable == WINDOW - budget.output_reserve - budget.tool_tokens


def test_an_estimate_counts_history_only_so_a_small_history_is_a_small_share() -> None:
    budget = _budget()
    state = replay("s", _log(None))
    status = token_status(state, tool_tokens=budget.tool_tokens)
    assert status.estimated and not status.floored
    assert status.tokens == math.ceil(state.projected_chars / 4)
    assert status.tool_tokens == budget.tool_tokens
    share = status.fraction(budget.usable)
    # counting the schemas again would put this at 1.8 of usable: far past the hard mark
    assert share is not None and share < 0.15
    assert decide(status, budget.usable, Watermarks()).action == "none"


def test_reported_usage_that_includes_the_schemas_is_not_counted_twice() -> None:
    budget = _budget()
    usage = _provider_usage(budget.tool_tokens, output_tokens=12)
    state = replay("s", _log(usage))
    status = token_status(state, tool_tokens=budget.tool_tokens)
    assert not status.estimated and not status.floored
    assert status.reported == usage.total_tokens
    assert status.tokens == usage.total_tokens - budget.tool_tokens + status.estimated_since
    # the same history, estimated: both paths agree to within the provider's denser count
    estimate = token_status(replay("s", _log(None)), tool_tokens=budget.tool_tokens).tokens
    assert status.tokens is not None and estimate is not None
    assert abs(status.tokens - estimate) < 0.1 * estimate
    share = status.fraction(budget.usable)
    assert share is not None and share < 0.15
    assert decide(status, budget.usable, Watermarks()).action == "none"


def test_an_answer_of_30_mb_reported_as_10_tokens_counts_at_least_its_characters() -> None:
    budget = _budget()
    answer = "z" * 30_000_000
    state = replay("s", _log(_provider_usage(budget.tool_tokens, output_tokens=10), answer=answer))
    status = token_status(state, tool_tokens=budget.tool_tokens)
    assert status.floored and not status.estimated
    assert status.tokens == math.ceil(state.projected_chars / status.chars_per_token)
    assert status.tokens >= len(answer) / status.chars_per_token
    # the next request would be refused at the hard mark, not sent
    decision = decide(status, budget.usable, Watermarks())
    assert decision.action == "block"


def test_a_floor_never_lowers_a_figure_that_is_already_above_it() -> None:
    budget = _budget()
    usage = _provider_usage(budget.tool_tokens, output_tokens=5_000)  # a generous count
    status = token_status(replay("s", _log(usage)), tool_tokens=budget.tool_tokens)
    assert not status.floored
    assert status.tokens == usage.total_tokens - budget.tool_tokens + status.estimated_since


def test_without_a_report_and_reported_usage_required_there_is_no_figure() -> None:
    """No figure for the triggers, but the guard still has what the characters imply: a
    request above the limit is held even when compaction waits for a report."""
    state = replay("s", _log(None))
    status = token_status(state, tool_tokens=100, require_reported=True)
    floor = math.ceil(state.projected_chars / 4)
    assert status == TokenStatus(
        tokens=None,
        estimated=True,
        reported=None,
        estimated_since=0,
        chars_per_token=status.chars_per_token,
        tool_tokens=100,
        floor=floor,
    )
    assert status.guard == floor > 0


@pytest.mark.parametrize(("chars", "refused"), [(100, False), (101, True)])
def test_an_answer_is_refused_only_past_the_cap(chars: int, refused: bool) -> None:
    response = ModelResponse(
        items=(
            AssistantMessage(text="a" * (chars - 10)),
            FunctionCall(call_id="c1", name="t", arguments="b" * 10),
        ),
        usage=None,
        model="m",
    )
    assert answer_chars(response) == chars
    reason = oversized_answer(answer_chars(response), 100)
    assert (reason is not None) is refused
    if reason is not None:
        assert "max_answer_chars" in reason and "101" in reason
