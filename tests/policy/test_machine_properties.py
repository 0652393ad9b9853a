"""The compaction machine's promises, proved on ``step`` alone, in every mode.

Hypothesis drives one session through thousands of event sequences: turns whose agent, like a
real model, decides from each request alone (it reads again every file its request does not
show whole), refusals by a provider, summaries that come back short, long or not at all,
calls that wait for approval, manual compactions and milestones. The test is the shell: it
folds records exactly as the sampler does (``SessionState.apply``), builds each boundary with
``snapshot_of``, applies what ``step`` returns, and checks after every event:

- no request is let go at or above the limit (the hard mark, or a refusal's fit);
- no plan covers a call that is still open, and none leaves as much history as it found;
- a turn is stopped for overflow only when even a digest of everything cannot fit;
- a turn whose reads fit together is never stopped;
- a turn that cannot fit is stopped within three compactions of it.

No I/O, no event loop: each example is a few milliseconds.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import hypothesis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from stowage.core import (
    ApprovalRecord,
    AssistantMessage,
    CompactionRecord,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    MicrocompactRecord,
    MilestoneRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    SessionState,
    Settings,
    SystemMessage,
    TurnRecord,
    Usage,
    UserMessage,
    apply_compaction,
    history_chars,
)
from stowage.policy import (
    Accounting,
    Action,
    Apply,
    Boundary,
    BoundaryCause,
    Hold,
    Job,
    MachineState,
    Manual,
    Plan,
    Refusal,
    RoundIndex,
    Ruler,
    Stop,
    Stub,
    Summarize,
    SummaryFailed,
    SummaryReady,
    safe_cover,
    snapshot_of,
    step,
)

#: the modes: the seed's threshold, the watermarks, and their configurations
MODES: dict[str, dict[str, object]] = {
    "watermarks": {"context_window": 6000, "max_output_tokens": 500},
    "watermarks-tight": {
        "context_window": 3000,
        "max_output_tokens": 300,
        "soft_mark": 0.6,
        "compact_mark": 0.75,
    },
    "watermarks-no-background": {
        "context_window": 6000,
        "max_output_tokens": 500,
        "background_compaction": False,
    },
    "watermarks-every-round": {
        "context_window": 6000,
        "max_output_tokens": 500,
        "micro_min_free": 0.0,
    },
    "reported-only": {
        "context_window": 6000,
        "max_output_tokens": 500,
        "require_reported_usage": True,
    },
    "threshold": {"compact_threshold": 3000},
    "threshold-window": {
        "compact_threshold": 3000,
        "context_window": 5000,
        "max_output_tokens": 500,
    },
    "phases": {
        "context_window": 6000,
        "max_output_tokens": 500,
        "compact_every_turns": 2,
        "reground_every": 2,
    },
}


@dataclass(eq=False)
class Turn:
    """The files a turn reads (characters each) and what became of it."""

    files: tuple[int, ...]
    guarded: bool
    compactions: int = 0
    #: compactions since a request last went (a round committed)
    since_round: int = 0
    stopped: Stop | None = None
    answered: bool = False
    #: a provider refused one of its requests (what fits is then the provider's word)
    refused: bool = False


@dataclass(eq=False)
class Shell:
    """What the sampler and the compactor's shell do, without I/O."""

    settings: Settings
    accounting: Accounting
    state: SessionState
    machine: MachineState
    records: list[Record] = field(default_factory=list)
    jobs: dict[int, Job] = field(default_factory=dict)
    hold: bool = False
    fit: int | None = None
    ratio: float | None = None
    turn: Turn | None = None
    usage: str = "exact"
    asks: int = 0
    stopped: list[Turn] = field(default_factory=list)

    @classmethod
    def empty(cls) -> Shell:
        """A shell with no session yet (before ``start``): no rule but ``start`` applies."""
        settings = Settings(model="mystery", tools="none", context_window=6000)
        accounting = Accounting.of(settings, ())
        shell = cls(
            settings, accounting, SessionState(session_id="s"), MachineState(accounting=accounting)
        )
        shell.hold = True
        return shell

    @property
    def seq(self) -> int:
        return self.state.last_seq

    # -- the sampler's writes ---------------------------------------------------------------

    def write(
        self,
        records: list[Record],
        cause: BoundaryCause | None,
        *,
        refusal: Refusal | None = None,
        dropped: tuple[int, str] | None = None,
    ) -> None:
        for record in records:
            self.state.apply(record)
        self.records += records
        if cause is not None:
            snapshot = snapshot_of(
                self.state, self.accounting, cause, refusal=refusal, dropped=dropped
            )
            self.event(Boundary(snapshot))

    def event(self, event: Boundary | Manual | SummaryReady | SummaryFailed) -> None:
        self.machine, actions = step(self.machine, event)
        self.apply(actions)

    def apply(self, actions: tuple[Action, ...]) -> None:
        """Carry the actions out, as the shells do: jobs start, then the sampler applies the
        plan and the stubs (each a boundary of its own), then a stop."""
        self.hold = any(isinstance(a, Hold) for a in actions)
        for action in actions:
            if isinstance(action, Summarize):
                self.jobs[action.job.id] = action.job
        for action in actions:
            if isinstance(action, Apply):
                self.apply_plan(action.plan)
        for action in actions:
            if isinstance(action, Stub):
                self.apply_stubs(action.stubs.seqs)
        for action in actions:
            if isinstance(action, Stop) and self.state.turn_open:
                self.stop(action)

    def apply_plan(self, plan: Plan) -> None:
        state = self.state
        open_cover = safe_cover(state.history, state.last_seq, state.open_calls)
        assert plan.covers_through <= open_cover, (plan.covers_through, open_cover)
        if plan.based_on_compaction_seq != state.last_compaction_seq:
            self.drop(plan, "stale")
            return
        ratio = self.ratio or self.accounting.ratio(state)
        result = apply_compaction(
            state.history,
            summary=plan.summary,
            summary_seq=self.seq + 1,
            covers_through=plan.covers_through,
            user_budget_chars=self.accounting.user_budget(ratio),
            reattach=plan.reattach,
            provider_item=plan.provider_item,
        )
        before = state.projected_chars
        after = history_chars(result.history, state.stubbed)
        assert after < before, f"a plan that frees nothing was given: {before} -> {after}"
        record = CompactionRecord(
            seq=self.seq + 1,
            kind="full" if plan.kind == "full" else "fallback",
            summary=plan.summary,
            covers_through=plan.covers_through,
            retained=result.retained,
            reason=plan.reason,
            tokens_before=None,
            tokens_after=None,
            removed=result.removed,
            round=state.round,
            turn=state.turn,
            turn_open=state.turn_open,
            user_budget_chars=self.accounting.user_budget(ratio),
            chars_per_token=ratio,
            reattached=plan.reattach,
        )
        if self.turn is not None and state.turn_open:
            self.turn.compactions += 1
            self.turn.since_round += 1
            assert self.turn.since_round <= 3, "more than three compactions before a request went"
        self.write([record], "applied")

    def drop(self, plan: Plan, why: str) -> None:
        error = ErrorRecord(seq=self.seq + 1, kind="compaction_stale", message=why)
        self.write([error], "dropped", dropped=(plan.id, why))

    def apply_stubs(self, seqs: tuple[int, ...]) -> None:
        state = self.state
        outputs = {e.seq for e in state.history if isinstance(e.item, FunctionCallOutput)}
        fresh = tuple(s for s in seqs if s in outputs - state.stubbed)
        if fresh:
            record = MicrocompactRecord(
                seq=self.seq + 1, stubbed=fresh, reason="", tokens_before=None, tokens_after=None
            )
            self.write([record], "applied")

    def stop(self, stop: Stop) -> None:
        if stop.kind == "overflow":
            self.check_overflow_stop()
        if self.turn is not None:
            self.turn.stopped = stop
            self.stopped.append(self.turn)
        seq = self.seq
        self.write(
            [
                ErrorRecord(seq=seq + 1, kind="stopped", message=stop.message),
                TurnRecord(seq=seq + 2, turn=self.state.turn, phase="stopped"),
            ],
            "turn",
        )
        self.turn = None
        self.fit = self.ratio = None

    def check_overflow_stop(self) -> None:
        """A turn is stopped for overflow only when what it cannot do without (system,
        protected state, its user message, its newest round) is over the limit by itself,
        when even a digest of everything it may cover, with every output a stub, would leave
        the request at or above the limit (or would free nothing, for a request refused
        without figures), or when it made as many compactions as one turn may."""
        snap = self.machine.latest
        assert snap is not None
        cap = self.settings.max_compactions_per_turn
        if snap.turn_compactions >= cap:
            return
        ruler = Ruler(self.machine.accounting)
        view = ruler.view(snap, ratio=self.machine.ratio)
        everything = tuple(e.seq for e in snap.history if isinstance(e.item, FunctionCallOutput))
        guard = view.guard
        limit = self.machine.limit()
        if snap.turn_open and limit is not None and ruler.floor(view) >= limit:
            return  # what the turn cannot do without is over the limit by itself
        view, _ = ruler.stubbed(view, everything, "all")
        after = ruler.after_tokens(view, ruler.cover(view), ruler.digest_chars(view, limit))
        assert after is None or after >= min(guard, limit or guard), (
            f"stopped for overflow although a digest of everything leaves {after} tokens "
            f"under the limit of {limit}"
        )

    # -- the figures the sampler checks -----------------------------------------------------

    def guard(self) -> int:
        protected = None
        if self.ratio is not None:
            return math.ceil(self.state.projected_chars / self.ratio)
        return self.accounting.status(self.state, protected).guard

    def limit(self) -> int | None:
        return self.accounting.limit(self.fit)

    def may_send(self) -> bool:
        return self.turn is not None and not self.hold and not self.state.awaiting_approval


