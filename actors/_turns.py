"""A session's turns: its user input, its rounds until an answer, and why a turn stopped.

A round: project history, stream one response, write the assistant text and calls (durable
before any tool runs), run the calls, write the outputs with a ``round_committed`` record.
Before each request the gate applies what the compaction machine said and never lets a
request go at or above the limit. A turn the machine stops, or that reaches the round limit,
is closed as ``stopped`` with the figures in an ``error`` record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import structlog
from stowage.core import (
    AssistantMessage,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    MilestoneReached,
    MilestoneRecord,
    ModelResponse,
    Record,
    SessionState,
    TurnFinished,
    TurnRecord,
    UserMessage,
)
from stowage.tools import MILESTONE_TOOL, MilestoneArgs

from ._approvals import Approvals, AwaitingApproval
from ._checks import ResponseChecks
from ._context import SessionContext
from ._gate import Gate
from ._interrupt import TurnInterrupt
from ._journal import Journal
from ._messages import TurnResult
from ._requests import Requester, TurnInterrupted
from ._responses import unique_call_ids
from ._rounds import RoundWriter, commit_record
from .tool_executor import ExecutorInbox

__all__ = ["TurnRunner"]


@dataclass(eq=False, kw_only=True)
class TurnRunner:
    """Runs one session's turns on the sampler's helpers."""

    ctx: SessionContext
    journal: Journal
    gate: Gate
    requests: Requester
    checks: ResponseChecks
    writer: RoundWriter
    approvals: Approvals
    log: structlog.typing.FilteringBoundLogger
    tools: Callable[[], ExecutorInbox | None]
    #: the running turn's interrupt, if its asker can stop it
    interrupt: TurnInterrupt | None = None
    #: the session was opened from a log that held rounds and no request has gone since:
    #: the next round is marked ``resumed`` (its cache hit is the resume's)
    reopened: bool = False

    @property
    def state(self) -> SessionState:
        return self.journal.state

    async def start(
        self,
        text: str,
        pinned: bool,
        message_id: str | None,
        interrupt: TurnInterrupt | None = None,
    ) -> TurnResult:
        self.approvals.refuse_while_awaiting("a new turn")
        turn = self.state.turn + 1
        seq = self.state.last_seq
        user = UserMessage(text=text, pinned=pinned, message_id=message_id)
        await self.journal.write(
            [
                ItemRecord(seq=seq + 1, item=user),
                TurnRecord(seq=seq + 2, turn=turn, phase="started"),
            ],
            boundary="turn",
        )
        return await self.rounds(turn, interrupt)

    async def go_on(self) -> TurnResult:
        """The rounds of the turn the log left open; ``stopped="no_open_turn"`` when none is."""
        if not self.state.turn_open:
            return TurnResult(text="", rounds=0, stopped="no_open_turn")
        if self.state.awaiting_approval:
            return TurnResult(text="", rounds=0, stopped="pending_approval")
        self.log.info("turn_continued", turn=self.state.turn)
        return await self.rounds(self.state.turn)

    async def rounds(self, turn: int, interrupt: TurnInterrupt | None = None) -> TurnResult:
        self.gate.turn_started()
        self.interrupt = interrupt
        try:
            return await self._rounds_until_done(turn, interrupt)
        finally:
            self.interrupt = None

    async def _rounds_until_done(self, turn: int, interrupt: TurnInterrupt | None) -> TurnResult:
        for rounds in range(1, self.ctx.settings.max_rounds_per_turn + 1):
            if interrupt is not None and interrupt.requested:
                return await self._interrupted(turn, rounds - 1)
            await self.gate.apply_ready()
            try:
                answer = await self._round(turn)
            except TurnInterrupted:
                return await self._interrupted(turn, rounds)
            except AwaitingApproval:
                return TurnResult(text="", rounds=rounds, stopped="pending_approval")
            if answer is not None:
                # the verdict on the turn's last round is applied before the answer is given
                # (the seed's rule waits for a due compaction here), so a reader of the
                # session after the answer sees what the log holds
                await self.gate.settle()
                stopped = "truncated" if answer.truncated else "answered"
                return TurnResult(text=answer.text, rounds=rounds, stopped=stopped)
        limit = self.ctx.settings.max_rounds_per_turn
        self.log.warning("turn_round_limit", turn=turn, rounds=limit)
        seq = self.state.last_seq
        message = (
            f"turn {turn} stopped at the round limit: {limit} rounds without an answer "
            "(max_rounds_per_turn; raise it if the task needs more rounds)"
        )
        await self.journal.write(
            [
                ErrorRecord(seq=seq + 1, kind="round_limit", message=message),
                TurnRecord(seq=seq + 2, turn=turn, phase="stopped"),
            ],
            boundary="turn",
        )
        return TurnResult(text="", rounds=limit, stopped="round_limit")

    async def _interrupted(self, turn: int, rounds: int) -> TurnResult:
        """Close a turn its asker stopped: every round it wrote is whole (a stopped stream wrote
        nothing, stopped calls got interrupted outputs)."""
        self.log.info("turn_interrupted", turn=turn, rounds=rounds)
        await self.journal.write(
            [TurnRecord(seq=self.state.last_seq + 1, turn=turn, phase="interrupted")],
            boundary="turn",
        )
        return TurnResult(text="", rounds=rounds, stopped="interrupted")

    async def _round(self, turn: int) -> ModelResponse | None:
        """One round; returns the response when the model made no tool calls (the answer). Raises
        ``CompactionLoop`` (after an ``error`` record) when the compactor found the turn in a real
        compaction loop, ``ContextLengthExceeded`` when the request cannot be brought under the hard
        mark, ``TurnInterrupted`` and ``AwaitingApproval``."""
        round_ = self.state.round + 1
        # pre-turn and mid-turn: what the machine said applied, and never above the limit
        await self.gate.before_request()
        request = self.requests.build(round_)
        request, response, manifest = await self.requests.send(request, round_, self.interrupt)
        resumed, self.reopened = self.reopened, False
        # the history is the one the request was sent from until this round writes
        input_chars = self.requests.input_chars()
        seq = self.state.last_seq
        if response.calls:  # only calls need the ids taken
            response = unique_call_ids(response, self._taken_call_ids(), salt=f"s{seq + 1}")
        usage = await self.checks.usage(response, request, input_chars=input_chars)
        seq = self.state.last_seq
        sampled: list[Record] = [
            ItemRecord(seq=seq + 1 + i, item=item, round=round_)
            for i, item in enumerate(response.items)
            if not (isinstance(item, AssistantMessage) and not item.text)
        ]
        calls = response.calls
        if not calls:
            commit = commit_record(
                round_,
                response,
                seq + 1,
                offset=len(sampled),
                usage=usage,
                manifest=manifest,
                resumed=resumed,
            )
            finished = TurnRecord(seq=commit.seq + 1, turn=turn, phase="finished")
            await self.writer.commit([*sampled, commit, finished], commit, calls=0)
            self.log.info("turn_finished", round=round_, turn=turn, truncated=response.truncated)
            self.ctx.publish(
                TurnFinished(session_id=self.ctx.session_id, turn=turn, text=response.text)
            )
            return response
        # write-ahead: the calls are durable before any tool runs
        await self.journal.write(sampled)
        refused = await self.approvals.request(round_, calls)
        outputs = await self.writer.run_tools(
            round_, response, self.tools(), self.interrupt, refused=refused
        )
        await self.writer.commit_outputs(
            round_, outputs, response, usage=usage, manifest=manifest, resumed=resumed
        )
        await self._milestones_called(calls, outputs)
        return None

    async def _milestones_called(
        self, calls: Sequence[FunctionCall], outputs: Sequence[FunctionCallOutput]
    ) -> None:
        """Record each milestone the model marked in the round just committed."""
        if not self.ctx.settings.milestone_tool:
            return
        failed = {o.call_id for o in outputs if o.is_error}
        for call in calls:
            if call.name != MILESTONE_TOOL or call.call_id in failed:
                continue
            try:
                args = MilestoneArgs.model_validate_json(call.arguments)
            except ValueError:
                continue  # the tool refused it too: its output says why
            await self.milestone(args.name, args.note, "model")

    async def milestone(
        self, name: str, note: str | None, source: Literal["user", "model"]
    ) -> None:
        """Record that a phase ended; the compactor hears it as a boundary of its own."""
        state = self.state
        record = MilestoneRecord(seq=state.last_seq + 1, name=name, note=note, source=source)
        await self.journal.write([record], boundary="milestone")
        self.log.info("milestone", name=name, source=source)
        self.ctx.publish(
            MilestoneReached(
                session_id=self.ctx.session_id,
                name=name,
                note=note,
                source=source,
                round=state.round,
                turn=state.turn,
            )
        )
        # the compactor's verdict on the milestone: above the soft mark, a compaction here
        await self.gate.settle()

    def _taken_call_ids(self) -> Iterator[str]:
        return (e.item.call_id for e in self.state.history if isinstance(e.item, FunctionCall))
