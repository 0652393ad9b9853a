"""Protected state, pure: ops and who may make them, rendering, the check, the summarizer's
updates block, replay, and the scripted summarizer's proposals and lossiness."""

from __future__ import annotations

import pytest
from stowage.core._errors import CorruptLogError, ProtectedStateViolation
from stowage.core._gateway import ModelRequest
from stowage.core._items import (
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    Item,
    SystemMessage,
    UserMessage,
)
from stowage.core._protected import ProtectedState, prepare, prepare_all, render, user_ops, verify
from stowage.core._protected_updates import (
    UPDATES_INSTRUCTIONS,
    parse_summary_updates,
    review_updates,
    updates_block,
)
from stowage.core._records import CompactionRecord, ProtectedRecord, SessionRecord
from stowage.core._replay import replay
from stowage.model._brain import ScriptedBrain
from stowage.policy._compaction import SUMMARY_INSTRUCTIONS, build_summary_request

NEVER_COMMIT = "never commit code"
PY312 = "must stay compatible with Python 3.12"


def user_state(*constraints: str, objective: str = "port the parser") -> ProtectedState:
    state, _ = prepare_all(
        ProtectedState(), user_ops(objective=objective, add_constraints=constraints), "user"
    )
    return state


def test_user_ops_get_stable_ids_that_are_never_reused() -> None:
    state = user_state(NEVER_COMMIT, PY312)
    assert [(e.id, e.text) for e in state.entries] == [
        ("o1", "port the parser"),
        ("c1", NEVER_COMMIT),
        ("c2", PY312),
    ]
    state, ops = prepare_all(
        state, user_ops(drop_constraints=["c2"], add_constraints=["timeout is 37 s"]), "user"
    )
    assert ops == (
        {"op": "drop_constraint", "id": "c2"},
        {"op": "add_constraint", "id": "c3", "text": "timeout is 37 s"},
    )
    assert [e.id for e in state.constraints] == ["c1", "c3"]


@pytest.mark.parametrize(
    ("op", "entry"),
    [
        ({"op": "drop_constraint", "id": "c1"}, "c1"),
        ({"op": "add_constraint", "text": "commit freely"}, "constraints"),
        ({"op": "set_objective", "text": "something else"}, "o1"),
    ],
)
def test_the_summarizer_may_never_touch_the_objective_or_a_constraint(
    op: dict[str, str], entry: str
) -> None:
    state = user_state(NEVER_COMMIT)
    with pytest.raises(ProtectedStateViolation, match=f"summarizer may not .*{entry}"):
        prepare(state, op, "summarizer")
    review = review_updates(state, [op, {"op": "add_decision", "text": "use tree-sitter"}])
    assert [r.entry for r in review.refused] == [entry]
    assert review.state.constraints == state.constraints
    assert review.state.objective == state.objective
    assert [e.text for e in review.state.decisions] == ["use tree-sitter"]


def test_pending_moves_to_completed_keeping_its_id_and_line() -> None:
    state, _ = prepare_all(
        ProtectedState(), [{"op": "add_pending", "text": "migrate the loader"}], "summarizer"
    )
    line = state.pending[0].line
    state, ops = prepare_all(state, [{"op": "complete_pending", "id": "p1"}], "summarizer")
    assert ops == ({"op": "complete_pending", "id": "p1"},)
    assert state.pending == () and [e.id for e in state.completed] == ["p1"]
    assert state.completed[0].line == line
    # completed work is not pending again, and cannot be completed twice
    assert prepare(state, {"op": "add_pending", "text": "migrate the loader"}, "summarizer") is None
    with pytest.raises(ProtectedStateViolation, match="no pending entry 'p1'"):
        prepare(state, {"op": "complete_pending", "id": "p1"}, "summarizer")


def test_repeating_an_entry_is_a_no_op_and_model_given_ids_are_ignored() -> None:
    state = user_state(NEVER_COMMIT)
    assert prepare(state, {"op": "add_constraint", "text": NEVER_COMMIT}, "user") is None
    op = prepare(state, {"op": "add_decision", "id": "c1", "text": "x"}, "summarizer")
    assert op == {"op": "add_decision", "id": "d1", "text": "x"}


