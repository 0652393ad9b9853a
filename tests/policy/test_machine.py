"""The compaction machine on its own, without an event loop: one event in, state and actions out.

Figures: no usage is reported, so tokens are characters / 4 (tool schemas are outside usable
and outside the figure). Four 2,000-character outputs are ~2,016 tokens; twenty of 500
characters (too short to stub) are ~2,562.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import anyio
from stowage.actors import SessionContext
from stowage.actors._journal import Journal
from stowage.actors._messages import Append
from stowage.core import (
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
from stowage.policy import (
    Accounting,
    Action,
    Apply,
    Boundary,
    BoundaryCause,
    Decided,
    Hold,
    Job,
    MachineState,
    Manual,
    Phase,
    Plan,
    Skipped,
    Snapshot,
    Stop,
    Stub,
    Stubs,
    Summarize,
    SummaryFailed,
    SummaryReady,
    step,
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


class _Drop:
    def put(self, snapshot: Snapshot, /) -> None:
        return None


class Rig:
    """The machine of one session, stepped by hand; ``actions`` holds every action so far."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.accounting = Accounting.of(settings, ())
        self.state = MachineState(accounting=self.accounting)
        self.actions: list[Action] = []

    def snapshot(self, records: Sequence[Record], cause: BoundaryCause = "round") -> Snapshot:
        send, receive = anyio.create_memory_object_stream[Append](1)
        send.close()
        receive.close()
        ctx = SessionContext(
            session_id="s",
            settings=self.settings,
            gateway=cast(ModelGateway, None),
            tools=ToolRegistry(),
            publish=lambda event: None,
            persistence=send,  # type: ignore[arg-type]
        )
        journal = Journal(
            ctx=ctx, state=replay("s", records), compactor=_Drop(), accounting=self.accounting
        )
        return journal.snapshot(cause)

    def step(self, event: Any) -> tuple[Action, ...]:
        self.state, actions = step(self.state, event)
        self.actions += actions
        return actions

    def decide(
        self, records: Sequence[Record], cause: BoundaryCause = "round"
    ) -> tuple[Action, ...]:
        return self.step(Boundary(self.snapshot(records, cause)))

    def skipped(self) -> list[str]:
        return [a.reason for a in self.actions if isinstance(a, Skipped)]

    def decided(self) -> list[str]:
        return [a.decision.action for a in self.actions if isinstance(a, Decided)]


def job_of(actions: Sequence[Action]) -> Job | None:
    jobs = [a.job for a in actions if isinstance(a, Summarize)]
    return jobs[-1] if jobs else None


def stubs_of(actions: Sequence[Action]) -> list[Stubs]:
    return [a.stubs for a in actions if isinstance(a, Stub)]


def plan_of(actions: Sequence[Action]) -> Plan | None:
    plans = [a.plan for a in actions if isinstance(a, Apply)]
    return plans[-1] if plans else None


def held(actions: Sequence[Action]) -> bool:
    return any(isinstance(a, Hold) for a in actions)


def stop_of(actions: Sequence[Action]) -> Stop | None:
    stops = [a for a in actions if isinstance(a, Stop)]
    return stops[-1] if stops else None


def plan_for(job: Job, summary: str = "twenty reads, all fine") -> Plan:
    return Plan(
        round=job.snapshot.round,
        summary=summary,
        covers_through=job.covers_through,
        reason=job.reason,
        tokens_before=job.tokens,
        estimated=True,
        based_on_compaction_seq=job.snapshot.last_compaction_seq,
    )


def test_below_the_soft_mark_nothing_is_done_and_no_summary_is_asked() -> None:
    rig = Rig(watermark_settings(10_000))
    assert rig.decide(rounds_log(BIG_OUTPUTS)) == ()
    assert rig.state.phase is Phase.IDLE


def test_the_soft_mark_stubs_old_outputs_in_one_batch_without_a_summary() -> None:
    rig = Rig(watermark_settings(2800))
    actions = rig.decide(rounds_log(BIG_OUTPUTS))
    assert job_of(actions) is None and not held(actions)
    [stubs] = stubs_of(actions)
    # every old output at once: it frees at least micro_min_free (20%) of 2800
    assert len(stubs.seqs) == 3 and stubs.kind == "micro"
    assert stubs.tokens_before is not None and stubs.tokens_after is not None
    assert stubs.tokens_before - stubs.tokens_after >= 0.20 * 2800
    assert rig.decided() == ["microcompact"]


def test_the_compaction_mark_asks_for_a_summary_in_the_background() -> None:
    rig = Rig(watermark_settings(2900))
    log = rounds_log(SMALL_OUTPUTS)
    actions = rig.decide(log)
    job = job_of(actions)
    assert job is not None and not job.urgent and not held(actions)
    assert job.covers_through == log[-1].seq  # between turns: everything
    assert rig.state.phase is Phase.SUMMARIZING
    # a second boundary while the summary is made asks for nothing more
    assert job_of(rig.decide(log)) is None


def test_mid_turn_the_summary_keeps_the_newest_rounds_that_fit_verbatim() -> None:
    rig = Rig(watermark_settings(2900))
    log = rounds_log(SMALL_OUTPUTS, turn_open=True)
    job = job_of(rig.decide(log))
    assert job is not None
    last_round_start = log[-3].seq
    assert job.covers_through < last_round_start  # the turn's newest rounds are not covered


