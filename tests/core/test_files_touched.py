"""The trail of files touched, pure: what the tool calls write into the protected state, how
a compaction carries it, and that it never changes the request between compactions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stowage.core._errors import ProtectedStateViolation
from stowage.core._protected import (
    TOUCHED_KEPT,
    ProtectedState,
    Touched,
    prepare,
    render,
    render_touched,
)

KINDS = ("read", "list", "search", "write", "edit")


def touch(kind: str, target: str, status: str = "") -> dict[str, Any]:
    op: dict[str, Any] = {"op": "touch", "kind": kind, "target": target}
    if status:
        op["status"] = status
    return op


#: a touch, or ``None`` for "a compaction happens here"
steps = st.lists(
    st.one_of(
        st.none(),
        st.builds(
            touch,
            st.sampled_from(KINDS),
            st.sampled_from([f"src/m{i}.py" for i in range(45)]),
        ),
        st.builds(
            touch,
            st.just("run"),
            st.sampled_from(["pytest -q", "make lint", "ls"]),
            st.sampled_from(["exit 0", "exit 1", ""]),
        ),
    ),
    max_size=120,
)


def play(ops: list[dict[str, Any] | None]) -> tuple[ProtectedState, list[ProtectedState]]:
    """Apply ``ops``, carrying at each ``None`` as a compaction does (through its snapshot,
    which is what replay starts from); returns the end state and the state after each op."""
    state, seen = ProtectedState(), []
    for op in ops:
        if op is None:
            state = ProtectedState.from_snapshot(state.snapshot())
        else:
            state = state.apply(prepare(state, op, "tools"))
        seen.append(state)
    return state, seen


@given(steps)
def test_the_request_text_changes_only_at_a_compaction(ops: list[dict[str, Any] | None]) -> None:
    state = ProtectedState()
    for op in ops:
        if op is None:
            state = ProtectedState.from_snapshot(state.snapshot())
            continue
        after = state.apply(prepare(state, op, "tools"))
        assert render(after) == render(state), "a touch changed the protected message"
        state = after


@given(steps)
def test_the_carried_trail_is_bounded_unique_and_newest_first(
    ops: list[dict[str, Any] | None],
) -> None:
    state, _ = play(ops)
    carried = state.carried()
    assert len(carried.touched) <= TOUCHED_KEPT
    keys = [(t.target, t.is_command) for t in carried.touched]
    assert len(keys) == len(set(keys)), "a path or command has two lines"
    assert not carried.fresh
    touched = [op for op in ops if op is not None]
    if touched:
        last = touched[-1]
        front = carried.touched[0]
        assert front.target == last["target"]
        assert last["kind"] in front.kinds


@given(steps)
def test_nothing_touched_is_dropped_without_being_counted(
    ops: list[dict[str, Any] | None],
) -> None:
    state, _ = play(ops)
    carried = state.carried()
    targets = {(op["target"], op["kind"] == "run") for op in ops if op is not None}
    kept = {(t.target, t.is_command) for t in carried.touched}
    # every target is on a line of its own, or among the lines the fold counted and named
    folded = targets - kept
    assert len(folded) <= carried.earlier
    assert {target for target, _ in folded} <= set(carried.earlier_named)


@given(steps)
def test_replay_from_a_snapshot_is_the_carried_state(ops: list[dict[str, Any] | None]) -> None:
    state, _ = play(ops)
    assert ProtectedState.from_snapshot(state.snapshot()) == state.carried()
    assert state.carried().carried() == state.carried()


def test_a_path_read_then_edited_is_one_line_saying_both() -> None:
    state, _ = play(
        [
            touch("read", "a.py"),
            touch("read", "b.py"),
            touch("edit", "a.py"),
            touch("run", "pytest -q", "exit 1"),
            touch("run", "pytest -q", "exit 0"),
            None,
        ]
    )
    assert [t.line for t in state.touched] == [
        "ran `pytest -q` (exit 0)",
        "read/edit a.py",
        "read b.py",
    ]
    assert render_touched(state).startswith("Files touched (from the tool calls, newest first):")
    assert "- read/edit a.py" in render(state)


def test_past_the_kept_lines_the_oldest_fold_into_one_named_line() -> None:
    ops: list[dict[str, Any] | None] = [touch("read", f"f{i}.py") for i in range(TOUCHED_KEPT + 3)]
    state, _ = play([*ops, None])
    assert len(state.touched) == TOUCHED_KEPT
    assert state.touched[0] == Touched(target=f"f{TOUCHED_KEPT + 2}.py", kinds=("read",))
    assert state.earlier == 3
    assert render_touched(state).endswith("- and 3 earlier: f2.py, f1.py, f0.py")


@pytest.mark.parametrize("source", ["user", "summarizer"])
def test_only_the_runtime_writes_the_trail(source: str) -> None:
    with pytest.raises(ProtectedStateViolation, match="written by the runtime"):
        prepare(ProtectedState(), touch("read", "a.py"), source)  # type: ignore[arg-type]


def test_the_tool_calls_write_nothing_but_the_trail() -> None:
    with pytest.raises(ProtectedStateViolation, match="only add to the trail"):
        prepare(ProtectedState(), {"op": "add_decision", "text": "x"}, "tools")
    with pytest.raises(ProtectedStateViolation, match="kind 'delete'"):
        prepare(ProtectedState(), touch("delete", "a.py"), "tools")
