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
from dataclasses import dataclass, field, replace
from typing import TypeVar

import anyio
import structlog
from stowage.core import (
    ApprovalError,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    ModelError,
    ProtectedRecord,
    ProtectedStateViolation,
    Record,
    SessionFailed,
    SessionState,
    Settings,
)
from stowage.policy import Accounting
from stowage.tools import after_crash, trail_ops

from ._approvals import Approvals
from ._checks import ResponseChecks
from ._context import SessionContext
from ._gate import Gate
from ._inbox import CompactorInbox
from ._journal import Journal
from ._mailbox import Doorbell, Reply, Slot
from ._messages import (
    CompactNow,
    ContinueTurn,
    Decide,
    Milestone,
    Protect,
    SamplerCommand,
    TurnResult,
    UserTurn,
    Verdict,
)
from ._plans import PlanApplier
from ._provider_compaction import stranded
from ._queue import MailboxReceive
from ._requests import Requester
from ._rounds import RoundWriter, commit_record
from ._turns import TurnRunner
from .tool_executor import ExecutorInbox

__all__ = ["Sampler", "interrupted_output"]

_log = structlog.get_logger("stowage.sampler")
T = TypeVar("T")

INTERRUPTED = (
    "interrupted: the session stopped before this call finished; it may or may not have run"
)

APPLIED_AFTER_CRASH = (
    "applied: the session stopped before this call's output was logged; on restart the file "
    "held its result, so it was applied (and not applied again)"
)
NOT_APPLIED_AFTER_CRASH = (
    "not applied: the session stopped before this call finished; on restart the file was as "
    "it had been before, so nothing changed (and it was not run again)"
)


def interrupted_output(call_id: str) -> FunctionCallOutput:
    """The synthetic output given on resume to a call whose real output was never logged."""
    return FunctionCallOutput(call_id=call_id, output=INTERRUPTED, is_error=True)