@pytest.mark.parametrize(
    "op",
    [
        {"op": "add_constraint", "id": "c1", "text": "again"},  # id taken
        {"op": "add_constraint", "id": "d9", "text": "x"},  # a decision id
        {"op": "add_constraint", "text": "no id"},
        {"op": "add_constraint", "id": "c5", "text": "   "},
        {"op": "add_failed_attempt", "id": "f1", "what": "x"},  # no why
        {"op": "reword_constraint", "id": "c1", "text": "x"},
        {"op": "add_decision", "id": "d1", "text": 3},
    ],
)
def test_apply_refuses_an_op_that_cannot_apply(op: dict[str, object]) -> None:
    with pytest.raises(ProtectedStateViolation):
        user_state(NEVER_COMMIT).apply(op)


def test_snapshot_round_trips_and_keeps_the_id_serials() -> None:
    state, _ = prepare_all(
        user_state(NEVER_COMMIT, PY312),
        [
            {"op": "drop_constraint", "id": "c2"},
            {"op": "add_failed_attempt", "what": "pip install numpy==2.1", "why": "ABI mismatch"},
            {"op": "add_artifact", "ref": "/srv/conf.d/42.yaml", "note": "the live config"},
            {"op": "add_pending", "text": "a"},
            {"op": "add_pending", "text": "b"},
            {"op": "complete_pending", "id": "p1"},
        ],
        "user",
    )
    again = ProtectedState.from_snapshot(state.snapshot())
    assert again == state
    assert prepare(again, {"op": "add_constraint", "text": "new"}, "user") == {
        "op": "add_constraint",
        "id": "c3",
        "text": "new",
    }
    with pytest.raises(ProtectedStateViolation):
        ProtectedState.from_snapshot({"v": 2, "entries": []})


def test_render_shows_every_entry_verbatim_and_is_deterministic() -> None:
    odd = "keep `back-ticks`, 3.12.1 and\na second line"
    state, _ = prepare_all(
        user_state(NEVER_COMMIT, odd),
        [{"op": "add_failed_attempt", "what": "numpy 2.1", "why": "ABI mismatch"}],
        "summarizer",
    )
    text = render(state)
    assert text == render(ProtectedState.from_snapshot(state.snapshot()))
    for entry in state.entries:
        assert entry.line in text
    assert f"[c2] {odd}" in text
    assert "[f1] numpy 2.1 -- failed because: ABI mismatch" in text
    assert render(ProtectedState()) == ""


def test_verify_names_the_entries_a_projection_lost() -> None:
    state = user_state(NEVER_COMMIT, PY312)
    full = (SystemMessage(text="sys"), SystemMessage(text=render(state)))
    assert verify(state, full) == ()
    lossy = (SystemMessage(text=render(state).replace(PY312, "must stay compatible with 3.x")),)
    assert [e.id for e in verify(state, lossy)] == ["c2"]
    # a paraphrase in the summary does not count: only the verbatim line does
    assert [e.id for e in verify(state, (CompactionSummary(text=PY312),))] == ["o1", "c1", "c2"]


def test_parse_summary_updates_cuts_the_block_and_returns_its_ops() -> None:
    ops = [{"op": "add_decision", "text": "use tree-sitter"}]
    reply = "Summary line.\n\n" + updates_block(ops) + "\n"
    assert parse_summary_updates(reply) == ("Summary line.", tuple(ops), ())
    assert parse_summary_updates("Just a summary.") == ("Just a summary.", (), ())


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ('```json\n{"protected_updates": [ {"op": "add_decision", \n```', "not valid JSON"),
        ('```json\n{"protected_updates": {"op": "add_decision"}}\n```', "must hold a list"),
        (
            '```json\n{"protected_updates": [{"op": "add_decision", "text": "ok"}, '
            '{"op": "reword_constraint", "id": "c1", "text": "x"}]}\n```',
            "unknown protected-state op",
        ),
        ('```\n{"protected_updates": [{"op": "add_pending"}]}\n```', "'text' is missing"),
    ],
)
def test_a_malformed_updates_block_changes_nothing_and_is_reported(
    block: str, problem: str
) -> None:
    summary, ops, problems = parse_summary_updates("The summary.\n" + block)
    assert summary == "The summary."
    assert ops == ()
    assert len(problems) == 1 and problem in problems[0]


