"""The compactor's decisions, without an event loop: one committed snapshot in, one advice out.

Figures: no usage is reported, so tokens are characters / 4 (tool schemas are outside usable
and outside the figure). Four 2,000-character outputs are ~2,016 tokens; twenty of 500
characters (too short to stub) are ~2,562.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import anyio
import structlog
from stowage.actors import Advice, Ask, CommittedSnapshot, Plan, PlanFailed, SessionContext
from stowage.actors._accounting import Accounting
from stowage.actors._control import Control, SummaryJob
from stowage.actors._journal import Journal
from stowage.actors._messages import Append, SnapshotCause
from stowage.core import (
    CompactionDecided,
    CompactionSkipped,
    Event,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    ModelGateway,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    Settings,
    SystemMessage,
    TurnRecord,
    UserMessage,
    replay,
)
from stowage.tools import ToolRegistry

BIG_OUTPUTS = ["x" * 2000] * 4
SMALL_OUTPUTS = ["y" * 500] * 20


def watermark_settings(usable: int, **changes: Any) -> Settings:
    """Watermark mode with ``usable`` tokens for history; microcompaction spares one round."""
    return Settings(
        model="mystery",
        context_window=usable + 1000,
        max_output_tokens=1000,
        tools="none",
        keep_rounds=1,
        **changes,
    )


def rounds_log(outputs: Sequence[str], *, turn_open: bool = False) -> list[Record]:
    """session, system, user (a turn started when ``turn_open``), one round per output."""
    records: list[Record] = [
        SessionRecord(seq=1, model="mystery"),
        ItemRecord(seq=2, item=SystemMessage(text="be brief")),
        ItemRecord(seq=3, item=UserMessage(text="read every file")),
    ]
    if turn_open:
        records.append(TurnRecord(seq=4, turn=1, phase="started"))
    for n, output in enumerate(outputs, start=1):
        seq = records[-1].seq
        call = FunctionCall(call_id=f"c{n}", name="read", arguments=f'{{"n": {n}}}')
        records += [
            ItemRecord(seq=seq + 1, item=call, round=n),
            ItemRecord(seq=seq + 2, item=FunctionCallOutput(call_id=f"c{n}", output=output), round=n),
            RoundCommittedRecord(seq=seq + 3, round=n, usage=None, first_seq=seq + 2, last_seq=seq + 3),
        ]  # fmt: skip
    return records


class Rig:
    """A ``Control`` and the events it published."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.events: list[Event] = []
        self.accounting = Accounting(settings, ())
        self.control = Control(
            self.accounting, self.events.append, structlog.get_logger("test").bind()
        )

    def snapshot(
        self, records: Sequence[Record], cause: SnapshotCause = "round"
    ) -> CommittedSnapshot:
        send, receive = anyio.create_memory_object_stream[Append](1)
        send.close()
        receive.close()
        ctx = SessionContext(
            session_id="s",
            settings=self.settings,
            gateway=cast(ModelGateway, None),
            tools=ToolRegistry(),
            publish=self.events.append,
            persistence=send,
        )
        journal = Journal(
            ctx=ctx, state=replay("s", records), compactor=_Drop(), accounting=self.accounting
        )
        return journal.snapshot(cause)

    def decide(
        self, records: Sequence[Record], cause: SnapshotCause = "round"
    ) -> tuple[Advice, SummaryJob | None]:
        return self.control.decide(self.snapshot(records, cause), now=0.0)

    def published(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


class _Drop:
    def put(self, snapshot: CommittedSnapshot, /) -> None:
        return None


def plan_for(job: SummaryJob, summary: str = "twenty reads, all fine") -> Plan:
    return Plan(
        round=job.snapshot.round,
        summary=summary,
        covers_through=job.covers_through,
        reason=job.reason,
        tokens_before=job.tokens,
        estimated=True,
        based_on_compaction_seq=job.snapshot.last_compaction_seq,
    )


def test_below_the_soft_mark_the_verdict_is_empty_and_no_summary_is_asked() -> None:
    rig = Rig(watermark_settings(10_000))
    advice, job = rig.decide(rounds_log(BIG_OUTPUTS))
    assert advice == Advice(basis_seq=advice.basis_seq) and job is None
    assert rig.events == []


def test_the_soft_mark_stubs_old_outputs_in_one_batch_without_a_summary() -> None:
    rig = Rig(watermark_settings(2800))
    log = rounds_log(BIG_OUTPUTS)
    advice, job = rig.decide(log)
    assert job is None and not advice.block
    [stubs] = advice.stubs
    # every old output at once: it frees at least micro_min_free (20%) of 2800
    assert len(stubs.seqs) == 3 and stubs.kind == "micro"
    assert stubs.tokens_before is not None and stubs.tokens_after is not None
    assert stubs.tokens_before - stubs.tokens_after >= 0.20 * 2800
    assert [e.action for e in rig.published(CompactionDecided)] == ["microcompact"]


def test_the_compaction_mark_asks_for_a_summary_in_the_background() -> None:
    rig = Rig(watermark_settings(2900))
    log = rounds_log(SMALL_OUTPUTS)
    advice, job = rig.decide(log)
    assert job is not None and not job.urgent and not advice.block
    assert job.covers_through == log[-1].seq  # between turns: everything
    # a second snapshot while the summary is made asks for nothing more
    assert rig.decide(log)[1] is None


def test_mid_turn_the_summary_keeps_the_newest_rounds_that_fit_verbatim() -> None:
    rig = Rig(watermark_settings(2900))
    log = rounds_log(SMALL_OUTPUTS, turn_open=True)
    _, job = rig.decide(log)
    assert job is not None
    last_round_start = log[-3].seq
    assert job.covers_through < last_round_start  # the turn's newest rounds are not covered


def test_the_hard_mark_blocks_while_the_summary_is_made_and_the_plan_lands() -> None:
    rig = Rig(watermark_settings(2650))
    log = rounds_log(SMALL_OUTPUTS)
    advice, job = rig.decide(log)
    assert job is not None and job.urgent and advice.block
    landed = rig.control.landed(job, plan_for(job), now=1.0)
    assert isinstance(landed.outcome, Plan) and not landed.block
    assert rig.control.job is None and rig.control.pending is landed.outcome


def test_a_failed_summary_at_the_hard_mark_falls_back_without_a_model() -> None:
    rig = Rig(watermark_settings(2650))
    _, job = rig.decide(rounds_log(SMALL_OUTPUTS))
    assert job is not None
    landed = rig.control.landed(job, PlanFailed(round=20, error="refused"), now=1.0)
    assert isinstance(landed.outcome, Plan) and landed.outcome.kind == "fallback"


def test_when_nothing_can_be_freed_the_turn_stops_with_the_figures() -> None:
    # 5 usable tokens: the system and user messages alone are over the hard mark, and a
    # compaction keeps both, so it would free nothing
    rig = Rig(watermark_settings(5))
    advice, job = rig.decide(rounds_log([]))
    assert job is None and advice.stop is not None and advice.stop_kind == "overflow"
    assert "cannot free more" in advice.stop and "usable 5" in advice.stop
    assert [e.reason for e in rig.published(CompactionSkipped)] == [
        "a compaction would free only 0 of 6 tokens"
    ]


def test_a_call_awaiting_approval_is_never_covered_by_a_manual_compaction() -> None:
    rig = Rig(watermark_settings(10_000))
    log = rounds_log(BIG_OUTPUTS, turn_open=True)
    seq = log[-1].seq
    waiting = FunctionCall(call_id="deploy", name="deploy", arguments="{}")
    log.append(ItemRecord(seq=seq + 1, item=waiting, round=5))
    snap = rig.snapshot(log, "approval")
    assert snap.open_calls == {"deploy"}
    rig.control.decide(snap, now=0.0)
    advice, job = rig.control.ask(snap, Ask(ask_id=1, kind="manual", focus="x"), now=0.0)
    assert job is not None and advice.block and advice.answers == 1
    # everything before the waiting round is covered, the round itself is not
    assert seq - 1 <= job.covers_through < seq + 1
    assert job.kind == "manual" and job.focus == "x"


def test_below_the_hard_mark_a_plan_that_frees_too_little_is_not_applied() -> None:
    rig = Rig(watermark_settings(2900, micro_min_free=0.6))
    _, job = rig.decide(rounds_log(SMALL_OUTPUTS))
    assert job is not None
    # a summary as long as what it replaces frees next to nothing
    landed = rig.control.landed(job, plan_for(job, summary="z" * 9000), now=1.0)
    assert landed.outcome is None
    [skipped] = rig.published(CompactionSkipped)
    assert "not applied" in skipped.reason and "micro_min_free 60%" in skipped.reason


def test_a_plan_landing_mid_turn_reattaches_what_the_turn_read() -> None:
    # every plan worth its break here (micro_min_free off), so the one landing is checked
    rig = Rig(watermark_settings(2900, reattach_share=0.3, micro_min_free=0.0))
    log = rounds_log(SMALL_OUTPUTS, turn_open=True)
    _, job = rig.decide(log)
    assert job is not None
    everything = replace(job, covers_through=log[-1].seq)
    landed = rig.control.landed(everything, plan_for(everything), now=1.0)
    assert isinstance(landed.outcome, Plan) and landed.outcome.reattach
    # the newest reads, whole steps: each call with its output
    kept = set(landed.outcome.reattach)
    assert log[-2].seq in kept and log[-3].seq in kept


def test_when_rounds_are_large_a_batch_must_buy_four_of_them_before_it_breaks_the_prefix() -> None:
    """Each round adds ~500 tokens (a sixth of the budget): stubbing the two old outputs would
    free ~1,000, more than micro_min_free (20%) but less than four such rounds, so it waits
    for the compaction mark; seen cold (no growth known), the same snapshot stubs them."""
    settings = watermark_settings(2800).with_(keep_rounds=2)
    log = rounds_log(BIG_OUTPUTS)
    growing = Rig(settings)
    for n in range(1, len(BIG_OUTPUTS)):
        growing.decide(rounds_log(BIG_OUTPUTS[:n]))
    steps = growing.control.forecast.steps
    assert steps and min(steps) > 450
    assert growing.control.planner.min_free_tokens() == min(4 * max(steps), 1400)
    advice, _ = growing.decide(log)
    assert not advice.stubs
    assert [e.action for e in growing.published(CompactionDecided)] == ["microcompact"]
    cold = Rig(settings)
    [stubs] = cold.decide(log)[0].stubs
    assert len(stubs.seqs) == 2


def test_with_micro_min_free_zero_every_round_past_the_soft_mark_stubs_whatever_the_growth() -> (
    None
):
    rig = Rig(watermark_settings(2800, micro_min_free=0.0).with_(keep_rounds=2))
    for n in range(1, len(BIG_OUTPUTS)):
        rig.decide(rounds_log(BIG_OUTPUTS[:n]))
    assert rig.control.planner.min_free_tokens() == 0
    [stubs] = rig.decide(rounds_log(BIG_OUTPUTS))[0].stubs
    assert len(stubs.seqs) == 2