@dataclass(eq=False, slots=True)
class Sampler:
    """One session's round loop. Create it with replayed state; ``run`` serves commands."""

    ctx: SessionContext
    state: SessionState
    #: the compactor's inbox (persistence puts durable boundaries in it, the gate asks)
    committed: CompactorInbox
    #: the compaction machine's verdicts
    plans: Slot[Verdict]
    #: the executor's inbox of the current run of the actors (``serve`` sets it)
    tools: ExecutorInbox | None = None
    # its helpers, made in __post_init__ (slots: one sampler per live session)
    _log: structlog.typing.FilteringBoundLogger = field(init=False, repr=False)
    _journal: Journal = field(init=False, repr=False)
    _applier: PlanApplier = field(init=False, repr=False)
    _gate: Gate = field(init=False, repr=False)
    _checks: ResponseChecks = field(init=False, repr=False)
    _requests: Requester = field(init=False, repr=False)
    _writer: RoundWriter = field(init=False, repr=False)
    _approvals: Approvals = field(init=False, repr=False)
    _turns: TurnRunner = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._log = _log.bind(session=self.ctx.session_id, actor="sampler")
        # every change of state goes through the journal, the helpers' one way to write
        accounting = Accounting.of(self.ctx.settings, self.ctx.tools.specs())
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
        self._turns = TurnRunner(
            ctx=self.ctx,
            journal=self._journal,
            gate=self._gate,
            requests=self._requests,
            checks=self._checks,
            writer=self._writer,
            approvals=self._approvals,
            log=self._log,
            tools=lambda: self.tools,
            reopened=self.state.round > 0,
        )

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
        """Serve ``first``, then every command that comes while there is work; False when the
        session parks (this run of its actors ends), True when the input ended."""
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
            self._requests.park()

    async def recover(self) -> None:
        """Close a round the log left open: each logged call without an output gets an
        "interrupted" output, so no orphan call reaches a model."""
        if not self.state.open_calls or self.state.awaiting_approval:
            # a round that waits for approval stays open until the answer comes
            self._journal.seed()
            return
        round_ = self.state.open_round or self.state.round + 1
        first = self.state.last_seq + 1
        calls = tuple(self.state.open_calls.values())
        outputs = [self._after_crash(call) for call in calls]
        records: list[Record] = [
            ItemRecord(seq=first + i, item=output, round=round_) for i, output in enumerate(outputs)
        ]
        touched = (
            trail_ops(self.ctx.tools, calls, outputs) if self.ctx.settings.files_touched else []
        )
        if touched:  # a write found applied touched its file
            records.append(
                ProtectedRecord(seq=first + len(records), ops=tuple(touched), source="tools")
            )
        records.append(commit_record(round_, None, first, interrupted=True, offset=len(records)))
        self._log.warning("round_recovered", round=round_, calls=len(calls))
        await self._journal.write(records, boundary="recovered")

    def _after_crash(self, call: FunctionCall) -> FunctionCallOutput:
        """The output of a call whose process was killed before its output was logged: what its
        tool finds, else "interrupted"; never run again here."""
        applied = after_crash(self.ctx.tools.get(call.name), call)
        if applied is not None:
            text = APPLIED_AFTER_CRASH if applied else NOT_APPLIED_AFTER_CRASH
            return FunctionCallOutput(call_id=call.call_id, output=text, is_error=not applied)
        printed = self.state.partial.get(call.call_id)
        if printed:
            text = f"{INTERRUPTED}; it was not run again. What it had printed:\n{printed}"
            return FunctionCallOutput(call_id=call.call_id, output=text, is_error=True)
        return interrupted_output(call.call_id)

    async def _serve(self, command: SamplerCommand) -> None:
        if isinstance(command, UserTurn | ContinueTurn):
            await self._move_provider_items()
        match command:
            case UserTurn():
                turn = self._turns.start(
                    command.text, command.pinned, command.message_id, command.interrupt
                )
                await self._answer(command.reply, turn)
            case ContinueTurn():
                await self._answer(command.reply, self._turns.go_on())
            case CompactNow():
                compacted = self._compact_now(command.focus, reground=command.reground)
                await self._answer(command.reply, compacted)
            case Protect():
                await self._answer(command.reply, self._protect(command.ops))
            case Milestone():
                milestone = self._turns.milestone(command.name, command.note, command.source)
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

    async def _decide(self, call_id: str, approve: bool, reason: str | None) -> TurnResult:
        """Log the answer for ``call_id``; when no call of the round awaits one any more, run the
        round (denied calls get a "denied" output) and go on with the turn. Raises ``ApprovalError``
        if ``call_id`` awaits no approval (nothing is written)."""
        if not await self._approvals.answer(call_id, approve, reason):
            return TurnResult(text="", rounds=0, stopped="pending_approval")
        round_ = self.state.open_round or self.state.round + 1
        calls = tuple(self.state.open_calls.values())
        denied = self._approvals.denied_outputs()
        outputs = await self._writer.run_calls(round_, calls, denied, self.tools, None)
        await self._writer.commit_outputs(round_, outputs, None)
        result = await self._turns.rounds(self.state.turn)
        return replace(result, rounds=result.rounds + 1)

    # -- compaction and protected state --------------------------------------------------

    async def _compact_now(self, focus: str | None, *, reground: bool) -> bool:
        """Manual compaction, decided by the compactor on the last committed snapshot."""
        return await self._gate.compact_now(focus, reground=reground)

    async def _move_provider_items(self) -> None:
        """A history holding a provider's compaction item this session's wire cannot carry is
        summarized locally, from the log's original records, before its next turn."""
        wire = self.settings.wire_api
        if not stranded(self.state.history, wire):
            return
        reason = (
            f"the provider's compaction item cannot go to the {wire} wire: what it covers is "
            "summarized locally from the log"
        )
        self._log.info("provider_item_moved", wire=wire)
        if not await self._gate.compact_now(None, reground=True, reason=reason):
            # nothing could be compacted: the wire sends the item's readable line meanwhile
            self._log.warning("provider_item_not_moved", wire=wire)

    async def _protect(self, ops: Sequence[dict[str, object]]) -> None:
        await self._applier.protect(ops)