def test_the_hard_mark_holds_the_request_while_the_summary_is_made_and_the_plan_lands() -> None:
    rig = Rig(watermark_settings(2650))
    actions = rig.decide(rounds_log(SMALL_OUTPUTS))
    job = job_of(actions)
    assert job is not None and job.urgent and held(actions)
    landed = rig.step(SummaryReady(job.id, plan_for(job), now=1.0))
    plan = plan_of(landed)
    assert plan is not None and not held(landed)
    assert rig.state.phase is Phase.ADVISED and rig.state.plan == plan


def test_a_failed_summary_at_the_hard_mark_falls_back_without_a_model() -> None:
    rig = Rig(watermark_settings(2650))
    job = job_of(rig.decide(rounds_log(SMALL_OUTPUTS)))
    assert job is not None
    plan = plan_of(rig.step(SummaryFailed(job.id, "refused", now=1.0)))
    assert plan is not None and plan.kind == "fallback"


def test_when_nothing_can_be_freed_the_turn_stops_with_the_figures() -> None:
    # 5 usable tokens: the system and user messages alone are over the hard mark, and a
    # compaction keeps both, so it would free nothing
    rig = Rig(watermark_settings(5))
    actions = rig.decide(rounds_log([]))
    stop = stop_of(actions)
    assert job_of(actions) is None and stop is not None and stop.kind == "overflow"
    assert "cannot free more" in stop.message and "usable 5" in stop.message
    assert rig.state.phase is Phase.STOPPED


def test_a_call_awaiting_approval_is_never_covered_by_a_manual_compaction() -> None:
    rig = Rig(watermark_settings(10_000))
    log = rounds_log(BIG_OUTPUTS, turn_open=True)
    seq = log[-1].seq
    waiting = FunctionCall(call_id="deploy", name="deploy", arguments="{}")
    log.append(ItemRecord(seq=seq + 1, item=waiting, round=5))
    snap = rig.snapshot(log, "approval")
    assert snap.open_calls == {"deploy"}
    rig.step(Boundary(snap))
    actions = rig.step(Manual(ask_id=1, focus="x"))
    job = job_of(actions)
    assert job is not None and held(actions)
    # everything before the waiting round is covered, the round itself is not
    assert seq - 1 <= job.covers_through < seq + 1
    assert job.kind == "manual" and job.focus == "x"


def test_below_the_hard_mark_a_plan_that_frees_too_little_is_not_applied() -> None:
    rig = Rig(watermark_settings(2900, micro_min_free=0.6))
    job = job_of(rig.decide(rounds_log(SMALL_OUTPUTS)))
    assert job is not None
    # a summary nearly as long as what it replaces frees next to nothing
    landed = rig.step(SummaryReady(job.id, plan_for(job, summary="z" * 9000), now=1.0))
    assert plan_of(landed) is None
    [skipped] = [r for r in rig.skipped() if "not applied" in r]
    assert "micro_min_free 60%" in skipped


def test_no_plan_that_grows_history_is_given_whoever_asked_for_it() -> None:
    rig = Rig(watermark_settings(10_000))
    log = rounds_log(["a" * 700])
    rig.decide(log, "turn")
    actions = rig.step(Manual(ask_id=1))
    job = job_of(actions)
    assert job is not None
    landed = rig.step(SummaryReady(job.id, plan_for(job, summary="s" * 5000), now=1.0))
    assert plan_of(landed) is None and not held(landed)
    assert any("no smaller" in r for r in rig.skipped())


def test_a_plan_landing_mid_turn_reattaches_what_the_turn_read() -> None:
    # every plan worth its break here (micro_min_free off), so the one landing is checked
    rig = Rig(watermark_settings(2900, reattach_share=0.3, micro_min_free=0.0))
    log = rounds_log(SMALL_OUTPUTS, turn_open=True)
    job = job_of(rig.decide(log))
    assert job is not None
    everything = replace(job, covers_through=log[-1].seq)
    rig.state = replace(rig.state, job=everything)
    plan = plan_of(rig.step(SummaryReady(job.id, plan_for(everything), now=1.0)))
    assert plan is not None and plan.reattach
    # the newest reads, whole steps: each call with its output
    kept = set(plan.reattach)
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
    steps = growing.state.forecast.steps
    assert steps and min(steps) > 450
    actions = growing.decide(log)
    assert not stubs_of(actions)
    assert growing.decided() == ["microcompact"]
    cold = Rig(settings)
    [stubs] = stubs_of(cold.decide(log))
    assert len(stubs.seqs) == 2


def test_with_micro_min_free_zero_every_round_past_the_soft_mark_stubs_whatever_the_growth() -> (
    None
):
    rig = Rig(watermark_settings(2800, micro_min_free=0.0).with_(keep_rounds=2))
    for n in range(1, len(BIG_OUTPUTS)):
        rig.decide(rounds_log(BIG_OUTPUTS[:n]))
    [stubs] = stubs_of(rig.decide(rounds_log(BIG_OUTPUTS)))
    assert len(stubs.seqs) == 2
