"""The sampler actor: owns one session's live state and runs its round loop.

A round: project history, stream one response, write the assistant text and calls (durable
before any tool runs), have the tool executor run the calls, write the outputs with a
``round_committed`` record. Compaction plans are applied only here and only between rounds.

A response is used only whole (the gateway raises on one that never said it was done) and
checked before anything of it is written (``ResponseChecks``): duplicate call ids are made
unique, usage that cannot be true is set aside, an answer larger than ``max_answer_chars``
is refused like any other bad response; then calls the output limit cut off get an error
output instead of running.

Three named helpers share the work, each on its own small interface: the ``Journal`` (every
state change is a batch of records it folds in, as replay does, and makes durable; a batch
that ends at a boundary goes to the compactor as a snapshot), the ``PlanApplier`` (compaction
and protected-state writes) and the ``Gate`` (applies what the compactor advised, and holds a
request back while it says so). None of them knows the sampler. The sampler decides nothing
about compaction: the compactor does, on committed snapshots.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from stowage.core import (
    ApprovalError,
    ApprovalRecord,
    AssistantDelta,
    AssistantMessage,
    ContextLengthExceeded,
    FunctionCall,
    FunctionCallOutput,
    IncompleteResponse,
    Item,
    ItemRecord,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelRetrying,
    ProtectedStateViolation,
    Record,
    ResponseDone,
    ResponseTooLarge,
    RoundCommitted,
    RoundCommittedRecord,
    RoundStarted,
    SessionFailed,
    SessionState,
    Settings,
    TextDelta,
    TurnFinished,
    TurnRecord,
    UserMessage,
    build_projection,
    estimate_tokens,
)
from stowage.policy import cache_key_for

from ._accounting import Accounting
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
    Protect,
    RunTools,
    SamplerCommand,
    TurnResult,
    UserTurn,
)
from ._plans import PlanApplier
from ._responses import VettedUsage, answer_too_large, cut_call_outputs, merge_outputs
from ._retry import call_with_retries

__all__ = ["Sampler", "interrupted_output", "unique_call_ids"]

_log = structlog.get_logger("stowage.sampler")
T = TypeVar("T")

INTERRUPTED = (
    "interrupted: the session stopped before this call finished; it may or may not have run"
)


class _TurnInterrupted(Exception):
    """Raised inside the sampler when the turn's interrupt stopped the model stream."""


