"""The two refusals that keep a session out of a compaction loop, as pure functions."""

from __future__ import annotations

import pytest
from stowage.core import (
    ConfigError,
    HistoryEntry,
    ProtectedState,
    Settings,
    SystemMessage,
    ToolSpec,
)
from stowage.policy import (
    MIN_HISTORY_TOKENS,
    check_window,
    compaction_shrinks,
    fixed_request_tokens,
)

SPEC = ToolSpec(name="read_file", description="d" * 3000, parameters={"type": "object"})


def test_a_window_that_leaves_too_little_for_history_is_refused_with_the_figures() -> None:
    settings = Settings(model="local", context_window=1800)
    with pytest.raises(ConfigError) as raised:
        check_window(settings, [SPEC], system_tokens=300, protected_tokens=20)
    message = str(raised.value)
    assert message.startswith("context window 1800 tokens is too small: system 300 + protected")
    assert "output reserve 450" in message and "--tools none" in message
    assert f"at least {MIN_HISTORY_TOKENS} needed" in message


def test_a_window_that_leaves_room_gives_the_budget() -> None:
    budget = check_window(
        Settings(model="local", context_window=16_000),
        [SPEC],
        system_tokens=300,
        protected_tokens=0,
    )
    assert budget is not None and budget.context_window == 16_000


def test_threshold_mode_has_no_window_to_check() -> None:
    settings = Settings(model="local", compact_threshold=1000)
    assert check_window(settings, [SPEC], system_tokens=10_000, protected_tokens=0) is None


def test_a_window_with_no_room_even_for_the_reserve_is_refused_with_the_tools_hint() -> None:
    settings = Settings(model="local", context_window=400, max_output_tokens=500)
    with pytest.raises(ConfigError, match="lower --max-output-tokens"):
        check_window(settings, [], system_tokens=0, protected_tokens=0)


def test_fixed_tokens_count_system_messages_and_protected_state() -> None:
    history = [HistoryEntry(seq=2, item=SystemMessage(text="s" * 400))]
    system, protected = fixed_request_tokens(history, ProtectedState())
    assert (system, protected) == (100, 0)


def test_a_summary_no_smaller_than_what_it_replaces_is_skipped() -> None:
    assert compaction_shrinks(replaced_chars=4000, summary_chars=1000) is None
    reason = compaction_shrinks(replaced_chars=1000, summary_chars=1000)
    assert reason is not None and "no smaller" in reason
    assert compaction_shrinks(replaced_chars=100, summary_chars=400) is not None
