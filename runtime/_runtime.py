"""The public API: a ``Runtime`` hosting any number of ``Session``s in one process.

Each session runs its sampler, tool executor and compactor in a task group of its own, under a
supervisor that turns a failure into a ``SessionFailed`` for that session only. All sessions
of a runtime share one persistence actor per store and the runtime's limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actors._context import SessionContext
from actors._mailbox import Reply, Slot, mailbox
from actors._messages import (
    Append,
    CompactNow,
    PlanOutcome,
    RoundCommitted,
    RunTools,
    SamplerCommand,
    TurnResult,
    UserTurn,
)
from actors.compactor import run_compactor
from actors.persistence import run_persistence
from actors.sampler import Sampler
from actors.tool_executor import run_tool_executor
from storage._protocol import LogStore

from ._config import Settings, new_session_id, validate_session_id
from ._errors import SessionClosed, SessionFailed, StowageError
from ._events import Event, EventBus, LogRepaired, SessionFailedEvent
from ._gateway import ModelGateway
from ._items import Item, SystemMessage
from ._records import ItemRecord, Record, SessionRecord
from ._replay import SessionState, replay
from ._tools import ToolRegistry

__all__ = ["Runtime", "Session"]

_log = structlog.get_logger("stowage.runtime")
T = TypeVar("T")


@dataclass(eq=False)
class Session:
    """A live session. ``send`` runs one turn; ``history`` is what the next request builds on."""

    id: str
    state: SessionState
    _commands: MemoryObjectSendStream[SamplerCommand]
    _runtime: Runtime
    _stopped: anyio.Event = field(default_factory=anyio.Event)
    _failure: BaseException | None = None
    _waiting: set[Reply[Any]] = field(default_factory=set)

    @property
    def history(self) -> tuple[Item, ...]:
        """The items of the live history, in order."""
        return self.state.items

    @property
    def failed(self) -> BaseException | None:
        """The error the session stopped on, if it failed."""
        return self._failure

    async def send(self, text: str, *, pin: bool = False) -> TurnResult:
        """Run one turn with ``text`` as the user's input; returns the final answer.

        Raises ``ModelError`` when the model fails the turn (the session stays usable),
        ``SessionFailed`` when the session stopped on an error, ``SessionClosed`` after close.
        """
        reply: Reply[TurnResult] = Reply()
        await self._ask(UserTurn(text=text, pinned=pin, reply=reply))
        return await self._wait(reply)

    async def compact(self, focus: str | None = None) -> bool:
        """Compact now, on the last committed round; True when history was compacted.

        Raises as ``send`` does.
        """
        reply: Reply[bool] = Reply()
        await self._ask(CompactNow(focus=focus, reply=reply))
        return await self._wait(reply)

    async def close(self) -> None:
        """Finish the work already sent, stop the actors and wait for them."""
        await self._commands.aclose()
        await self._stopped.wait()

    async def _ask(self, command: SamplerCommand) -> None:
        if self._failure is not None:
            raise SessionFailed(
                f"session {self.id} has failed: {self._failure!r}"
            ) from self._failure
        try:
            await self._commands.send(command)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            if self._failure is not None:
                raise SessionFailed(f"session {self.id} has failed") from self._failure
            raise SessionClosed(f"session {self.id} is closed") from exc

    async def _wait(self, reply: Reply[T]) -> T:
        self._waiting.add(reply)
        try:
            return await reply.wait()
        finally:
            self._waiting.discard(reply)

    def _stop(self, failure: BaseException | None) -> None:
        """Mark the session stopped; a session that dies must not leave its askers waiting."""
        self._failure = failure
        self._stopped.set()
        for reply in tuple(self._waiting):
            reply.fail(
                SessionFailed(f"session {self.id} stopped: {failure!r}")
                if failure is not None
                else SessionClosed(f"session {self.id} closed")
            )


class Runtime:
    """Hosts sessions: ``async with Runtime(settings) as rt: s = await rt.create()``.

    ``store`` defaults to a JSONL store at ``settings.store``, ``gateway`` to the one
    ``settings.model`` names (``scripted`` is the offline default), ``tools`` to the workspace
    tools when ``settings.tools == "workspace"``.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        store: LogStore | None = None,
        gateway: ModelGateway | None = None,
        tools: ToolRegistry | None = None,
        max_model_calls: int | None = None,
        max_compactions: int | None = None,
        max_tool_calls: int | None = None,
        mailbox_capacity: int = 256,
    ) -> None:
        from storage import open_store

        from ._openai_gateway import make_gateway
        from ._workspace import workspace_tools

        self.settings = settings or Settings()
        self.store = (
            store
            if store is not None
            else open_store(self.settings.store, durability=self.settings.durability)
        )
        self.gateway = gateway if gateway is not None else make_gateway(self.settings)
        if tools is None:
            tools = (
                workspace_tools(self.settings.workspace)
                if self.settings.tools == "workspace"
                else ToolRegistry()
            )
        self.tools = tools
        self.events = EventBus()
        self._limits = {
            "model": anyio.CapacityLimiter(max_model_calls) if max_model_calls else None,
            "compaction": anyio.CapacityLimiter(max_compactions) if max_compactions else None,
            "tools": anyio.CapacityLimiter(max_tool_calls) if max_tool_calls else None,
        }
        self._capacity = mailbox_capacity
        self._sessions: dict[str, Session] = {}
        self._tg: TaskGroup | None = None
        self._persistence: MemoryObjectSendStream[Append] | None = None

    def subscribe(self, subscriber: Callable[[Event], None]) -> Callable[[], None]:
        """Receive every event of every session; returns the unsubscribe function."""
        return self.events.subscribe(subscriber)

    @property
    def sessions(self) -> dict[str, Session]:
        """The live sessions, by id."""
        return dict(self._sessions)

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        box = mailbox(self._capacity, Append)
        self._persistence = box.send
        self._tg.start_soon(run_persistence, self.store, box.receive)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None and self._persistence is not None
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                for session in list(self._sessions.values()):
                    await session.close()
                await self._persistence.aclose()
        finally:
            try:
                result = await self._tg.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                # the caller's own exception, wrapped by the task group: give it back as it was
                if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                    raise exc from exc.__cause__
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    await self.gateway.aclose()
                    await self.store.aclose()
        return result

    # -- opening sessions ----------------------------------------------------------------

    async def create(self, session_id: str | None = None, *, system: str | None = None) -> Session:
        """Start a new session (a fresh id when none is given) and its log.

        Raises ``InvalidSessionId``, ``SessionExists``.
        """
        session_id = validate_session_id(session_id) if session_id is not None else new_session_id()
        system = system if system is not None else self.settings.system
        records: list[Record] = [
            SessionRecord(
                seq=1,
                model=self.settings.model,
                tools=tuple(self.tools.names()),
                settings=self.settings.public(),
            )
        ]
        if system:
            records.append(ItemRecord(seq=2, item=SystemMessage(text=system)))
        await self.store.create(session_id, records)
        state = replay(session_id, records)
        _log.info("session_created", session=session_id)
        return self._start(state)

    async def resume(self, session_id: str) -> Session:
        """Rebuild a session from its log (newest compaction + tail) and start it.

        An open round gets "interrupted" outputs for its calls. Raises ``InvalidSessionId``,
        ``SessionNotFound``, ``CorruptLogError``.
        """
        session_id = validate_session_id(session_id)
        if session_id in self._sessions:
            return self._sessions[session_id]
        read = await self.store.read_tail(session_id)
        if read.torn_tail is not None:
            torn = read.torn_tail
            self.events.publish(
                LogRepaired(
                    session_id=session_id,
                    path=torn.path,
                    line=torn.line,
                    bytes_removed=torn.bytes_removed,
                )
            )
        state = replay(session_id, read.records)
        _log.info(
            "session_resumed",
            session=session_id,
            records=len(read.records),
            items=len(state.history),
        )
        return self._start(state)

    async def open(self, session_id: str) -> Session:
        """The live session with this id, resumed from its log, or a new one."""
        session_id = validate_session_id(session_id)
        if session_id in self._sessions:
            return self._sessions[session_id]
        if await self.store.exists(session_id):
            return await self.resume(session_id)
        return await self.create(session_id)

    def _start(self, state: SessionState) -> Session:
        if self._tg is None or self._persistence is None:
            raise StowageError("the runtime is not running: use 'async with Runtime(...) as rt'")
        send, receive = anyio.create_memory_object_stream[SamplerCommand](self._capacity)
        session = Session(id=state.session_id, state=state, _commands=send, _runtime=self)
        self._sessions[session.id] = session
        self._tg.start_soon(self._supervise, session, receive)
        return session

    async def _supervise(
        self, session: Session, commands: MemoryObjectReceiveStream[SamplerCommand]
    ) -> None:
        assert self._persistence is not None
        ctx = SessionContext(
            session_id=session.id,
            settings=self.settings,
            gateway=self.gateway,
            tools=self.tools,
            publish=self.events.publish,
            persistence=self._persistence.clone(),
            model_limiter=self._limits["model"],
            compaction_limiter=self._limits["compaction"],
            tool_limiter=self._limits["tools"],
        )
        tools_box = mailbox(1, RunTools)
        committed: Slot[RoundCommitted] = Slot()
        plans: Slot[PlanOutcome] = Slot()
        sampler = Sampler(
            ctx=ctx, state=session.state, tools=tools_box.send, committed=committed, plans=plans
        )
        failure: BaseException | None = None
        try:
            async with ctx.persistence, anyio.create_task_group() as tg:
                tg.start_soon(sampler.run, commands)
                tg.start_soon(_tool_executor, ctx, tools_box.receive)
                tg.start_soon(_compactor, ctx, committed, plans)
        except Exception as exc:
            failure = exc
            _log.error("session_failed", session=session.id, error=repr(exc))
            self.events.publish(SessionFailedEvent(session_id=session.id, error=repr(exc)))
        finally:
            self._sessions.pop(session.id, None)
            for stream in (session._commands, commands, tools_box.send, tools_box.receive):
                stream.close()  # idempotent; after a failure some were never closed by their owner
            session._stop(failure)


async def _tool_executor(ctx: SessionContext, inbox: Any) -> None:
    await run_tool_executor(
        ctx.session_id,
        ctx.tools,
        inbox,
        ctx.publish,
        default_timeout=ctx.settings.tool_timeout,
        limiter=ctx.tool_limiter,
    )


async def _compactor(
    ctx: SessionContext, committed: Slot[RoundCommitted], plans: Slot[PlanOutcome]
) -> None:
    await run_compactor(
        ctx.session_id,
        ctx.settings,
        ctx.gateway,
        committed,
        plans,
        ctx.publish,
        limiter=ctx.compaction_limiter,
    )
