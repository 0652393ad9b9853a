"""The pure compaction policy: budget, token accounting, watermark decisions, fallback."""

from __future__ import annotations

import pytest
from stowage import Settings
from stowage.core._errors import ConfigError
from stowage.core._gateway import ToolSpec
from stowage.core._items import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    SystemMessage,
    UserMessage,
)
from stowage.core._records import (
    CompactionRecord,
    ItemRecord,
    MicrocompactRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    Usage,
)
from stowage.core._replay import replay
from stowage.core._settings import DEFAULT_COMPACT_THRESHOLD
from stowage.policy._budget import (
    Budget,
    effective_threshold,
    lookup_model,
    resolve_budget,
    summary_input_budget,
    tool_schema_tokens,
)
from stowage.policy._fallback import digest, fallback_summary
from stowage.policy._tokens import TokenStatus, calibrated_ratio, token_status
from stowage.policy._watermarks import (
    Watermarks,
    decide,
    drop_oldest_rounds,
    microcompact_candidates,
    rounds_to_hard_mark,
    tokens_after_compaction,
)

SPEC = ToolSpec(name="big", description="d", parameters={"type": "object"})


def status(tokens: int | None, *, estimated: bool = False) -> TokenStatus:
    return TokenStatus(
        tokens=tokens, estimated=estimated, reported=tokens, estimated_since=0, chars_per_token=4
    )


def rounds_log(outputs: list[str], usages: list[Usage | None]) -> list[Record]:
    """session, system, user, then one tool round per output, each committed with a usage."""
    records: list[Record] = [
        SessionRecord(seq=1, model="scripted"),
        ItemRecord(seq=2, item=SystemMessage(text="s" * 40)),
        ItemRecord(seq=3, item=UserMessage(text="u" * 40)),
    ]
    for n, (output, usage) in enumerate(zip(outputs, usages, strict=True), start=1):
        seq = records[-1].seq
        records += [
            ItemRecord(seq=seq + 1, item=FunctionCall(call_id=f"c{n}", name="big", arguments="{}"), round=n),
            ItemRecord(seq=seq + 2, item=FunctionCallOutput(call_id=f"c{n}", output=output), round=n),
            RoundCommittedRecord(seq=seq + 3, round=n, usage=usage, first_seq=seq + 2, last_seq=seq + 3),
        ]  # fmt: skip
    return records


# budget


def test_registry_matches_exact_names_dated_snapshots_and_provider_prefixes() -> None:
    assert (
        lookup_model("gpt-4o") == lookup_model("gpt-4o-2024-08-06") == lookup_model("openai/gpt-4o")
    )
    assert lookup_model("gpt-4o-mini") is not None
    assert lookup_model("gpt-4o-mini").context_window == 128_000  # type: ignore[union-attr]
    assert lookup_model("my-local-llama") is None


def test_usable_budget_is_window_less_output_reserve_less_tool_schemas() -> None:
    settings = Settings(model="unknown-model", context_window=10_000, max_output_tokens=1_000)
    budget = resolve_budget(settings, [SPEC])
    assert budget == Budget(
        context_window=10_000, output_reserve=1_000, tool_tokens=tool_schema_tokens([SPEC])
    )
    assert budget.usable == 9_000 - tool_schema_tokens([SPEC])


def test_registry_output_reserve_is_capped_at_a_quarter_of_the_window() -> None:
    budget = resolve_budget(Settings(model="o3"), [])
    assert budget is not None and budget.output_reserve == 50_000


def test_a_summary_request_may_carry_what_a_round_may_when_the_session_model_summarizes() -> None:
    # the session's own output reserve, not a quarter of the window: a request at the
    # compaction mark must fit its summary request without dropping rounds
    own = Settings(model="in-house-model", context_window=10_000, max_output_tokens=1000)
    assert summary_input_budget(own) == 9000
    assert summary_input_budget(Settings(model="in-house-model", context_window=10_000)) == 7500
    # another model summarizes: its own window and reserve
    other = own.with_(compact_model="gpt-4o-mini")
    limits = lookup_model("gpt-4o-mini")
    assert limits is not None
    assert summary_input_budget(other) == limits.context_window - min(
        limits.max_output_tokens, limits.context_window // 4
    )
    assert summary_input_budget(Settings(model="in-house-model")) is None


def test_explicit_threshold_wins_and_unknown_models_fall_back_to_the_seed_threshold() -> None:
    assert effective_threshold(Settings(model="gpt-4o", compact_threshold=123)) == 123
    assert effective_threshold(Settings(model="gpt-4o")) is None
    assert effective_threshold(Settings(model="mystery", context_window=5000)) is None
    assert effective_threshold(Settings(model="mystery")) == DEFAULT_COMPACT_THRESHOLD
    assert resolve_budget(Settings(model="mystery"), []) is None


def test_a_window_with_no_room_for_history_is_refused() -> None:
    with pytest.raises(ConfigError, match="no room"):
        resolve_budget(Settings(model="x", context_window=100, max_output_tokens=100), [])


