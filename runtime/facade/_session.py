"""A live session as its users hold it: send turns, compact, protect, close.

A ``Session`` is a handle on one sampler's command mailbox; the runtime owns its actors and
stops them. Every ask gets a private reply, failed for the asker if the session dies first.

The runtime that hosts a session drives it through a few named members (``busy``,
``last_active``, ``hibernated``, ``mark_hibernated``, ``close_input``, ``mark_stopped``) and
never touches its private state; the session knows nothing of the runtime.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from stowage.actors import (
    CompactNow,
    ContinueTurn,
    Decide,
    Latch,
    MailboxSend,
    Milestone,
    Protect,
    Reply,
    SamplerCommand,
    TurnInterrupt,
    TurnResult,
    UserTurn,
)
from stowage.core import (
    ConfigError,
    Event,
    FunctionCall,
    Item,
    ProtectedState,
    SessionClosed,
    SessionFailed,
    SessionLeaseLost,
    SessionState,
    user_ops,
)
from stowage.tools import MILESTONE_NAME_CHARS, MILESTONE_NOTE_CHARS

__all__ = ["Session"]

T = TypeVar("T")

# how long an asker whose turn failed waits for the session's actors to stop and say why
_STOP_WAIT = 30.0


class Forker(Protocol):
    """How a session asks its runtime for a fork of itself (``Runtime.fork``, bound to it)."""

    def __call__(
        self, *, at_round: int | None = None, new_id: str | None = None
    ) -> Awaitable[Session]: ...


class _StreamReply(Reply[TurnResult]):
    """A turn's reply that also wakes the streaming consumer when the answer comes."""

    def __init__(self, *, _done: MemoryObjectSendStream[Event | None]) -> None:
        super().__init__()
        self._done = _done

    def set(self, value: TurnResult) -> None:
        super().set(value)
        self._wake()

    def fail(self, error: BaseException) -> None:
        super().fail(error)
        self._wake()

    def _wake(self) -> None:
        # the consumer may have stopped reading already
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._done.send_nowait(None)