def test_summary_request_asks_for_the_updates_block_only_when_told() -> None:
    projection = (SystemMessage(text="sys"), SystemMessage(text="# Protected state\nP"))
    plain = build_summary_request(projection, model="m")
    asked = build_summary_request(projection, model="m", protected_updates=True)
    assert plain.input[-1] == UserMessage(text=SUMMARY_INSTRUCTIONS)
    assert asked.input[:-1] == projection  # the protected state is where every round has it
    instruction = asked.input[-1]
    assert isinstance(instruction, UserMessage)
    assert instruction.text.startswith(SUMMARY_INSTRUCTIONS)
    assert UPDATES_INSTRUCTIONS in instruction.text
    for op in ("add_decision", "add_failed_attempt", "add_artifact", "add_pending"):
        assert op in instruction.text
    assert "complete_pending" in instruction.text and "# Protected state" in instruction.text


def test_replay_folds_protected_records_and_a_compaction_snapshot_resets_them() -> None:
    state = user_state(NEVER_COMMIT)
    _, ops = prepare_all(ProtectedState(), user_ops(add_constraints=[NEVER_COMMIT]), "user")
    snapshot = user_state(PY312, objective="other").snapshot()
    records = [
        SessionRecord(seq=1, model="m"),
        ProtectedRecord(seq=2, ops=ops),
        CompactionRecord(
            seq=3,
            summary="s",
            covers_through=2,
            retained=(),
            reason="r",
            tokens_before=None,
            tokens_after=None,
            removed=0,
            round=0,
            protected=snapshot,
        ),
    ]
    assert replay("s", records[:2]).protected.constraints == state.constraints
    assert replay("s", records).protected == ProtectedState.from_snapshot(snapshot)


def test_replay_of_an_op_that_cannot_apply_is_a_corrupt_log() -> None:
    records = [
        SessionRecord(seq=1, model="m"),
        ProtectedRecord(seq=2, ops=({"op": "drop_constraint", "id": "c7"},)),
    ]
    with pytest.raises(CorruptLogError, match="no constraint 'c7'"):
        replay("s", records)


def _summary_request(*items: Item, protected: str = "") -> ModelRequest:
    """The summary request of a session whose round requests carry ``items`` after its
    system message and, when there is any, its ``protected`` state."""
    head = [SystemMessage(text="sys")] + ([SystemMessage(text=protected)] if protected else [])
    return build_summary_request([*head, *items], model="scripted", protected_updates=True)


def test_scripted_summarizer_proposes_failed_attempts_and_planted_facts() -> None:
    request = _summary_request(
        UserMessage(text="failed: pip install numpy==2.1 because ABI mismatch in _core.so"),
        UserMessage(text="pending: migrate the loader\ndecided: keep the C extension"),
        FunctionCall(call_id="k1", name="read_file", arguments='{"path": "x.txt"}'),
        FunctionCallOutput(call_id="k1", output="error: no such file: 'x.txt'", is_error=True),
    )
    summary, ops, problems = parse_summary_updates(ScriptedBrain()(request).text)
    assert problems == () and "```" not in summary
    assert ops == (
        {
            "op": "add_failed_attempt",
            "what": "pip install numpy==2.1",
            "why": "ABI mismatch in _core.so",
        },
        {"op": "add_pending", "text": "migrate the loader"},
        {"op": "add_decision", "text": "keep the C extension"},
        {
            "op": "add_failed_attempt",
            "what": 'read_file({"path": "x.txt"})',
            "why": "error: no such file: 'x.txt'",
        },
    )
    pending, _ = prepare_all(ProtectedState(), ops, "summarizer")
    done = _summary_request(UserMessage(text="done: migrate the loader"), protected=render(pending))
    assert parse_summary_updates(ScriptedBrain()(done).text)[1] == (
        {"op": "complete_pending", "id": "p1"},
    )


def test_lossy_summarizer_drops_a_seeded_fraction_of_facts_deterministically() -> None:
    facts = [UserMessage(text=f"fact number {n} is {n * 7}") for n in range(60)]
    request = _summary_request(*facts)
    exact = ScriptedBrain()(request).text
    lossy = ScriptedBrain(loss=0.5, seed=3)(request).text
    assert all(f.text in exact for f in facts)
    kept = sum(f.text in lossy for f in facts)
    assert 15 <= kept <= 45
    assert lossy == ScriptedBrain(loss=0.5, seed=3)(request).text
    assert lossy != ScriptedBrain(loss=0.5, seed=4)(request).text
