"""The sampler actor: owns one session's live state and runs its round loop.

A round: project history, stream one response, write the assistant text and calls (durable
before any tool runs), have the tool executor run the calls, write the outputs with a
``round_committed`` record. Compaction plans are applied only here and only between rounds.

A response is used only whole (the gateway raises on one that never said it was done) and
checked before anything of it is written (``ResponseChecks``): duplicate call ids are made
unique, usage that cannot be true is set aside, an answer larger than ``max_answer_chars``
is refused like any other bad response; then calls the output limit cut off get an error
output instead of running.

Named helpers share the work, each on its own small interface, none of them knowing the
sampler: the ``Journal`` (every state change is a batch of records it folds in, as replay
does, and makes durable; a batch that ends at a boundary goes to the compactor as a
snapshot), the ``Requester`` (build, send and retry a round's request), the ``RoundWriter``
(run the calls, commit the round), ``Approvals``, the ``PlanApplier`` (compaction and
protected-state writes) and the ``Gate`` (applies what the compactor advised, and holds a
request back while it says so). The sampler decides nothing about compaction: the compactor
does, on committed snapshots.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

import anyio
import structlog
from stowage.core import (
    ApprovalError,
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    MilestoneReached,
    MilestoneRecord,
    ModelError,
    ModelResponse,
    ProtectedStateViolation,
    Record,
    SessionFailed,
    SessionState,
    Settings,
    TurnFinished,
    TurnRecord,
    UserMessage,
)
from stowage.tools import MILESTONE_TOOL, MilestoneArgs

from ._accounting import Accounting
from ._approvals import Approvals, AwaitingApproval
from ._checks import ResponseChecks
from ._context import SessionContext
from ._gate import Gate
from ._inbox import CompactorInbox
from ._interrupt import TurnInterrupt
from ._journal import Journal
from ._mailbox import Doorbell, Reply, Slot
from ._messages import (
    Advice,
    CompactNow,
    ContinueTurn,
    Decide,
    Milestone,
    Protect,
    SamplerCommand,
    TurnResult,
    UserTurn,
)
from ._plans import PlanApplier
from ._queue import MailboxReceive
from ._requests import Requester, TurnInterrupted
from ._rounds import RoundWriter, commit_record
from .tool_executor import ExecutorInbox

__all__ = ["Sampler", "interrupted_output", "unique_call_ids"]

_log = structlog.get_logger("stowage.sampler")
T = TypeVar("T")

INTERRUPTED = (
    "interrupted: the session stopped before this call finished; it may or may not have run"
)


def unique_call_ids(response: ModelResponse, taken: set[str], *, salt: str) -> ModelResponse:
    """``response`` with every call id unique in the session: a missing id, or one the
    history already holds (some OpenAI-compatible servers number calls from 0 on every
    response), gets a new one, so outputs can never be matched to the wrong call."""
    seen = set(taken)
    items: list[AssistantMessage | FunctionCall] = []
    changed = False
    for n, item in enumerate(response.items):
        if isinstance(item, FunctionCall) and (not item.call_id or item.call_id in seen):
            fresh = f"{item.call_id or 'call'}-{salt}-{n}"
            while fresh in seen:  # a model may have sent that very id too
                fresh += "x"
            item = replace(item, call_id=fresh)
            changed = True
        if isinstance(item, FunctionCall):
            seen.add(item.call_id)
        items.append(item)
    return replace(response, items=tuple(items)) if changed else response


def interrupted_output(call_id: str) -> FunctionCallOutput:
    """The synthetic output given on resume to a call whose real output was never logged."""
    return FunctionCallOutput(call_id=call_id, output=INTERRUPTED, is_error=True)


@dataclass(eq=False)
class Sampler:
    """One session's round loop. Create it with replayed state; ``run`` serves commands."""

    ctx: SessionContext
    state: SessionState
    #: the compactor's inbox (persistence puts committed snapshots in it, the gate asks)
    committed: CompactorInbox
    #: the compactor's advice
    plans: Slot[Advice]
    #: the executor's inbox of the current run of the actors (``serve`` sets it)
    tools: ExecutorInbox | None = None

    def __post_init__(self) -> None:
        self._log = _log.bind(session=self.ctx.session_id, actor="sampler")
        # every change of state goes through the journal, the helpers' one way to write
        accounting = Accounting(self.ctx.settings, self.ctx.tools.specs())
        self._journal = Journal(
            ctx=self.ctx, state=self.state, compactor=self.committed, accounting=accounting
        )
        # the helpers log through this actor's logger (one bound logger per live session)
        self._applier = PlanApplier(self.ctx, self._journal, self._log)
        # the compactor decides; the gate applies what it advised, at round boundaries
        self._gate = Gate(
            self.ctx, self._journal, self._applier, self.plans, self.committed, self._log
        )
        # usage vetting, before anything of a response is written
        self._checks = ResponseChecks(self.ctx, self._journal, self._log)
        self._requests = Requester(self.ctx, self._journal, self._gate, self._log)
        self._writer = RoundWriter(self.ctx, self._journal, self._log)
        self._approvals = Approvals(self.ctx, self._journal, self._log)
        # the running turn's interrupt, if its asker can stop it
        self._interrupt: TurnInterrupt | None = None

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def waited(self) -> float:
        """Seconds this session's requests were held back for compaction, in all."""
        return self._gate.waited

    # -- lifecycle -----------------------------------------------------------------------

    async def serve(
        self,
        commands: MailboxReceive[SamplerCommand],
        first: SamplerCommand,
        tools: ExecutorInbox,
        doorbell: Doorbell,
    ) -> bool:
        """Serve ``first``, then every command that comes while there is work. Returns False
        when the session parks (no command waiting and the compactor idle: this run of the
        session's actors ends and its supervisor waits for the next command with one task),
        True when the input ended. ``doorbell`` is rung by a new command, the end of input and
        the compactor going idle. Closing ``tools`` and the compactor's inbox on the way out
        ends the other actors."""
        self.tools = tools
        try:
            async with tools:
                command = first
                while True:
                    await self._serve(command)
                    while True:
                        try:
                            command = commands.receive_nowait()
                            break
                        except anyio.EndOfStream:
                            return True
                        except anyio.WouldBlock:
                            if self.committed.idle:
                                # parked; an advice left in its slot applies at the next turn
                                return False
                        await doorbell.wait()  # no await since the checks: no ring is missed
        finally:
            self.committed.close()
            self.tools = None  # the executor's inbox was this run's: a parked session holds none

    async def recover(self) -> None:
        """Close a round the log left open: every logged call without an output gets the
        synthetic "interrupted" output, so no orphan call ever reaches a model. The compactor
        is handed the state the session starts from either way."""
        if not self.state.open_calls or self.state.awaiting_approval:
            # a round that waits for approval stays open until the answer comes
            self._journal.seed()
            return
        round_ = self.state.open_round or self.state.round + 1
        first = self.state.last_seq + 1
        records: list[Record] = [
            ItemRecord(seq=first + i, item=interrupted_output(call_id), round=round_)
            for i, call_id in enumerate(self.state.open_calls)
        ]
        records.append(commit_record(round_, None, first, interrupted=True, offset=len(records)))
        self._log.warning("round_recovered", round=round_, calls=len(records) - 1)
        await self._journal.write(records, boundary="recovered")

    async def _serve(self, command: SamplerCommand) -> None:
        match command:
            case UserTurn():
                turn = self._turn(
                    command.text, command.pinned, command.message_id, command.interrupt
                )
                await self._answer(command.reply, turn)
            case ContinueTurn():
                await self._answer(command.reply, self._continue_turn())
            case CompactNow():
                compacted = self._compact_now(command.focus, reground=command.reground)
                await self._answer(command.reply, compacted)
            case Protect():
                await self._answer(command.reply, self._protect(command.ops))
            case Milestone():
                milestone = self._milestone(command.name, command.note, command.source)
                await self._answer(command.reply, milestone)
            case Decide():
                decided = self._decide(command.call_id, command.approve, command.reason)
                await self._answer(command.reply, decided)

    async def _answer(self, reply: Reply[T], work: Awaitable[T]) -> None:
        try:
            reply.set(await work)
        except ModelError as exc:
            # the model failing a turn leaves the log consistent: nothing of it was written
            self._log.warning("turn_failed", error=str(exc))
            reply.fail(exc)
        except ApprovalError as exc:
            # checked before anything is written: the session goes on
            self._log.info("approval_refused", error=str(exc))
            reply.fail(exc)
        except ProtectedStateViolation as exc:
            # a refused user change is checked before anything is written: the session goes on
            self._log.warning("protect_refused", error=str(exc))
            reply.fail(exc)
        except BaseException as exc:
            failed = SessionFailed(f"session {self.ctx.session_id} failed: {exc!r}")
            failed.__cause__ = exc
            reply.fail(failed)
            raise

    # -- turns and rounds ----------------------------------------------------------------

    async def _turn(
        self,
        text: str,
        pinned: bool,
        message_id: str | None,
        interrupt: TurnInterrupt | None = None,
    ) -> TurnResult:
        self._approvals.refuse_while_awaiting("a new turn")
        turn = self.state.turn + 1
        seq = self.state.last_seq
        user = UserMessage(text=text, pinned=pinned, message_id=message_id)
        await self._journal.write(
            [
                ItemRecord(seq=seq + 1, item=user),
                TurnRecord(seq=seq + 2, turn=turn, phase="started"),
            ],
            boundary="turn",
        )
        return await self._rounds(turn, interrupt)

    async def _continue_turn(self) -> TurnResult:
        """The rounds of the turn the log left open; ``stopped="no_open_turn"`` when none is."""
        if not self.state.turn_open:
            return TurnResult(text="", rounds=0, stopped="no_open_turn")
        if self.state.awaiting_approval:
            return TurnResult(text="", rounds=0, stopped="pending_approval")
        self._log.info("turn_continued", turn=self.state.turn)
        return await self._rounds(self.state.turn)

    async def _rounds(self, turn: int, interrupt: TurnInterrupt | None = None) -> TurnResult:
        self._gate.turn_started()
        self._interrupt = interrupt
        try:
            return await self._rounds_until_done(turn, interrupt)
        finally:
            self._interrupt = None

    async def _rounds_until_done(self, turn: int, interrupt: TurnInterrupt | None) -> TurnResult:
        for rounds in range(1, self.settings.max_rounds_per_turn + 1):
            if interrupt is not None and interrupt.requested:
                return await self._interrupted(turn, rounds - 1)
            await self._gate.apply_ready()
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
                await self._gate.settle()
                stopped = "truncated" if answer.truncated else "answered"
                return TurnResult(text=answer.text, rounds=rounds, stopped=stopped)
        self._log.warning("turn_round_limit", turn=turn, rounds=self.settings.max_rounds_per_turn)
        return TurnResult(text="", rounds=self.settings.max_rounds_per_turn, stopped="round_limit")

    async def _interrupted(self, turn: int, rounds: int) -> TurnResult:
        """Close a turn its asker stopped: every round it wrote is whole (a stopped model
        stream wrote nothing, stopped calls got interrupted outputs); the turn is closed."""
        self._log.info("turn_interrupted", turn=turn, rounds=rounds)
        await self._journal.write(
            [TurnRecord(seq=self.state.last_seq + 1, turn=turn, phase="interrupted")],
            boundary="turn",
        )
        return TurnResult(text="", rounds=rounds, stopped="interrupted")

    async def _round(self, turn: int) -> ModelResponse | None:
        """One round; returns the response when the model made no tool calls (the answer).

        Raises ``CompactionLoop`` (after an ``error`` record) when the compactor found the turn
        in a real compaction loop, ``ContextLengthExceeded`` when the request cannot be
        brought under the hard mark, ``TurnInterrupted`` and ``AwaitingApproval``.
        """
        round_ = self.state.round + 1
        # pre-turn and mid-turn: the compactor's verdict on the newest boundary, applied
        await self._gate.settle()
        request = self._requests.build(round_)
        request, response, manifest = await self._requests.send(request, round_, self._interrupt)
        # the history is the one the request was sent from until this round writes
        input_chars = self._requests.input_chars()
        seq = self.state.last_seq
        taken = self._taken_call_ids() if response.calls else set()  # only calls need them
        response = unique_call_ids(response, taken, salt=f"s{seq + 1}")
        usage = await self._checks.usage(response, request, input_chars=input_chars)
        seq = self.state.last_seq
        sampled: list[Record] = [
            ItemRecord(seq=seq + 1 + i, item=item, round=round_)
            for i, item in enumerate(response.items)
            if not (isinstance(item, AssistantMessage) and not item.text)
        ]
        calls = response.calls
        if not calls:
            commit = commit_record(
                round_, response, seq + 1, offset=len(sampled), usage=usage, manifest=manifest
            )
            finished = TurnRecord(seq=commit.seq + 1, turn=turn, phase="finished")
            await self._writer.commit(round_, [*sampled, commit, finished], response, calls=0)
            self._log.info("turn_finished", round=round_, turn=turn, truncated=response.truncated)
            self.ctx.publish(
                TurnFinished(session_id=self.ctx.session_id, turn=turn, text=response.text)
            )
            return response
        # write-ahead: the calls are durable before any tool runs
        await self._journal.write(sampled)
        await self._approvals.request(round_, calls)
        outputs = await self._writer.run_tools(round_, response, self.tools, self._interrupt)
        await self._writer.commit_outputs(round_, outputs, response, usage=usage, manifest=manifest)
        await self._milestones_called(calls, outputs)
        return None

    async def _milestones_called(
        self, calls: Sequence[FunctionCall], outputs: Sequence[FunctionCallOutput]
    ) -> None:
        """Record each milestone the model marked in the round just committed (a call of
        ``mark_milestone`` that succeeded)."""
        if not self.settings.milestone_tool:
            return
        failed = {o.call_id for o in outputs if o.is_error}
        for call in calls:
            if call.name != MILESTONE_TOOL or call.call_id in failed:
                continue
            try:
                args = MilestoneArgs.model_validate_json(call.arguments)
            except ValueError:
                continue  # the tool refused it too: its output says why
            await self._milestone(args.name, args.note, "model")

    async def _decide(self, call_id: str, approve: bool, reason: str | None) -> TurnResult:
        """Log the answer for ``call_id``; when no call of the round awaits one any more, run
        the round (denied calls get a "denied" output) and go on with the turn.

        Raises ``ApprovalError`` if ``call_id`` awaits no approval (nothing is written).
        """
        if not await self._approvals.answer(call_id, approve, reason):
            return TurnResult(text="", rounds=0, stopped="pending_approval")
        round_ = self.state.open_round or self.state.round + 1
        calls = tuple(self.state.open_calls.values())
        denied = self._approvals.denied_outputs()
        outputs = await self._writer.run_calls(round_, calls, denied, self.tools, None)
        await self._writer.commit_outputs(round_, outputs, None)
        result = await self._rounds(self.state.turn)
        return replace(result, rounds=result.rounds + 1)

    # -- compaction and protected state --------------------------------------------------

    async def _compact_now(self, focus: str | None, *, reground: bool) -> bool:
        """Manual compaction, decided by the compactor on the last committed snapshot; True
        when history was compacted."""
        return await self._gate.compact_now(focus, reground=reground)

    async def _protect(self, ops: Sequence[dict[str, object]]) -> None:
        await self._applier.protect(ops)

    async def _milestone(
        self, name: str, note: str | None, source: Literal["user", "model"]
    ) -> None:
        """Record that a phase ended; the compactor hears it as a boundary of its own (above
        the soft mark it compacts here, telling the summary the phase that ended)."""
        state = self.state
        record = MilestoneRecord(seq=state.last_seq + 1, name=name, note=note, source=source)
        await self._journal.write([record], boundary="milestone")
        self._log.info("milestone", name=name, source=source)
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
        await self._gate.settle()

    def _taken_call_ids(self) -> set[str]:
        return {e.item.call_id for e in self.state.history if isinstance(e.item, FunctionCall)}