class _AwaitingApproval(Exception):
    """Raised inside the sampler when a round's calls wait for a person's approval."""


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
    tools: MemoryObjectSendStream[RunTools] | None = None

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
        #: the ``prompt_cache_key`` the session's round requests carry
        self._cache_key = cache_key_for(self.ctx.settings, self.ctx.session_id)
        # the running turn's interrupt, if its asker can stop it
        self._interrupt: TurnInterrupt | None = None
        # the round's request as it is sent (rebuilt if a plan lands while it waits)
        self._sending: ModelRequest | None = None

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
        commands: MemoryObjectReceiveStream[SamplerCommand],
        first: SamplerCommand,
        tools: MemoryObjectSendStream[RunTools],
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
        records.append(
            self._commit_record(round_, None, first, interrupted=True, offset=len(records))
        )
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
                await self._answer(command.reply, self._compact_now(command.focus))
            case Protect():
                await self._answer(command.reply, self._protect(command.ops))
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
        self._refuse_while_awaiting("a new turn")
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
            except _TurnInterrupted:
                return await self._interrupted(turn, rounds)
            except _AwaitingApproval:
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

    async def _sample_unless_interrupted(
        self, request: ModelRequest, round_: int
    ) -> tuple[ModelRequest, ModelResponse]:
        """``_sample`` under the turn's interrupt; raises ``_TurnInterrupted`` if it fired
        (nothing of the round is written yet)."""
        if self._interrupt is None:
            return await self._sample(request, round_)
        sampled: tuple[ModelRequest, ModelResponse] | None = None
        with self._interrupt.guard():
            sampled = await self._sample(request, round_)
        if sampled is None:
            raise _TurnInterrupted
        return sampled

    async def _round(self, turn: int) -> ModelResponse | None:
        """One round; returns the response when the model made no tool calls (the answer).

        Raises ``CompactionLoop`` (after an ``error`` record) when the compactor found the turn
        in a real compaction loop, and ``ContextLengthExceeded`` when the request cannot be
        brought under the hard mark.
        """
        round_ = self.state.round + 1
        log = self._log.bind(round=round_)
        # pre-turn and mid-turn: the compactor's verdict on the newest boundary, applied
        await self._gate.settle()
        projection = self._projection()
        request = ModelRequest(
            model=self.settings.model,
            input=projection,
            tools=self.ctx.tools.specs(),
            max_output_tokens=self.settings.max_output_tokens,
            cache_key=self._cache_key,
        )
        self.ctx.publish(
            RoundStarted(
                session_id=self.ctx.session_id,
                round=round_,
                items=len(projection),
                tokens=estimate_tokens(projection),
                estimated=True,
            )
        )
        try:
            try:
                request, response = await self._sample_unless_interrupted(request, round_)
            except ContextLengthExceeded as exc:
                # nothing of the round was written: compact, blocking, and send it once more
                await self._gate.recover_overflow(exc, self._sending or request)
                request = replace(request, input=self._projection())
                request, response = await self._sample_unless_interrupted(request, round_)
        finally:
            self._sending = None  # nothing of a round outlives it
        seq = self.state.last_seq
        response = unique_call_ids(response, self._taken_call_ids(), salt=f"s{seq + 1}")
        usage = await self._checks.usage(response, request)
        seq = self.state.last_seq
        sampled: list[Record] = [
            ItemRecord(seq=seq + 1 + i, item=item, round=round_)
            for i, item in enumerate(response.items)
            if not (isinstance(item, AssistantMessage) and not item.text)
        ]
        calls = response.calls
        if not calls:
            commit = self._commit_record(
                round_, response, seq + 1, offset=len(sampled), usage=usage
            )
            finished = TurnRecord(seq=commit.seq + 1, turn=turn, phase="finished")
            await self._commit(round_, [*sampled, commit, finished], response, calls=0)
            log.info("turn_finished", turn=turn, truncated=response.truncated)
            self.ctx.publish(
                TurnFinished(session_id=self.ctx.session_id, turn=turn, text=response.text)
            )
            return response
        # write-ahead: the calls are durable before any tool runs
        await self._journal.write(sampled)
        await self._request_approvals(round_, calls)
        outputs = await self._run_tools(round_, response)
        await self._commit_outputs(round_, outputs, response, usage=usage)
        return None

    # -- approvals -------------------------------------------------------------------------

    def _needs_approval(self, call: FunctionCall) -> bool:
        return bool(getattr(self.ctx.tools.get(call.name), "needs_approval", False))

    def _refuse_while_awaiting(self, what: str) -> None:
        waiting = self.state.awaiting_approval
        if waiting:
            ids = ", ".join(c.call_id for c in waiting)
            raise ApprovalError(
                f"session {self.ctx.session_id} has calls awaiting approval ({ids}): "
                f"approve or deny them before {what}"
            )

    async def _request_approvals(self, round_: int, calls: Sequence[FunctionCall]) -> None:
        """Stop the turn before any tool of the round runs when one of its calls needs a
        person's approval: the requests are durable, the round stays open."""
        needing = [c for c in calls if self._needs_approval(c)]
        if not needing:
            return
        seq = self.state.last_seq
        await self._journal.write(
            [
                ApprovalRecord(seq=seq + 1 + i, call_id=c.call_id, decision="requested")
                for i, c in enumerate(needing)
            ],
            boundary="approval",
        )
        self._log.info("approval_requested", round=round_, calls=[c.call_id for c in needing])
        raise _AwaitingApproval

    async def _decide(self, call_id: str, approve: bool, reason: str | None) -> TurnResult:
        """Log the answer for ``call_id``; when no call of the round awaits one any more, run
        the round (denied calls get a "denied" output) and go on with the turn.

        Raises ``ApprovalError`` if ``call_id`` awaits no approval (nothing is written).
        """
        waiting = [c.call_id for c in self.state.awaiting_approval]
        if call_id not in waiting:
            awaiting = f"; awaiting: {', '.join(waiting)}" if waiting else "; none is awaiting"
            raise ApprovalError(
                f"session {self.ctx.session_id}: call {call_id!r} awaits no approval{awaiting}"
            )
        decision: Literal["approved", "denied"] = "approved" if approve else "denied"
        await self._journal.write(
            [
                ApprovalRecord(
                    seq=self.state.last_seq + 1, call_id=call_id, decision=decision, reason=reason
                )
            ]
        )
        self._log.info("approval_decided", call_id=call_id, decision=decision)
        if self.state.awaiting_approval:
            return TurnResult(text="", rounds=0, stopped="pending_approval")
        await self._run_decided_round()
        result = await self._rounds(self.state.turn)
        return replace(result, rounds=result.rounds + 1)

    async def _run_decided_round(self) -> None:
        """Run the open round whose approvals are all given and commit it, outputs in call
        order."""
        round_ = self.state.open_round or self.state.round + 1
        calls = tuple(self.state.open_calls.values())
        denied = {
            call_id: FunctionCallOutput(
                call_id=call_id,
                output=f"denied: {reason or 'a person denied this call'}",
                is_error=True,
            )
            for call_id, reason in self.state.denial_reasons.items()
        }
        outputs = await self._run_calls(round_, calls, denied)
        await self._commit_outputs(round_, outputs, None)

    async def _commit_outputs(
        self,
        round_: int,
        outputs: Sequence[FunctionCallOutput],
        response: ModelResponse | None,
        *,
        usage: VettedUsage | None = None,
    ) -> None:
        """Write the round's outputs, in call order, and its ``round_committed`` record."""
        first = self.state.last_seq + 1
        committed: list[Record] = [
            ItemRecord(seq=first + i, item=output, round=round_) for i, output in enumerate(outputs)
        ]
        committed.append(
            self._commit_record(round_, response, first, offset=len(committed), usage=usage)
        )
        await self._commit(
            round_, committed, response or ModelResponse(items=()), calls=len(outputs)
        )

    async def _run_tools(
        self, round_: int, response: ModelResponse
    ) -> tuple[FunctionCallOutput, ...]:
        """One output per call, in order: calls the output limit cut off get an error output
        and do not run; the tool executor runs the rest."""
        refused = cut_call_outputs(response, max_output_tokens=self.settings.max_output_tokens)
        if refused:
            self._log.warning("tool_calls_cut_off", round=round_, calls=sorted(refused))
        return await self._run_calls(round_, response.calls, refused)

    async def _run_calls(
        self,
        round_: int,
        calls: tuple[FunctionCall, ...],
        refused: dict[str, FunctionCallOutput],
    ) -> tuple[FunctionCallOutput, ...]:
        """One output per call, in call order: ``refused`` ones keep the output given, the
        tool executor runs the rest (under the turn's interrupt, when it has one)."""
        runnable = tuple(c for c in calls if c.call_id not in refused)
        ran: tuple[FunctionCallOutput, ...] = ()
        if runnable:
            reply: Reply[tuple[FunctionCallOutput, ...]] = Reply()
            assert self.tools is not None  # only a serving sampler runs rounds
            await self.tools.send(
                RunTools(round=round_, calls=runnable, reply=reply, interrupt=self._interrupt)
            )
            ran = await reply.wait()
        return merge_outputs(calls, refused, ran)

    async def _sample(
        self, request: ModelRequest, round_: int
    ) -> tuple[ModelRequest, ModelResponse]:
        """The response to ``request``, and the request as sent: a plan that came back while
        the round waited for its model-call place is applied first, and the request is
        built again from the compacted history (``_sending`` holds it until the round ends)."""
        self._sending = request

        async def attempt() -> ModelResponse:
            request = self._sending
            assert request is not None
            if not self.settings.stream:
                return self._whole(await self.ctx.gateway.create(request))
            done: ModelResponse | None = None
            async for event in self.ctx.gateway.stream(request):
                if isinstance(event, TextDelta):
                    self.ctx.publish(
                        AssistantDelta(
                            session_id=self.ctx.session_id, round=round_, text=event.text
                        )
                    )
                elif isinstance(event, ResponseDone):
                    done = event.response
            if done is None:
                raise IncompleteResponse("the model stream ended without a final response")
            return self._whole(done)

        async def limited() -> ModelResponse:
            limiter = self.ctx.model_limiter
            if limiter is None:
                return await attempt()
            waited = await limiter.acquire("round")
            try:
                if waited:
                    await self._apply_plan_while_placed()
                return await attempt()
            finally:
                limiter.release()

        def waiting(attempt: int, delay: float, rate_limited: bool, error: ModelError) -> None:
            self.ctx.publish(
                ModelRetrying(
                    session_id=self.ctx.session_id,
                    purpose="round",
                    attempt=attempt,
                    delay=delay,
                    rate_limited=rate_limited,
                    error=type(error).__name__,
                )
            )

        response = await call_with_retries(
            limited,
            attempts=self.settings.max_retries + 1,
            log=self._log,
            what="model_call",
            max_wait=self.settings.max_retry_wait,
            on_wait=waiting,
        )
        sent = self._sending
        assert sent is not None
        return sent, response

    async def _apply_plan_while_placed(self) -> None:
        """Apply a plan that came back while the round waited for its place, and build the
        request again from what it left (only the input changes). Shielded: its writes are
        not abandoned halfway by an interrupt."""
        request = self._sending
        assert request is not None
        last_seq = self.state.last_seq
        with anyio.CancelScope(shield=True):
            await self._gate.apply_ready()
        if self.state.last_seq != last_seq:
            self._sending = replace(request, input=self._projection())

    def _commit_record(
        self,
        round_: int,
        response: ModelResponse | None,
        first_seq: int,
        *,
        offset: int,
        interrupted: bool = False,
        usage: VettedUsage | None = None,
    ) -> RoundCommittedRecord:
        """``usage``: what the vetting of the response's usage left (default: as reported)."""
        seq = first_seq + offset
        if usage is None:
            usage = VettedUsage(usage=response.usage if response is not None else None)
        return RoundCommittedRecord(
            seq=seq,
            round=round_,
            usage=usage.usage,
            first_seq=first_seq,
            last_seq=seq,
            interrupted=interrupted,
            truncated=response.truncated if response is not None else False,
            reported_usage=usage.rejected,
        )

    async def _commit(
        self, round_: int, records: Sequence[Record], response: ModelResponse, *, calls: int
    ) -> None:
        """Write the committed batch; persistence hands the compactor its snapshot once it
        is durable, and the compactor's verdict is applied before the next request."""
        await self._journal.write(records, boundary="round")
        commit = next(r for r in records if isinstance(r, RoundCommittedRecord))
        self.ctx.publish(
            RoundCommitted(
                session_id=self.ctx.session_id,
                round=round_,
                usage=commit.usage,
                calls=calls,
                truncated=commit.truncated,
            )
        )

    # -- compaction ----------------------------------------------------------------------

    async def _compact_now(self, focus: str | None) -> bool:
        """Manual compaction, decided by the compactor on the last committed snapshot; True
        when history was compacted."""
        return await self._gate.compact_now(focus)

    async def _protect(self, ops: Sequence[dict[str, object]]) -> None:
        await self._applier.protect(ops)

    # -- helpers -------------------------------------------------------------------------

    def _whole(self, response: ModelResponse) -> ModelResponse:
        """``response``, unless its answer is larger than ``max_answer_chars``. Raises
        ``ResponseTooLarge`` (a bad response: retried, then the turn fails, nothing written)."""
        too_large = answer_too_large(response, self.settings.max_answer_chars)
        if too_large is not None:
            raise ResponseTooLarge(too_large)
        return response

    def _taken_call_ids(self) -> set[str]:
        return {e.item.call_id for e in self.state.history if isinstance(e.item, FunctionCall)}

    def _projection(self) -> tuple[Item, ...]:
        return build_projection(
            self.state.history,
            stubbed=self.state.stubbed,
            protected_text=self._journal.protected_text(),
        )