class Session:
    """A live session. ``send`` runs one turn; ``history`` is what the next request builds on.

    Built by its ``Runtime`` (inside the event loop) on the send end of its sampler's commands.
    """

    # one per live session, a hundred thousand of them in a process: no per-instance dict
    __slots__ = (
        "_commands",
        "_failure",
        "_fork",
        "_hibernated",
        "_last_active",
        "_on_input",
        "_stopped",
        "_subscribe",
        "_waiting",
        "id",
        "state",
    )

    def __init__(
        self,
        session_id: str,
        state: SessionState,
        commands: MailboxSend[SamplerCommand],
        *,
        subscribe: Callable[[Callable[[Event], None]], Callable[[], None]] | None = None,
        on_input: Callable[[], None] | None = None,
        fork: Forker | None = None,
    ) -> None:
        """``subscribe`` adds a subscriber to the bus its actors publish on (for ``stream``)."""
        self.id = session_id
        self._fork = fork
        self._subscribe = subscribe
        self._on_input = on_input
        self.state = state
        self._commands = commands
        self._stopped = Latch()  # its event is made only when someone waits for the stop
        self._failure: BaseException | None = None
        # the askers waiting on a reply, in the order they asked (a dict: an empty set is
        # three times an empty dict, and a parked session has no asker)
        self._waiting: dict[Reply[Any], None] = {}
        # event-loop time of the last ask or answer; hibernation measures idleness from it
        self._last_active = anyio.current_time()
        self._hibernated = False

    def __repr__(self) -> str:
        return f"Session(id={self.id!r})"

    @property
    def history(self) -> tuple[Item, ...]:
        """The items of the live history, in order."""
        return self.state.items

    @property
    def failed(self) -> BaseException | None:
        """The error the session stopped on, if it failed."""
        return self._failure

    @property
    def stopped(self) -> bool:
        """Whether its actors have stopped (closed, hibernated or failed)."""
        return self._stopped.is_set()

    @property
    def hibernated(self) -> bool:
        """Whether its runtime hibernated it: this handle is spent, ``Runtime.open`` wakes it."""
        return self._hibernated

    @property
    def last_active(self) -> float:
        """Event-loop time of the last ask or answer."""
        return self._last_active

    @property
    def busy(self) -> bool:
        """Whether an ask waits for its answer or a command waits to be served."""
        return bool(self._waiting) or self._commands.statistics().current_buffer_used > 0

    async def send(
        self, text: str, *, pin: bool = False, message_id: str | None = None
    ) -> TurnResult:
        """Run one turn with ``text`` as the user's input; returns the final answer.
        ``message_id``, the sender's id for the message, is logged with it.

        Raises ``ModelError`` when the model fails the turn (the session stays usable),
        ``SessionFailed`` when the session stopped on an error, ``SessionLeaseLost`` when it
        stopped because its writer lease was lost, ``SessionClosed`` after close.
        """
        reply: Reply[TurnResult] = Reply()
        await self._ask(UserTurn(text=text, pinned=pin, reply=reply, message_id=message_id))
        return await self._wait(reply)

    async def stream(
        self, text: str, *, pin: bool = False, message_id: str | None = None
    ) -> AsyncIterator[Event | TurnResult]:
        """Run one turn like ``send``, yielding its events as they happen (``AssistantDelta``,
        ``ToolStarted``/``ToolFinished``, ``RoundCommitted``, compaction events, ...) and,
        last, the ``TurnResult``.

        Stopping the iteration early (``break``, cancelling the consuming task) interrupts the
        turn: a model stream in flight is dropped, running tools are cancelled and get an
        "interrupted" output, the turn is logged as interrupted, and the session stays usable.
        Raises as ``send`` does, and ``ConfigError`` on a session built without an event bus.
        """
        if self._subscribe is None:
            raise ConfigError(f"session {self.id} has no event bus to stream from")
        events_in, events_out = anyio.create_memory_object_stream[Event | None](math.inf)

        def deliver(event: Event) -> None:
            if getattr(event, "session_id", None) == self.id:
                # the consumer may have stopped reading already (the turn failed, and what
                # the session publishes as it stops comes after): those events are its to miss
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    events_in.send_nowait(event)

        reply: _StreamReply = _StreamReply(_done=events_in)
        interrupt = TurnInterrupt()
        unsubscribe = self._subscribe(deliver)
        try:
            await self._ask(
                UserTurn(
                    text=text, pinned=pin, reply=reply, message_id=message_id, interrupt=interrupt
                )
            )
            self._waiting[reply] = None
            async with events_out:
                async for event in events_out:
                    if event is None:  # the answer came: every event of the turn is in
                        break
                    yield event
            result: TurnResult = await self._wait(reply)
            yield result
        finally:
            unsubscribe()
            events_in.close()
            if not reply.done:
                interrupt.request()
                # the consumer is gone, but the session must be whole before the next ask
                # (the asker is gone: the turn's own error is moot)
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(_STOP_WAIT),
                    contextlib.suppress(Exception),
                ):
                    await self._wait(reply)

    @property
    def pending_approvals(self) -> tuple[FunctionCall, ...]:
        """The calls that wait for a person's approval (the turn stopped with
        ``stopped="pending_approval"``), in call order; durable, so a resumed session has
        them too."""
        return self.state.awaiting_approval

    def approval_detail(self, call_id: str) -> str | None:
        """What call ``call_id``, awaiting approval, will do, as recorded when it was
        requested (the diff of an edit, the whole command line with its sandbox); None for a
        tool that shows nothing."""
        return self.state.approval_details.get(call_id)

    async def approve(self, call_id: str) -> TurnResult:
        """Approve call ``call_id``. Once no call of its round awaits approval, the round's
        calls run and the turn goes on: returns its result (``stopped="pending_approval"``
        while others still wait).

        Raises ``ApprovalError`` (a ``ConfigError``) if no such call awaits approval;
        otherwise as ``send`` does.
        """
        return await self._decide(call_id, approve=True, reason=None)

    async def deny(self, call_id: str, reason: str | None = None) -> TurnResult:
        """Deny call ``call_id``: it gets a "denied" output (with ``reason``) instead of
        running; otherwise as ``approve``."""
        return await self._decide(call_id, approve=False, reason=reason)

    async def _decide(self, call_id: str, *, approve: bool, reason: str | None) -> TurnResult:
        reply: Reply[TurnResult] = Reply()
        await self._ask(Decide(call_id=call_id, approve=approve, reason=reason, reply=reply))
        return await self._wait(reply)

    async def continue_turn(self) -> TurnResult:
        """Run the rest of the turn the log left open (its input was logged, its answer never
        was: the process running it stopped) without logging the input again; a result with
        ``stopped="no_open_turn"`` when there is none.

        Raises as ``send`` does.
        """
        reply: Reply[TurnResult] = Reply()
        await self._ask(ContinueTurn(reply=reply))
        return await self._wait(reply)

    async def compact(self, focus: str | None = None, *, reground: bool = False) -> bool:
        """Compact now, on the last committed round; True when history was compacted.
        ``reground``: make the summary from the log's original records since the last
        re-grounded compaction, not from the summary before it.

        Raises as ``send`` does.
        """
        reply: Reply[bool] = Reply()
        await self._ask(CompactNow(focus=focus, reply=reply, reground=reground))
        return await self._wait(reply)

    async def milestone(self, name: str, note: str | None = None) -> None:
        """Record that a phase of the work ended: a ``milestone`` record and a
        ``MilestoneReached`` event. Above the soft mark the session compacts here (the
        summary is told the phase that ended) rather than a few rounds later.

        Raises ``ConfigError`` for an empty name, a name over 200 characters or a note over
        2,000 (the model's ``mark_milestone`` tool takes the same); otherwise as ``send`` does.
        """
        if not name.strip():
            raise ConfigError("a milestone needs a name: say which phase of the work ended")
        if len(name) > MILESTONE_NAME_CHARS:
            raise ConfigError(
                f"a milestone's name is {len(name):,} characters, more than the "
                f"{MILESTONE_NAME_CHARS} it may have: name the phase, and say the rest in --note"
            )
        if note is not None and len(note) > MILESTONE_NOTE_CHARS:
            raise ConfigError(
                f"a milestone's note is {len(note):,} characters, more than the "
                f"{MILESTONE_NOTE_CHARS:,} it may have: a sentence or two of what the phase left"
            )
        reply: Reply[None] = Reply()
        await self._ask(Milestone(name=name.strip(), note=note or None, reply=reply))
        await self._wait(reply)

    async def fork(self, at_round: int | None = None, new_id: str | None = None) -> Session:
        """A new live session whose history is this one's at the end of round ``at_round``
        (the newest committed round when None); this session goes on untouched. ``new_id``
        defaults to ``<id>-fork-<n>``.

        Raises ``ConfigError`` for a round not committed (or a session not made by a runtime),
        and what ``Runtime.fork`` raises.
        """
        if self._fork is None:
            raise ConfigError(f"session {self.id} was not started by a runtime: it cannot fork")
        return await self._fork(at_round=at_round, new_id=new_id)

    @property
    def protected(self) -> ProtectedState:
        """The protected state: objective, constraints, decisions, pending, completed, failed
        attempts and artifacts, each entry with its stable id."""
        return self.state.protected

    async def protect(
        self,
        *,
        objective: str | None = None,
        add_constraints: Sequence[str] = (),
        drop_constraints: Sequence[str] = (),
    ) -> ProtectedState:
        """Change protected state with the user's word (between turns, logged as a
        ``protected`` record); returns the new state. Repeating an existing entry is a no-op.

        Raises ``ProtectedStateViolation`` naming the entry (an unknown id to drop, an empty
        text) with nothing changed; otherwise as ``send`` does.
        """
        reply: Reply[None] = Reply()
        ops = user_ops(
            objective=objective, add_constraints=add_constraints, drop_constraints=drop_constraints
        )
        await self._ask(Protect(ops=tuple(ops), reply=reply))
        await self._wait(reply)
        return self.state.protected

    async def close(self) -> None:
        """Finish the work already sent, stop the actors and wait for them."""
        await self._commands.aclose()
        self._input_changed()
        await self._stopped.wait()

    def close_input(self) -> None:
        """Take no more asks; what was sent is still served. Never waits; idempotent."""
        self._commands.close()
        self._input_changed()

    def _input_changed(self) -> None:
        if self._on_input is not None:
            self._on_input()

    def mark_hibernated(self) -> None:
        """Its runtime is hibernating it: asks on this handle now say so."""
        self._hibernated = True

    def mark_stopped(self, failure: BaseException | None) -> None:
        """Its actors stopped (on ``failure``, if any): a session that dies must not leave its
        askers waiting, so every pending ask fails with ``SessionLeaseLost``, ``SessionFailed``
        or ``SessionClosed``."""
        self._failure = failure
        self._stopped.set()
        for reply in tuple(self._waiting):
            reply.fail(self._stopped_error())

    def _stopped_error(self) -> Exception:
        failure = self._failure
        if isinstance(failure, SessionLeaseLost):
            # a fresh one per asker: one exception raised in many tasks mixes tracebacks
            lost = SessionLeaseLost(failure.session_id, failure.reason)
            lost.__cause__ = failure.__cause__
            return lost
        if failure is not None:
            root = _root_cause(failure)
            failed = SessionFailed(f"session {self.id} stopped: {root!r}")
            failed.__cause__ = root  # what ended it decides the command line's exit status
            return failed
        return SessionClosed(f"session {self.id} closed")

    async def _ask(self, command: SamplerCommand) -> None:
        self._last_active = anyio.current_time()
        if self._hibernated:
            raise SessionClosed(
                f"session {self.id} is hibernated: use Runtime.send or Runtime.open to wake it"
            )
        if isinstance(self._failure, SessionLeaseLost):
            raise self._stopped_error()
        if self._failure is not None:
            root = _root_cause(self._failure)
            raise SessionFailed(f"session {self.id} has failed: {root!r}") from root
        try:
            await self._commands.send(command)
            self._input_changed()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            if isinstance(self._failure, SessionLeaseLost):
                lost = self._stopped_error()
                raise lost from lost.__cause__
            if self._failure is not None:
                raise SessionFailed(f"session {self.id} has failed") from _root_cause(self._failure)
            raise SessionClosed(f"session {self.id} is closed") from exc

    async def _wait(self, reply: Reply[T]) -> T:
        self._waiting[reply] = None
        try:
            return await reply.wait()
        except SessionFailed:
            # the actor that failed the ask dies with it; its runtime then says why it stopped,
            # and a lost lease is worth its own error (another process may hold the session)
            with anyio.move_on_after(_STOP_WAIT):
                await self._stopped.wait()
            if isinstance(self._failure, SessionLeaseLost):
                lost = self._stopped_error()
                raise lost from lost.__cause__
            if self._failure is not None:
                # the actor that answered may only have been cancelled by the one that failed:
                # say what stopped the session, not the cancellation
                stopped = self._stopped_error()
                raise stopped from stopped.__cause__
            raise
        finally:
            self._waiting.pop(reply, None)
            self._last_active = anyio.current_time()


def _root_cause(failure: BaseException) -> BaseException:
    """What stopped a session: the first error in an exception group that is not a cancellation
    (the task group cancels the other actors when one fails)."""
    if isinstance(failure, BaseExceptionGroup):
        for inner in failure.exceptions:
            found = _root_cause(inner)
            if not isinstance(found, anyio.get_cancelled_exc_class()):
                return found
    return failure