def test_watermark_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="watermarks"):
        Settings(soft_mark=0.9, compact_mark=0.8)
    with pytest.raises(ConfigError, match="target_after"):
        Settings(target_after=0.9)


# token accounting


def test_ratio_is_four_before_any_report_and_calibrated_after() -> None:
    assert calibrated_ratio(replay("s", rounds_log(["x" * 100], [None]))) == 4.0
    # history before round 2's request: 40 + 40 + 5 ("big{}"+"c1") + 102 chars = 189... measure it
    state = replay(
        "s",
        rounds_log(
            ["x" * 2000, "y" * 2000],
            [None, Usage(input_tokens=700, output_tokens=5, total_tokens=705)],
        ),
    )
    assert state.calib_rounds == 1 and state.calib_tokens == 700
    assert calibrated_ratio(state) == pytest.approx(state.calib_chars / 700)
    assert calibrated_ratio(state) < 4.0  # this provider counts more tokens than chars/4


def test_tokens_are_reported_usage_plus_an_estimate_of_what_came_after() -> None:
    usage = Usage(input_tokens=300, output_tokens=10, total_tokens=310)
    state = replay("s", rounds_log(["x" * 800], [usage]))
    got = token_status(state)
    # the round's own output was not part of the request the usage reports on
    assert got.reported == 310 and not got.estimated
    assert got.estimated_since > 0 and got.tokens == 310 + got.estimated_since