# -- the agent ---------------------------------------------------------------------------------


def file_text(name: str, chars: int) -> str:
    return (name + ": " + "lorem ipsum dolor " * (chars // 18 + 1))[:chars]


def visible(state: SessionState, name: str) -> bool:
    """Whether the request built from ``state`` shows ``name``'s read whole."""
    calls = {
        e.item.call_id
        for e in state.history
        if isinstance(e.item, FunctionCall) and name in e.item.arguments
    }
    return any(
        isinstance(e.item, FunctionCallOutput)
        and e.item.call_id in calls
        and e.seq not in state.stubbed
        for e in state.history
    )


class MachineProperties(RuleBasedStateMachine):
    """One session, one mode; the rules are what happens to it."""

    def __init__(self) -> None:
        super().__init__()
        self.shell = Shell.empty()
        self.mode = ""

    @initialize(mode=st.sampled_from(sorted(MODES)))
    def start(self, mode: str) -> None:
        settings = Settings(model="mystery", tools="none", **MODES[mode])  # type: ignore[arg-type]
        accounting = Accounting.of(settings, ())
        state = SessionState(session_id="s")
        self.mode = mode
        self.shell = Shell(settings, accounting, state, MachineState(accounting=accounting))
        self.shell.write(
            [
                SessionRecord(seq=1, model="mystery"),
                ItemRecord(seq=2, item=SystemMessage(text="You read files and answer.")),
            ],
            "seed",
        )

    # -- turns ------------------------------------------------------------------------------

    @precondition(
        lambda self: (
            self.mode and self.shell.turn is None and not self.shell.state.awaiting_approval
        )
    )
    @rule(
        files=st.lists(st.integers(200, 9000), min_size=1, max_size=4).map(tuple),
        guarded=st.booleans(),
    )
    def user_turn(self, files: tuple[int, ...], guarded: bool) -> None:
        shell = self.shell
        seq, turn = shell.seq, shell.state.turn + 1
        shell.turn = Turn(files=files, guarded=guarded)
        shell.fit = shell.ratio = None  # what a refusal said holds for its own turn
        names = " ".join(f"f{turn}_{k}.txt" for k in range(len(files)))
        shell.write(
            [
                ItemRecord(seq=seq + 1, item=UserMessage(text=f"read {names}")),
                TurnRecord(seq=seq + 2, turn=turn, phase="started"),
            ],
            "turn",
        )

    @precondition(lambda self: self.shell.may_send())
    @rule()
    def model_round(self) -> None:
        """The agent's next request goes, and its round is written."""
        shell = self.shell
        limit = shell.limit()
        figure = shell.guard()
        assert limit is None or figure < limit, (
            f"a request at {figure} tokens was let go under a limit of {limit} ({self.mode})"
        )
        turn = shell.turn
        assert turn is not None
        number = shell.state.turn
        names = [f"f{number}_{k}.txt" for k in range(len(turn.files))]
        missing = [k for k, name in enumerate(names) if not visible(shell.state, name)]
        round_ = shell.state.round + 1
        seq = shell.seq
        usage = self.usage_of(figure)
        if not missing:
            turn.answered = True
            shell.write(
                [
                    ItemRecord(seq=seq + 1, item=AssistantMessage(text="done"), round=round_),
                    RoundCommittedRecord(
                        seq=seq + 2, round=round_, usage=usage, first_seq=seq + 1, last_seq=seq + 2
                    ),
                    TurnRecord(seq=seq + 3, turn=number, phase="finished"),
                ],
                "round",
            )
            shell.turn = None
            return
        k = missing[0]
        call = FunctionCall(call_id=f"c{seq}", name="read", arguments=f'{{"path": "{names[k]}"}}')
        if turn.guarded and k == len(names) - 1:
            shell.write(
                [
                    ItemRecord(seq=seq + 1, item=call, round=round_),
                    ApprovalRecord(seq=seq + 2, call_id=call.call_id, decision="requested"),
                ],
                "approval",
            )
            return
        turn.since_round = 0
        output = FunctionCallOutput(call_id=call.call_id, output=file_text(names[k], turn.files[k]))
        shell.write(
            [
                ItemRecord(seq=seq + 1, item=call, round=round_),
                ItemRecord(seq=seq + 2, item=output, round=round_),
                RoundCommittedRecord(
                    seq=seq + 3, round=round_, usage=usage, first_seq=seq + 2, last_seq=seq + 3
                ),
            ],
            "round",
        )

    def usage_of(self, figure: int) -> Usage | None:
        match self.shell.usage:
            case "none":
                return None
            case "half":
                tokens = max(1, figure // 2)
            case _:
                tokens = max(1, figure)
        return Usage(input_tokens=tokens, output_tokens=5, total_tokens=tokens + 5)

    @precondition(lambda self: bool(self.shell.state.awaiting_approval))
    @rule(approve=st.booleans())
    def answer_approval(self, approve: bool) -> None:
        shell = self.shell
        [call] = shell.state.awaiting_approval
        seq, round_ = shell.seq, shell.state.open_round or shell.state.round + 1
        turn = shell.turn
        name = call.arguments.split('"')[3]
        size = turn.files[-1] if turn is not None else 300
        text = file_text(name, size) if approve else "denied"
        shell.write(
            [
                ApprovalRecord(
                    seq=seq + 1, call_id=call.call_id, decision="approved" if approve else "denied"
                ),
                ItemRecord(seq=seq + 2, item=FunctionCallOutput(call_id=call.call_id, output=text)),
                RoundCommittedRecord(
                    seq=seq + 3, round=round_, usage=None, first_seq=seq + 2, last_seq=seq + 3
                ),
            ],
            "round",
        )
        if turn is not None and not approve:
            turn.files = turn.files[:-1]
            turn.guarded = False

    @precondition(lambda self: self.shell.may_send())
    @rule(share=st.floats(0.3, 0.95), stated=st.booleans())
    def provider_refuses(self, share: float, stated: bool) -> None:
        """The provider refuses the request as too long, stating (or not) what fits."""
        shell = self.shell
        figure = shell.guard()
        fit = max(1, int(figure * share))
        if stated:  # what fits, as the sampler keeps it: the least any refusal of the turn said
            shell.fit = min(shell.fit, fit) if shell.fit is not None else fit
        if shell.turn is not None:
            shell.turn.refused = True
        seq = shell.seq
        error = ErrorRecord(seq=seq + 1, kind="context_length_exceeded", message="too long")
        refusal = Refusal(fit=fit if stated else None)
        shell.write([error], "refused", refusal=refusal)

    # -- the compactor's jobs ----------------------------------------------------------------

    @precondition(lambda self: bool(self.shell.jobs))
    @rule(outcome=st.sampled_from(["short", "long", "failed", "vetoed"]), data=st.data())
    def summary_lands(self, outcome: str, data: st.DataObject) -> None:
        shell = self.shell
        job_id = data.draw(st.sampled_from(sorted(shell.jobs)))
        job = shell.jobs.pop(job_id)
        if outcome in ("failed", "vetoed"):
            shell.event(SummaryFailed(job_id, "the summarizer failed", vetoed=outcome == "vetoed"))
            return
        size = 200 if outcome == "short" else 30_000
        plan = Plan(
            round=job.snapshot.round,
            summary=("summary: " + "what was read and why; " * 2000)[:size],
            covers_through=job.covers_through,
            reason=job.reason,
            tokens_before=job.tokens,
            estimated=job.estimated,
            based_on_compaction_seq=job.snapshot.last_compaction_seq,
        )
        shell.event(SummaryReady(job_id, plan))

    @precondition(lambda self: self.mode and self.shell.turn is None)
    @rule()
    def manual(self) -> None:
        self.shell.asks += 1
        self.shell.event(Manual(self.shell.asks))

    @precondition(lambda self: self.mode)
    @rule()
    def milestone(self) -> None:
        shell = self.shell
        shell.write([MilestoneRecord(seq=shell.seq + 1, name="phase", note=None)], "milestone")

    @precondition(lambda self: self.mode)
    @rule(usage=st.sampled_from(["exact", "none", "half"]))
    def usage_changes(self, usage: str) -> None:
        self.shell.usage = usage

    # -- what must hold ----------------------------------------------------------------------

    @invariant()
    def a_turn_whose_reads_fit_together_is_never_stopped(self) -> None:
        for turn in self.shell.stopped:
            if turn.refused:
                continue  # the provider's word: what fits is what it said
            needed = sum(turn.files) / 4
            room = self.shell.accounting.usable or self.shell.accounting.threshold or 0
            assert needed > 0.3 * room, (
                f"a turn reading {needed:.0f} tokens in all was stopped with {room} usable: "
                f"{turn.stopped}"
            )

    @invariant()
    def a_turn_that_cannot_fit_is_stopped_within_three_compactions(self) -> None:
        """(Refusals aside: each says anew what fits, and the machine answers each; between
        two requests that go there are never more than three compactions either way.)"""
        for turn in self.shell.stopped:
            if not turn.refused:
                assert turn.compactions <= 3, (turn.compactions, turn.stopped)

    @invariant()
    def the_kept_round_index_is_the_one_made_from_scratch(self) -> None:
        """The index the machine extends boundary by boundary is, after every step, the one
        scanned anew from the newest boundary's history."""
        machine = self.shell.machine
        if machine.latest is not None:
            assert machine.rounds == RoundIndex.of(machine.latest.history), self.mode

    @invariant()
    def the_machine_phase_matches_what_is_in_flight(self) -> None:
        machine = self.shell.machine
        assert (machine.job is None) or (machine.job.id in self.shell.jobs)


def test_the_machine_alone_keeps_every_promise_in_every_mode() -> None:
    """Driven through ``MachineProperties`` (see the module docstring)."""
    run = MachineProperties.TestCase
    run.settings = hypothesis.settings(
        max_examples=int(os.environ.get("MACHINE_EXAMPLES", "300")),
        stateful_step_count=40,
        deadline=None,
        database=None,
        suppress_health_check=[hypothesis.HealthCheck.too_slow],
    )
    run().runTest()
