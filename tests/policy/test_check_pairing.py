"""``stowage check`` flags what a provider would refuse: an output without its call, a call
without its output, in the history a resume would send."""

from __future__ import annotations

from stowage.core import (
    ApprovalRecord,
    CompactionRecord,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    ItemRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    UserMessage,
)
from stowage.policy import check_log
from stowage.testing import orphan_calls, orphan_outputs


def log_with_a_compaction_over_an_open_call() -> list[Record]:
    """What a compaction that covered a call awaiting approval left (the bug this guards)."""
    call = FunctionCall(call_id="deploy", name="deploy", arguments="{}")
    user = UserMessage(text="deploy it")
    return [
        SessionRecord(seq=1, model="m"),
        ItemRecord(seq=2, item=user),
        ItemRecord(seq=3, item=call, round=1),
        ApprovalRecord(seq=4, call_id="deploy", decision="requested"),
        CompactionRecord(
            seq=5,
            summary="s",
            covers_through=4,
            retained=(HistoryEntry(seq=2, item=user),),
            reason="manual",
            tokens_before=None,
            tokens_after=None,
            removed=1,
            round=0,
        ),
        ApprovalRecord(seq=6, call_id="deploy", decision="approved"),
        ItemRecord(seq=7, item=FunctionCallOutput(call_id="deploy", output="ok"), round=1),
        RoundCommittedRecord(seq=8, round=1, usage=None, first_seq=7, last_seq=8),
    ]


def test_an_output_whose_call_a_compaction_absorbed_is_a_problem() -> None:
    records = log_with_a_compaction_over_an_open_call()
    report = check_log("s", records, [records[0], *records[4:]])
    assert not report.ok
    assert any("output of call 'deploy'" in p and "without its call" in p for p in report.problems)


def test_a_sound_log_with_a_call_awaiting_approval_has_no_pairing_problem() -> None:
    records = log_with_a_compaction_over_an_open_call()[:4]
    report = check_log("s", records, records)
    assert report.ok, report.problems
    assert any("waits for approval" in n for n in report.notes)


def test_the_wire_check_flags_outputs_without_calls_on_both_apis() -> None:
    chat = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "gone", "content": "ok"},
        ]
    }
    responses = {"input": [{"type": "function_call_output", "call_id": "gone", "output": "ok"}]}
    assert orphan_outputs(chat) == ["gone"] and orphan_calls(chat) == []
    assert orphan_outputs(responses) == ["gone"] and orphan_calls(responses) == []


def test_a_call_awaiting_approval_is_noted_as_waiting_not_as_interrupted() -> None:
    """A resume leaves a call that waits for approval waiting (it never gets an
    "interrupted" output); ``check`` says so, and what answers it."""
    call = FunctionCall(call_id="deploy", name="deploy", arguments="{}")
    waiting = [
        SessionRecord(seq=1, model="m"),
        ItemRecord(seq=2, item=UserMessage(text="deploy it")),
        ItemRecord(seq=3, item=call, round=1),
        ApprovalRecord(seq=4, call_id="deploy", decision="requested"),
    ]
    report = check_log("s", waiting, waiting)
    [note] = report.notes
    assert "waits for approval" in note and "deploy" in note and "interrupted" not in note
    crashed = check_log("s", waiting[:3], waiting[:3])
    assert any("'interrupted' outputs" in n for n in crashed.notes)