def test_without_any_report_the_figure_is_an_estimate_and_says_so() -> None:
    state = replay("s", rounds_log(["x" * 800], [None]))
    got = token_status(state, tool_tokens=10)
    assert got.estimated and got.reported is None
    # tool schemas are outside usable, so outside the figure too (counted once)
    assert got.tokens == -(-state.projected_chars // 4) and got.tool_tokens == 10


def test_require_reported_usage_gives_no_figure_without_a_report() -> None:
    state = replay("s", rounds_log(["x" * 800], [None]))
    assert token_status(state, require_reported=True).tokens is None
    assert decide(token_status(state, require_reported=True), 1000, Watermarks()).action == "none"


def test_microcompaction_lowers_the_reported_figure_by_what_it_stubbed() -> None:
    usage = Usage(input_tokens=2000, output_tokens=10, total_tokens=2010)
    records = rounds_log(["x" * 4000, "y" * 40], [None, usage])
    before = token_status(replay("s", records)).tokens
    stub = MicrocompactRecord(
        seq=records[-1].seq + 1, stubbed=(5,), reason="r", tokens_before=None, tokens_after=None
    )
    after = token_status(replay("s", [*records, stub])).tokens
    assert before is not None and after is not None and before - after > 800


def test_compaction_record_carries_the_calibration_so_tail_replay_agrees() -> None:
    usage = Usage(input_tokens=900, output_tokens=10, total_tokens=910)
    records = rounds_log(["x" * 3000, "y" * 3000], [usage, usage])
    compaction = CompactionRecord(
        seq=records[-1].seq + 1, summary="sum", covers_through=records[-1].seq, retained=(),
        reason="r", tokens_before=1, tokens_after=1, removed=1, round=2, chars_per_token=3.25,
    )  # fmt: skip
    full = replay("s", [*records, compaction])
    tail = replay("s", [records[0], compaction])
    assert calibrated_ratio(full) == calibrated_ratio(tail) == pytest.approx(3.25)
    assert token_status(full) == token_status(tail)


# decisions


@pytest.mark.parametrize(
    ("tokens", "action", "watermark"),
    [
        (690, "none", None),
        (700, "microcompact", "soft"),
        (850, "compact", "compact"),
        (950, "block", "hard"),
        (2000, "block", "hard"),
    ],
)
def test_watermarks_map_fractions_of_the_usable_budget_to_actions(
    tokens: int, action: str, watermark: str | None
) -> None:
    decision = decide(status(tokens), 1000, Watermarks())
    assert (decision.action, decision.watermark) == (action, watermark)
    assert decision.fraction == pytest.approx(tokens / 1000)
    assert str(tokens) in decision.reason


def entries(*items: object, start: int = 1) -> list[HistoryEntry]:
    return [HistoryEntry(seq=start + i, item=item) for i, item in enumerate(items)]  # type: ignore[arg-type]


def tool_round(n: int, size: int) -> list[object]:
    return [
        AssistantMessage(text=f"step {n}"),
        FunctionCall(call_id=f"c{n}", name="big", arguments="{}"),
        FunctionCallOutput(call_id=f"c{n}", output=str(n) * size),
    ]


def _hard_in(steps: list[int], **changes: object) -> int | None:
    """``rounds_to_hard_mark`` on a 10,000-token budget with the default marks."""
    figures: dict[str, object] = {
        "tokens": 5000,
        "floor": 5000,
        "floor_step": 1000.0,  # nothing a round adds can be stubbed, unless a test says so
        "usable": 10_000,
        "marks": Watermarks(),
        "micro_min_free": 0.2,
        "armed": True,
    }
    figures.update(changes)
    return rounds_to_hard_mark(steps=steps, **figures)  # type: ignore[arg-type]


def test_the_forecast_finds_the_round_that_reaches_the_hard_mark() -> None:
    # 5,000 + 1,000 a round, nothing to stub: the request after round 5 is at 10,000 >= 9,500
    assert _hard_in([1000] * 5) == 5
    assert _hard_in([1000] * 4) is None
    # the order of the rounds matters only through microcompaction: a burst is a burst
    assert _hard_in([100, 100, 4400]) == 3
    assert _hard_in([4500, 100]) == 1


def test_the_forecast_counts_on_the_stubs_microcompaction_would_make() -> None:
    # 7,000 with 4,000 of old outputs stubbable: once the next round may reach the compaction
    # mark, a batch stubs them, and the hard mark is not reached in three rounds
    assert _hard_in([1000] * 3, tokens=7000, floor=3000) is None
    # disarmed (it stubbed already in this crossing of the soft mark), it does not: 10,000
    assert _hard_in([1000] * 3, tokens=7000, floor=3000, armed=False) == 3
    # a batch must free micro_min_free of the budget: 500 stubbable tokens do not make one
    assert _hard_in([1000] * 3, tokens=7000, floor=6500) == 3
    # with micro_min_free 0 any stub is made, armed or not: 800 stubbable tokens keep 8,400
    # plus 1,200 below the hard mark
    assert _hard_in([1200], tokens=8400, floor=7600) == 1
    assert _hard_in([1200], tokens=8400, floor=7600, micro_min_free=0.0, armed=False) is None


def test_the_forecast_never_stubs_the_newest_rounds_growth() -> None:
    # nothing old to stub; the newest three rounds (keep_rounds) stay whole, so two rounds of
    # 1,300 take 7,000 to 9,600 whatever microcompaction does
    assert _hard_in([1300, 1300], tokens=7000, floor=7000) == 2
    # older rounds become stubbable as they leave the newest three: all but floor_step of each
    assert _hard_in([1000] * 6, tokens=6000, floor=6000, micro_min_free=0.0, floor_step=0) is None
    assert _hard_in([1000] * 6, tokens=6000, floor=6000, micro_min_free=0.0) == 4


def test_microcompact_spares_the_newest_rounds_small_outputs_and_stubbed_ones() -> None:
    history = entries(
        SystemMessage(text="s"),
        UserMessage(text="u"),
        *[i for n in range(5) for i in tool_round(n, 1000)],
        *tool_round(9, 10),
    )
    seqs = microcompact_candidates(history, stubbed={5}, keep_rounds=3)
    # rounds 0..5 (6 rounds): the newest 3 are kept; round 0's output (seq 5) is stubbed already
    assert seqs == (8, 11)
    assert (
        microcompact_candidates(history, stubbed=(), keep_rounds=0, min_chars=1)[-1]
        == history[-1].seq
    )


def test_dropping_oldest_rounds_never_separates_a_call_from_its_output() -> None:
    history = entries(
        SystemMessage(text="s"),
        UserMessage(text="u"),
        *[i for n in range(4) for i in tool_round(n, 10)],
    )
    kept, dropped = drop_oldest_rounds(history, 2)
    assert dropped == 2
    calls = {e.item.call_id for e in kept if isinstance(e.item, FunctionCall)}
    outputs = {e.item.call_id for e in kept if isinstance(e.item, FunctionCallOutput)}
    assert calls == outputs == {"c2", "c3"}
    assert [type(e.item) for e in kept[:2]] == [SystemMessage, UserMessage]


def test_estimated_tokens_after_compaction_count_what_stays() -> None:
    history = entries(
        SystemMessage(text="s" * 40), UserMessage(text="u" * 40), *tool_round(1, 4000)
    )
    after = tokens_after_compaction(
        history, stubbed=(), covers_through=history[-1].seq, user_budget_chars=20_000,
        summary_chars=400, chars_per_token=4.0, fixed_tokens=7,
    )  # fmt: skip
    assert after == 7 + (40 + 40 + 400) // 4


# fallback


def test_fallback_digest_names_tools_errors_arguments_and_is_deterministic() -> None:
    items = [
        FunctionCall(call_id="a", name="read_file", arguments='{"path": "x.py"}'),
        FunctionCallOutput(call_id="a", output="error: no such file", is_error=True),
        FunctionCall(call_id="b", name="read_file", arguments='{"path": "y.py"}'),
        FunctionCallOutput(call_id="b", output="ok"),
        AssistantMessage(text="found it"),
    ]
    text = digest(items)
    assert "read_file x2" in text and "error: no such file" in text
    assert "path=x.py" in text and "found it" in text
    summary = fallback_summary(items, reason="breaker open", max_chars=500)
    assert summary == fallback_summary(items, reason="breaker open", max_chars=500)
    assert "breaker open" in summary and len(summary) <= 500
