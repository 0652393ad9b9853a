"""The public API: a ``Runtime`` hosting any number of ``Session``s in one process.

Each session runs its sampler, tool executor and compactor in a task group of its own, under a
supervisor that turns a failure into a ``SessionFailed`` for that session only. All sessions
of a runtime share one persistence actor per store and the runtime's limits. A parked session
holds no task: its supervisor ends when it parks, and the next command (or the end of its
input, or its lease lost) starts another (``_actor_runs.SessionRun``).

Hibernation: with ``idle_timeout`` set, a session that has had nothing to do for that long
stops its actors and is dropped from memory; only its id is kept. ``open``/``send`` rebuild it
from the log (newest compaction + tail), exactly as a resume after a restart would.

One writer per session: a session is live only while this runtime holds its writer lease
(``LogStore.acquire``), taken before its log is read and given back when it stops (closed,
hibernated, failed). Another process holding it makes ``create``/``open``/``resume``/``send``
raise ``SessionBusy`` with nothing started. A lease found lost (a renewal or an append fenced)
stops that session alone, without another write: ``SessionLeaseLost`` for its askers and a
``SessionLeaseLostEvent``.

All the runtime knows of a session is in its one record (``_slots.SessionSlot``): its state
(creating, live, parked, running, closing, hibernated; closed and failed once gone) moved only
as ``_slots.TRANSITIONS`` allows, its handle, settings, lease and stop scope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from functools import partial
from types import TracebackType
from typing import Any, Self

import anyio
import structlog
from anyio.abc import TaskGroup
from stowage.actors import (
    Append,
    Doorbell,
    MailboxReceive,
    MailboxSend,
    SamplerCommand,
    SessionContext,
    TurnResult,
    mailbox,
    open_mailbox,
    run_persistence,
)
from stowage.core import (
    IDENTITY_FIELDS,
    CompactionHooks,
    ConfigError,
    Event,
    EventBus,
    LogRepaired,
    LogStore,
    ModelGateway,
    ProtectedState,
    Record,
    RewindRecord,
    RuntimeLimits,
    SessionClosed,
    SessionExists,
    SessionFailedEvent,
    SessionHibernated,
    SessionLeaseLost,
    SessionLeaseLostEvent,
    SessionRehydrated,
    SessionState,
    Settings,
    SettingsChanged,
    StowageError,
    configure_logging,
    continue_settings,
    identity_from_records,
    lineage_store,
    new_session_id,
    prepare_all,
    replay,
    user_ops,
    validate_session_id,
)
from stowage.model import make_gateway
from stowage.policy import check_tool_count
from stowage.storage import open_store
from stowage.tools import MCPServer, ToolRegistry, with_milestone, with_recall, workspace_tools

from ._actor_runs import SessionRun, read_records, serve_commands, start_actors
from ._descriptors import DescriptorUse, descriptor_use
from ._identity import WindowFinder, session_identity
from ._leases import Leases
from ._mcp_tools import MCPServers
from ._parts import Limiters, UnbuiltGateway, after_hook, fencing_error, limiters, tool_fields
from ._session import Session
from ._session_settings import Change, check_fits, endpoint_for, first_records, settings_records
from ._slot_table import SlotTable
from ._slots import SessionSlot, SlotState

__all__ = ["Runtime"]

_log = structlog.get_logger("stowage.runtime")


class Runtime:
    """Hosts sessions: ``async with Runtime(settings) as rt: s = await rt.create()``.

    ``store`` defaults to a JSONL store at ``settings.store``, ``gateway`` to the one
    ``settings.model`` names (``scripted`` is the offline default), ``tools`` to the workspace
    tools when ``settings.tools == "workspace"``. ``rt.store`` is that store seen through
    lineages (``core.LineageStore``: a fork read with its parents, a rewind's branch left out;
    ``rt.store.inner`` is the store itself); ``fork`` and ``rewind`` start from a round.

    ``limits`` (``RuntimeLimits``, declared there with their defaults and ranges) are shared
    by every session: model calls, compactions and tool calls in flight, sessions running at
    once (the others wait parked), ``idle_timeout`` before an idle session hibernates. A limit
    given by name (``max_model_calls=20``) replaces its value in ``limits``; ``rt.limits``
    holds the result, ``rt.limiters`` the limiters that keep it. A session is not started
    while the process's open descriptors are within a reserve of ``RLIMIT_NOFILE``
    (``DescriptorLimitReached``; figures in ``descriptors``). Raises ``ConfigError`` naming a
    limit out of its range, ``TypeError`` for a name that is not a limit.

    Identity: a new session records what it runs with (``core.identity_of``: model, redacted
    endpoint, wire API, window, compaction settings, tool set, system prompt; never a key). A
    session continued (``resume``, ``open``, ``send``) runs with that recorded identity, not
    with ``settings``' fields of the same names; ``overrides`` (``Settings`` field names of
    ``core.IDENTITY_FIELDS``) replace it, and a change is logged as a ``settings_changed``
    record and published as ``SettingsChanged``. With no ``gateway`` given, a session recorded
    at another real endpoint moves to this runtime's (recorded the same way, source
    ``runtime``); one recorded for a real model is refused by a runtime of the offline
    scripted model, and the other way round, with ``ConfigError``.

    ``compaction_hooks`` (``CompactionHooks``): ``before`` sees each full compaction before
    its summary is asked for and may add focus text or refuse a manual one
    (``CompactionVetoed``); ``after`` observes each one that landed.

    Leaving ``async with`` normally finishes the work sent to every session first; leaving it
    cancelled (Ctrl-C) or on ``KeyboardInterrupt`` stops every session at once: a model call or
    tool in flight is abandoned and nothing half-done is written (a round is written whole or
    not at all; a call whose output was never written reads as interrupted on resume).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        store: LogStore | None = None,
        gateway: ModelGateway | None = None,
        tools: ToolRegistry | None = None,
        limits: RuntimeLimits | None = None,
        mailbox_capacity: int = 256,
        overrides: Mapping[str, Any] | None = None,
        mcp: Sequence[str | MCPServer] = (),
        compaction_hooks: CompactionHooks | None = None,
        **limit_values: Any,
    ) -> None:
        if not structlog.is_configured():
            # structlog's own default prints every debug line to stdout; an embedding
            # application that configures structlog itself keeps its configuration
            configure_logging("console", "warning")
        #: the limits shared by its sessions
        self.limits = (limits or RuntimeLimits()).with_(**limit_values)
        self.settings = settings or Settings()
        self._hooks = compaction_hooks or CompactionHooks()
        self.overrides: dict[str, Any] = dict(overrides or {})
        unknown = sorted(set(self.overrides) - set(IDENTITY_FIELDS))
        if unknown:
            raise ConfigError(f"overrides: not a session setting: {', '.join(unknown)}")
        # the endpoint is checked against a session's identity only when it is ours to match
        self._own_gateway = gateway is None
        self._tools_given = tools is not None
        self._windows = WindowFinder()
        # seen through lineages: a fork reads its parent's records, a rewind's branch is skipped
        self.store = lineage_store(
            store
            if store is not None
            else open_store(self.settings.store, durability=self.settings.durability)
        )
        # a gateway that cannot be built (no API key) fails the first session start, after
        # its lease is checked: a busy session says so first
        self._gateway_error: ConfigError | None = None
        if gateway is None:
            try:
                gateway = make_gateway(self.settings)
            except ConfigError as exc:
                self._gateway_error = exc
                gateway = UnbuiltGateway(exc)
        self.gateway = gateway
        if tools is None:
            tools = (
                workspace_tools(self.settings.workspace, settings=self.settings)
                if self.settings.tools == "workspace"
                else ToolRegistry()
            )
        self.tools = tools
        # MCP servers (a command line, an http(s) URL, or an MCPServer): started on enter
        self._mcp = MCPServers(mcp)
        self.events = EventBus()
        if self._hooks.after is not None:
            self.events.subscribe(after_hook(self._hooks.after))
        self._limiters = limiters(self.limits)
        self._capacity = mailbox_capacity
        # one record per session this runtime knows, by id (see ``SlotTable``)
        self._slots = SlotTable()
        self._reaper: anyio.CancelScope | None = None
        self._leases = Leases(self.store, self._lease_lost, self._slots.held_leases)
        self._renewer: anyio.CancelScope | None = None
        self._tg: TaskGroup | None = None
        self._persistence: MailboxSend[Append] | None = None

    @property
    def limiters(self) -> Limiters:
        """The shared limiters by name (``model``, ``compaction``, ``tools``, ``running``);
        None: unlimited."""
        return self._limiters

    def subscribe(self, subscriber: Callable[[Event], None]) -> Callable[[], None]:
        """Receive every event of every session; returns the unsubscribe function."""
        return self.events.subscribe(subscriber)

    @property
    def sessions(self) -> dict[str, Session]:
        """The live sessions, by id."""
        return self._slots.live()

    @property
    def descriptors(self) -> DescriptorUse:
        """File descriptors the process has open now and its limit (``RLIMIT_NOFILE``); a
        session is refused with ``DescriptorLimitReached`` once they come within
        ``DescriptorUse.reserve`` of it."""
        return descriptor_use()

    @property
    def hibernated(self) -> frozenset[str]:
        """Ids of the sessions hibernated by this runtime and not woken since."""
        return self._slots.hibernated()

    # read by tests/facade/test_hibernation.py: views of the records, by the names they had
    # as the runtime's own dicts
    @property
    def _opening(self) -> dict[str, SessionSlot]:
        """The ids being opened (a read-only view of the records)."""
        return {i: s for i, s in self._slots.items() if s.state is SlotState.CREATING}

    @property
    def _hibernating(self) -> dict[str, Session]:
        """The sessions being hibernated (a read-only view of the records)."""
        return {
            i: s.session
            for i, s in self._slots.items()
            if s.state is SlotState.CLOSING and s.hibernating and s.session is not None
        }

    async def __aenter__(self) -> Self:
        self.tools = await self._mcp.start(self.tools)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        box = mailbox(self._capacity, Append)
        self._persistence = box.send
        self._tg.start_soon(run_persistence, self.store, box.receive)
        if self.limits.idle_timeout is not None:
            self._reaper = anyio.CancelScope()
            self._tg.start_soon(self._reap, self._reaper, self.limits.idle_timeout)
        self._renewer = anyio.CancelScope()
        self._tg.start_soon(self._renew, self._renewer)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None and self._persistence is not None
        # interrupted: stop now, abandoning calls in flight; otherwise finish the work sent
        stop_now = exc_type is not None and issubclass(
            exc_type, (anyio.get_cancelled_exc_class(), KeyboardInterrupt)
        )
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                if self._reaper is not None:
                    self._reaper.cancel()
                # live, and leaving (hibernating, or giving its lease back)
                closing = [
                    (slot, slot.session)
                    for slot in self._slots.values()
                    if slot.session is not None and (slot.live or slot.state is SlotState.CLOSING)
                ]
                for slot, session in closing:  # all at once: their actors wind down concurrently
                    session.close_input()  # a parked session's supervisor starts again
                    if stop_now and slot.stop is not None:
                        slot.stop.cancel()
                for _, session in closing:
                    await session.close()
                if self._renewer is not None:
                    self._renewer.cancel()
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
                try:
                    await self._mcp.stop()
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.gateway.aclose()
                        await self.store.aclose()
        return result

    # -- opening sessions ----------------------------------------------------------------

    async def create(
        self,
        session_id: str | None = None,
        *,
        system: str | None = None,
        objective: str | None = None,
        constraints: Sequence[str] = (),
    ) -> Session:
        """Start a new session (a fresh id when none is given) and its log; ``objective`` and
        ``constraints`` start its protected state (the user's word, kept through compactions).

        Raises ``InvalidSessionId``, ``SessionExists``, ``ProtectedStateViolation``,
        ``SessionBusy`` naming the holder when another writer holds the id's lease,
        ``DescriptorLimitReached`` when the process's descriptors are near their limit.
        """
        self._check_running()
        session_id = validate_session_id(session_id) if session_id is not None else new_session_id()
        records, settings = await self._first_records(
            system=system, objective=objective, constraints=constraints
        )
        slot = await self._slots.claim(session_id)
        if slot is None:
            raise SessionExists(f"session {session_id!r} is live in this runtime")
        try:
            return await self._create(slot, records, settings)
        except BaseException:
            await self._unclaim(slot)
            raise

    async def _first_records(
        self,
        *,
        system: str | None = None,
        objective: str | None = None,
        constraints: Sequence[str] = (),
    ) -> tuple[list[Record], Settings]:
        """The records a new session's log starts with, and the settings it runs with."""
        if self._gateway_error is not None:
            raise self._gateway_error
        settings = self.settings.with_(**self.overrides) if self.overrides else self.settings
        if system is not None:
            settings = settings.with_(system=system)
        # checked before the log exists: a bad constraint must not leave a half-made session
        protected, protected_ops = prepare_all(
            ProtectedState(), user_ops(objective=objective, add_constraints=constraints), "user"
        )
        found = await self._windows.find(settings)
        settings = found.applied(settings)
        records = first_records(
            settings, self._tools_for(settings), found.source, protected, protected_ops
        )
        return records, settings

    async def _create(
        self, slot: SessionSlot, records: list[Record], settings: Settings
    ) -> Session:
        """Write the new log of the id ``slot`` claimed, take its lease and start it."""
        self._check_tools(settings)
        await self.store.create(slot.id, records)
        # the create took the lease; acquiring hands it to this runtime to hold and renew
        slot.lease = await self._leases.acquire(slot.id)
        state = replay(slot.id, records)
        _log.info("session_created", session=slot.id, model=settings.model)
        return self._start(slot, state, settings)

    async def resume(self, session_id: str) -> Session:
        """Rebuild a session from its log (newest compaction + tail) and start it; the live
        session when it is already running.

        The session's writer lease is taken first (cutting a torn last line, reported as a
        ``LogRepaired`` event), then the log is read. An open round gets "interrupted" outputs
        for its calls. Raises ``InvalidSessionId``, ``SessionNotFound``, ``CorruptLogError``,
        ``SessionBusy`` naming the holder when another writer holds it (nothing is started),
        ``DescriptorLimitReached`` (as ``create``).
        """
        return await self._opened(validate_session_id(session_id), create=False)

    async def open(self, session_id: str) -> Session:
        """The live session with this id, woken or resumed from its log, or a new one.

        Raises ``InvalidSessionId``, ``CorruptLogError``, ``SessionBusy`` (as ``resume``).
        """
        return await self._opened(validate_session_id(session_id), create=True)

    async def send(self, session_id: str, text: str, *, pin: bool = False) -> TurnResult:
        """Run one turn of session ``session_id`` (opened, woken or created as ``open`` does).

        Raises as ``open`` and ``Session.send`` do.
        """
        for _ in range(3):
            session = await self.open(session_id)
            try:
                return await session.send(text, pin=pin)
            except SessionClosed:
                # hibernated between open and send: wake it again; a real close is re-raised
                if not session.hibernated:
                    raise
        raise SessionClosed(f"session {session_id} keeps hibernating before it can take input")

    async def fork(
        self, session_id: str, *, at_round: int | None = None, new_id: str | None = None
    ) -> Session:
        """Start a new session whose history is session ``session_id``'s at the end of round
        ``at_round`` (its newest committed round when None), and return it live. The parent is
        only read; the child's log records where it came from instead of copying it. ``new_id``
        defaults to ``<parent>-fork-<n>``, the first that is free.

        Raises ``InvalidSessionId``, ``SessionNotFound`` for a missing parent, ``ConfigError``
        for a round the parent has not committed, ``SessionExists`` for a ``new_id`` in use, and
        what ``resume`` raises for the child.
        """
        self._check_running()
        record_id = await self.store.fork(session_id, new_id, at_round=at_round)
        return await self._opened(record_id, create=False)

    async def rewind(self, session_id: str, *, to_round: int) -> RewindRecord:
        """Make session ``session_id`` continue from the end of round ``to_round``: a rewind
        record is appended, and what came after that round stays in the log as a discarded
        branch. A live session is closed first (its work finished); the next ``open`` or
        ``send`` rebuilds it from the round.

        Raises ``InvalidSessionId``, ``SessionNotFound``, ``ConfigError`` for a round it has
        not committed or already ends at, ``SessionBusy`` when another writer holds it.
        """
        self._check_running()
        session_id = validate_session_id(session_id)
        while (slot := await self._slots.claim(session_id)) is None:
            await self.close(session_id)
        try:
            slot.lease = await self._leases.acquire(session_id)
            record = await self.store.rewind(session_id, to_round)
        finally:
            await self._unclaim(slot)
        _log.info("session_rewound", session=session_id, to_round=to_round, to_seq=record.to_seq)
        return record

    async def close(self, session_id: str) -> None:
        """Finish the work sent to a live session and stop it (its log stays); a session
        that is not live is left alone. Raises ``InvalidSessionId``."""
        slot = self._slots.get(validate_session_id(session_id))
        if slot is not None and slot.live and slot.session is not None:
            await slot.session.close()

    async def hibernate(self, session_id: str) -> bool:
        """Stop a live session's actors and drop it from memory now; the next ``open`` or
        ``send`` rebuilds it from the log. False when it was not live.

        Work already sent to it is finished first. Raises ``InvalidSessionId``.
        """
        slot = self._slots.get(validate_session_id(session_id))
        if slot is None or not slot.live:
            return False
        await self._hibernate(slot)
        return True

    async def _hibernate(self, slot: SessionSlot) -> None:
        """Hibernate live ``slot``: closing now, hibernated once its actors stopped (see
        ``_supervise``), which this waits for."""
        session = slot.session
        assert session is not None
        slot.move(SlotState.CLOSING)
        slot.hibernating = True
        slot.idle = anyio.current_time() - session.last_active
        session.mark_hibernated()
        await session.close()

    async def _reap(self, scope: anyio.CancelScope, idle_timeout: float) -> None:
        """Hibernate sessions idle for ``idle_timeout``; checks a few times per timeout."""
        interval = min(max(idle_timeout / 4, 0.005), 5.0)
        with scope:
            while True:
                await anyio.sleep(interval)
                idle = self._slots.idle(anyio.current_time(), idle_timeout)
                for slot in idle:
                    if slot.live:  # not closed or hibernated while the ones before were
                        await self._hibernate(slot)

    async def _unclaim(self, slot: SessionSlot) -> None:
        """An open or create that started nothing: its lease, if taken, is given back."""
        if slot.state is not SlotState.CREATING:
            return
        await self._give_back(slot)
        if slot.from_hibernation:
            slot.move(SlotState.HIBERNATED)
        else:
            self._slots.forget(slot, SlotState.CLOSED)

    async def _give_back(self, slot: SessionSlot) -> None:
        """Release the slot's lease, if it holds one (never raises)."""
        lease, slot.lease = slot.lease, None
        await self._leases.release(slot.id, lease)

    async def _opened(self, session_id: str, *, create: bool) -> Session:
        self._check_running()
        while True:
            live = self._slots.get(session_id)
            if live is not None and live.live and live.session is not None:
                return live.session
            slot = await self._slots.claim(session_id)
            if slot is not None:
                break
        try:
            if create and not slot.from_hibernation and not await self.store.exists(session_id):
                # another process may create it first: then it is resumed (or busy) below
                with suppress(SessionExists):
                    records, settings = await self._first_records()
                    return await self._create(slot, records, settings)
            return await self._resume(slot)
        except BaseException:
            await self._unclaim(slot)
            raise

    async def _resume(self, slot: SessionSlot) -> Session:
        session_id = slot.id
        # the lease first: only its holder may cut a torn tail, and nobody writes while we read
        lease = slot.lease = await self._leases.acquire(session_id)
        try:
            if lease.repaired is not None:
                torn = lease.repaired
                self.events.publish(
                    LogRepaired(
                        session_id=session_id,
                        path=torn.path,
                        line=torn.line,
                        bytes_removed=torn.bytes_removed,
                    )
                )
            if self._gateway_error is not None:
                raise self._gateway_error
            read = await self.store.read_tail(session_id, repair=False)
            state = replay(session_id, read.records)
            settings = await self._continued_settings(session_id, read.records, state)
            self._check_tools(settings)
        except BaseException:
            await self._give_back(slot)
            raise
        _log.info(
            "session_resumed",
            session=session_id,
            records=len(read.records),
            items=len(state.history),
        )
        if slot.from_hibernation:
            slot.from_hibernation = False
            self.events.publish(SessionRehydrated(session_id=session_id, records=len(read.records)))
        return self._start(slot, state, settings)

    async def _continued_settings(
        self, session_id: str, tail: Sequence[Record], state: SessionState
    ) -> Settings:
        """What a continued session runs with: its identity, ``overrides`` applied."""
        whole = bool(tail) and tail[-1].seq == len(tail)
        # settings changes before the newest compaction are not in the tail: read them all
        identity = (
            identity_from_records(tail) if whole else await session_identity(self.store, session_id)
        )
        settings, changes = continue_settings(self.settings, identity, self.overrides)
        moved: dict[str, list[Any]] = {}
        if self._own_gateway:
            settings, moved = endpoint_for(session_id, settings, self.settings)
        window: Change = ({}, "")
        if settings.context_window is None:
            found = await self._windows.find(settings)
            if found.context_window is not None:
                settings = settings.with_(context_window=found.context_window)
                window = ({"context_window": [None, found.context_window]}, found.source)
        check_fits(settings, self._tools_for(settings).specs(), state.history, state.protected)
        written = settings_records(state.last_seq, [(changes, "user"), (moved, "runtime"), window])
        if written:
            await self.store.append(session_id, written)
            for record in written:
                state.apply(record)
                _log.info("settings_changed", session=session_id, source=record.source)
                self.events.publish(
                    SettingsChanged(
                        session_id=session_id, changes=record.changes, source=record.source
                    )
                )
        return settings

    def _check_tools(self, settings: Settings) -> None:
        """Raises ``ConfigError`` when ``settings``' model takes fewer tools a request than the
        session would send."""
        check_tool_count(settings, len(with_milestone(self._tools_for(settings), settings)))

    def _tools_for(self, settings: Settings) -> ToolRegistry:
        """The runtime's tools, or the tool set ``settings`` name when the runtime built its own."""
        if self._tools_given or tool_fields(settings) == tool_fields(self.settings):
            return self.tools
        if settings.tools == "workspace":
            return workspace_tools(settings.workspace, settings=settings)
        return ToolRegistry()

    def settings_of(self, session_id: str) -> Settings:
        """The settings live session ``session_id`` runs with. Raises ``KeyError`` when it is
        not live."""
        slot = self._slots.get(session_id)
        if slot is None or slot.settings is None:
            raise KeyError(session_id)
        return slot.settings

    def _check_running(self) -> None:
        if self._tg is None or self._persistence is None:
            raise StowageError("the runtime is not running: use 'async with Runtime(...) as rt'")

    def _start(self, slot: SessionSlot, state: SessionState, settings: Settings) -> Session:
        """Start the session of ``slot`` (creating, its lease held): live from now on."""
        self._check_running()
        send: MailboxSend[SamplerCommand]
        receive: MailboxReceive[SamplerCommand]
        send, receive = open_mailbox(self._capacity)
        run = SessionRun(receive, Doorbell(), partial(self._start_supervisor, slot))
        session = Session(
            state.session_id,
            state,
            send,
            subscribe=self.events.subscribe,
            on_input=run.wake,
            fork=partial(self.fork, state.session_id),
        )
        slot.move(SlotState.LIVE)
        slot.session = session
        slot.settings = settings
        slot.from_hibernation = False
        slot.wake = run.wake
        run.wake()  # its first supervisor recovers the log's open round, then parks
        return session

    # -- leases --------------------------------------------------------------------------

    async def _renew(self, scope: anyio.CancelScope) -> None:
        with scope:
            await self._leases.run()

    def _lease_lost(self, session_id: str, reason: str) -> None:
        """Stop a session whose lease is gone, at once: it must not write another record."""
        slot = self._slots.get(session_id)
        if slot is None or slot.wake is None or slot.lost is not None:
            return
        slot.lost = SessionLeaseLost(session_id, reason)
        slot.wake()  # a parked session has no task to stop: this starts one
        assert slot.stop is not None
        slot.stop.cancel()

    def _start_supervisor(self, slot: SessionSlot, run: SessionRun) -> None:
        """Start a supervisor task for ``slot``'s session (started, or parked till now)."""
        assert self._tg is not None
        slot.stop = anyio.CancelScope()  # one run's: cancelled to stop it at once
        self._tg.start_soon(self._supervise, slot, run)

    async def _stopped_by(
        self, slot: SessionSlot, failure: Exception | None
    ) -> BaseException | None:
        """What the session stopped on."""
        lost, slot.lost = slot.lost, None
        if lost is not None:
            return lost
        fenced = fencing_error(failure) if failure is not None else None
        if fenced is not None and await self._leases.confirm_lost(slot.lease):
            _log.error("lease_lost", session=slot.id, found_by="append")
            lost = SessionLeaseLost(slot.id, f"an append was fenced: {fenced}")
            lost.__cause__ = fenced
            return lost
        return failure

    def _session_tools(self, session: Session, settings: Settings) -> ToolRegistry:
        """The runtime's tools plus ``recall_artifact`` over this session, when it may stub."""
        return with_recall(
            with_milestone(self._tools_for(settings), settings),
            settings,
            has_stubs=bool(session.state.stubbed),
            history=lambda: session.state.history,
            read_log=partial(read_records, self.store, session.id),
        )

    def _context(self, session: Session, settings: Settings) -> SessionContext:
        """What the actors of ``session`` run with."""
        assert self._persistence is not None
        return SessionContext(
            session_id=session.id,
            settings=settings,
            gateway=self.gateway,
            tools=self._session_tools(session, settings),
            publish=self.events.publish,
            persistence=self._persistence.clone(),
            # every round and summary takes a place: a round before its request is built
            model_limiter=self._limiters["model"],
            compaction_limiter=self._limiters["compaction"],
            tool_limiter=self._limiters["tools"],
            before_compaction=self._hooks.before,
            read_log=partial(read_records, self.store, session.id),
            window_learned=partial(self._windows.learn, settings),
        )

    async def _supervise(self, slot: SessionSlot, run: SessionRun) -> None:
        """Serve the session's commands until it parks (the task ends; the next command starts
        another, see ``SessionRun``) or stops (its lease given back, its askers answered)."""
        session, stop = slot.session, slot.stop
        assert session is not None and stop is not None
        raised: Exception | None = None
        parked = False
        try:
            with stop:  # cancelled: stop now (lease lost, or interrupted)
                if run.actors is None:
                    context = self._context(session, slot.settings or self.settings)
                    run.actors = await start_actors(context, session.state, run.doorbell)
                parked = not await serve_commands(
                    run.actors, slot, run.commands, run.doorbell, self._limiters["running"]
                )
            parked = parked and not stop.cancel_called
        except Exception as exc:
            raised = exc
        finally:
            if not parked:
                await self._stop_session(slot, session, run, raised)
        if parked:
            # no await since the mailbox was found empty: a command sent from now on wakes
            # the session again (with a stop scope of its own: one serves one run only)
            slot.stop = None
            run.serving = False

    async def _stop_session(
        self, slot: SessionSlot, session: Session, run: SessionRun, raised: Exception | None
    ) -> None:
        """The session's actors ended (input closed, failure, lease lost, stopped at once)."""
        failure: BaseException | None = None
        try:
            if slot.state is not SlotState.CLOSING:  # not already hibernating
                slot.move(SlotState.CLOSING)
            # idempotent; after a failure some were never closed by their owner
            session.close_input()
            run.commands.close()
            if run.actors is not None:  # its actors' share of the store's inbox
                run.actors.ctx.persistence.close()
                run.actors = None
            with anyio.CancelScope(shield=True):
                # the actors are done: nothing of this session can be written any more
                failure = await self._stopped_by(slot, raised)
                await self._give_back(slot)
            if isinstance(failure, SessionLeaseLost):
                _log.error("session_lease_lost", session=session.id, reason=failure.reason)
                self.events.publish(
                    SessionLeaseLostEvent(session_id=session.id, error=failure.reason)
                )
            elif failure is not None:
                _log.error("session_failed", session=session.id, error=repr(failure))
                self.events.publish(SessionFailedEvent(session_id=session.id, error=repr(failure)))
            if failure is not None:
                self._slots.forget(slot, SlotState.FAILED)
            elif slot.hibernating:
                idle = slot.idle
                slot.move(SlotState.HIBERNATED)
                _log.debug("session_hibernated", session=session.id)
                self.events.publish(SessionHibernated(session_id=session.id, idle=idle))
            else:
                self._slots.forget(slot, SlotState.CLOSED)
        finally:
            # its askers never wait forever, whatever happened above
            session.mark_stopped(failure)
