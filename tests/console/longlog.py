"""A long session's log, made record by record: many turns of a few rounds of one call each, a
compaction every ``every`` rounds (with the figures the machine records), and optional spikes,
rounds that read something far above the usable budget, each brought back by a compaction."""

from __future__ import annotations

from collections.abc import Collection

from stowage.core import (
    AssistantMessage,
    CompactionFigures,
    CompactionRecord,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    ItemRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SystemMessage,
    TurnRecord,
    Usage,
    UserMessage,
)
from stowage.facade import recorded_budget

WINDOW = 6000
SPIKE = 7000  # tokens a spike round reports: above the usable budget of WINDOW


def long_session(
    rounds: int,
    *,
    every: int = 20,
    per_turn: int = 5,
    spikes: Collection[int] = (),
    user: str = "keep going",
    output: str = "line of output\n" * 4,
) -> list[Record]:
    """``rounds`` rounds, ``per_turn`` to a turn (each turn asked by ``user``, each round one
    ``read_file`` with ``output``); a compaction after every ``every``-th round and after each
    round in ``spikes``, which report ``SPIKE`` input tokens."""
    session = SessionRecord(seq=1, model="scripted", context_window=WINDOW)
    usable = recorded_budget([session]).usable
    system = SystemMessage(text="be brief")
    records: list[Record] = [session, ItemRecord(seq=2, item=system)]
    seq, turn, tokens = 2, 0, 400
    asked = HistoryEntry(seq=2, item=system)

    for round_ in range(1, rounds + 1):
        if (round_ - 1) % per_turn == 0:
            turn += 1
            message = UserMessage(text=f"{user} ({turn})")
            asked = HistoryEntry(seq=seq + 1, item=message)
            records.append(ItemRecord(seq=seq + 1, item=message))
            records.append(TurnRecord(seq=seq + 2, turn=turn, phase="started"))
            seq += 2
        call = FunctionCall(
            call_id=f"c{round_}", name="read_file", arguments=f'{{"path": "f{round_}.txt"}}'
        )
        tokens = SPIKE if round_ in spikes else tokens + 150
        records += [
            ItemRecord(seq=seq + 1, round=round_, item=call),
            ItemRecord(
                seq=seq + 2,
                round=round_,
                item=FunctionCallOutput(call_id=call.call_id, output=output),
            ),
            RoundCommittedRecord(
                seq=seq + 3,
                round=round_,
                usage=Usage(input_tokens=tokens, output_tokens=20, total_tokens=tokens + 20),
                first_seq=seq + 1,
                last_seq=seq + 3,
            ),
        ]
        seq += 3
        last_of_turn = round_ % per_turn == 0 or round_ == rounds
        if round_ % every == 0 or round_ in spikes:
            after = 300
            records.append(
                CompactionRecord(
                    seq=seq + 1,
                    summary=f"summary after round {round_}",
                    covers_through=seq,
                    retained=(HistoryEntry(seq=2, item=system), asked),
                    reason=f"{tokens + 20} tokens at or above the compact mark",
                    tokens_before=tokens + 20,
                    tokens_after=after,
                    removed=3,
                    round=round_,
                    turn=turn,
                    turn_open=True,
                    figures=CompactionFigures(
                        decided_tokens=tokens, usable=usable, tool_tokens=0, hard=0.95
                    ),
                )
            )
            seq += 1
            tokens = after
        if last_of_turn:
            records.append(ItemRecord(seq=seq + 1, item=AssistantMessage(text=f"done {turn}")))
            records.append(TurnRecord(seq=seq + 2, turn=turn, phase="finished"))
            seq += 2
    return records
