"""``ZooHarness`` drives one ``Runtime`` through the public API only (sessions, turns, manual
compactions, approvals, interrupts, restarts) and checks the compaction promises after each
step from what the gateway received and what the store holds; a check that fails is a
``Violation``, never an exception, so a run reports every kind it found.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import replace
from pathlib import Path
from typing import cast

import anyio
from anyio.abc import TaskGroup, TaskStatus
from stowage.core import (
    CompactionLoop,
    CompactionRecord,
    CorruptLogError,
    Event,
    FunctionCall,
    FunctionCallOutput,
    HistoryCompacted,
    Microcompacted,
    MicrocompactRecord,
    RoundCommitted,
    SessionClosed,
    Settings,
    StowageError,
    ToolStarted,
    replay,
)
from stowage.facade import Runtime, Session, TurnResult
from stowage.policy import cache_key_for
from stowage.tools import ToolRegistry, tool, workspace_tools

from .checks import (
    FINE_STOPS,
    Violation,
    ZooFigures,
    breaks_prefix,
    irreducible_tokens,
    orphan_violations,
    turn_text,
)
from .members import CHARS_PER_TOKEN, GUARDED_TOOL, UsageMode, ZooBehaviour, request_tokens
from .model import ZooModel, ZooRequest

__all__ = ["ZooHarness", "zoo_settings", "zoo_tools"]


class ZooHarness:
    """One ``Runtime`` over a zoo gateway, its sessions, and the checks after every step.

    ``async with ZooHarness(gateway, settings) as h``; ``settings`` should name the window and
    output reserve the gateway enforces (``zoo_settings`` makes such settings). Each step
    method returns nothing: an outcome that breaks a promise is added to ``violations``.
    """

    def __init__(self, gateway: ZooModel, settings: Settings) -> None:
        self.gateway = gateway
        self.settings = settings
        self.violations: list[Violation] = []
        # turns that stopped since the last check: reported by the next one
        self._stops: list[Violation] = []
        #: sessions told usage at twice the gateway's own count at some point: stowage
        #: believes the provider, so its window holds half as much for them
        self._doubled: set[str] = set()
        self.figures = ZooFigures()
        self.runtime: Runtime | None = None
        self.sessions: dict[str, Session] = {}
        self._stack = contextlib.AsyncExitStack()
        self._tasks: TaskGroup | None = None
        # set to stop the runtime's host task, and by it once the runtime is closed
        self._stop: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        # per session: gateway request counts at each compaction event, and check progress
        self._marks: dict[str, list[int]] = {}
        self._checked: dict[str, int] = {}
        self._checked_seq: dict[str, int] = {}
        self._previous_round: dict[str, ZooRequest] = {}
        # a log that cannot be replayed stays so: say it once, not after every later step
        self._replay_reported: set[tuple[str, str]] = set()

    async def __aenter__(self) -> ZooHarness:
        self._tasks = await self._stack.enter_async_context(anyio.create_task_group())
        await self._start_runtime()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self._stop_runtime()
        finally:
            await self._stack.aclose()

    async def _start_runtime(self) -> Runtime:
        # the runtime lives in a task of its own, so that steps (and a restart) may come from
        # any task: a task group must be left in the task that entered it
        if self._tasks is None:
            raise SessionClosed("the zoo harness is not entered")
        self._stop = stop = anyio.Event()
        self._stopped = stopped = anyio.Event()
        await self._tasks.start(self._host, stop, stopped)
        return self._runtime()

    async def _host(
        self,
        stop: anyio.Event,
        stopped: anyio.Event,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            tools = zoo_tools(self.settings)
            async with Runtime(self.settings, gateway=self.gateway, tools=tools) as runtime:
                runtime.subscribe(self._on_event)
                self.runtime = runtime
                task_status.started()
                await stop.wait()
        finally:
            self.runtime = None
            stopped.set()

    async def _stop_runtime(self) -> None:
        if self._stop is not None and self._stopped is not None:
            self._stop.set()
            await self._stopped.wait()

    def _on_event(self, event: Event) -> None:
        if isinstance(event, HistoryCompacted | Microcompacted):
            self._marks.setdefault(event.session_id, []).append(self.gateway.count)

    def _runtime(self) -> Runtime:
        if self.runtime is None:
            raise SessionClosed("the zoo harness is not running")
        return self.runtime

    async def create(
        self,
        session_id: str,
        *,
        system: str | None = None,
        behaviour: ZooBehaviour | None = None,
    ) -> Session:
        """Start session ``session_id``, talking to ``behaviour`` (the gateway's own member
        when None). Raises what ``Runtime.create`` raises."""
        if behaviour is not None:
            self.gateway.assign(cache_key_for(self.settings, session_id), behaviour)
        session = await self._runtime().create(session_id, system=system)
        self.sessions[session_id] = session
        if self.behaviour_of(session_id).usage == "double":
            self._doubled.add(session_id)
        self.figures.sessions += 1
        return session

    async def send(self, session_id: str, text: str) -> TurnResult | None:
        """Run one turn (first deciding any pending approval: approve); None when it raised.
        Raises nothing of stowage's: a failed turn is checked, not raised."""
        await self.settle(session_id)
        session = self.sessions[session_id]
        try:
            result = await session.send(text)
        except StowageError as exc:
            self._ended(session_id, None, exc)
            return None
        self._ended(session_id, result, None)
        return result

    async def settle(self, session_id: str) -> None:
        """Approve every call that awaits approval, going on with its turn."""
        for _ in range(8):
            if not self.sessions[session_id].pending_approvals:
                return
            await self.decide(session_id, approve=True)

    async def decide(self, session_id: str, *, approve: bool) -> None:
        """Approve (or deny) the first call awaiting approval, if any; the turn goes on."""
        session = self.sessions[session_id]
        pending = session.pending_approvals
        if not pending:
            return
        call_id = pending[0].call_id
        try:
            if approve:
                result = await session.approve(call_id)
            else:
                result = await session.deny(call_id, reason="the zoo says no")
        except StowageError as exc:
            self._ended(session_id, None, exc, counted=False)
            return
        self._ended(session_id, result, None, counted=False)

    async def interrupt(self, session_id: str, text: str, *, after: int = 1) -> None:
        """Start a turn and stop it after ``after`` tool starts or committed rounds (the turn
        may answer first)."""
        await self.settle(session_id)
        session = self.sessions[session_id]
        seen = 0
        events = cast(AsyncGenerator[Event | TurnResult, None], session.stream(text))
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    if isinstance(event, TurnResult):
                        self._ended(session_id, event, None)
                        return
                    if isinstance(event, ToolStarted | RoundCommitted):
                        seen += 1
                        if seen >= after:
                            break
        except StowageError as exc:
            self._ended(session_id, None, exc)
            return
        self.figures.turns += 1

    async def compact(self, session_id: str) -> bool:
        """Compact by hand; False when nothing was compacted or it failed (a manual compaction
        may fail; no turn stops for it)."""
        try:
            return await self.sessions[session_id].compact()
        except StowageError:
            return False

    async def reopen(self, session_id: str) -> None:
        """Close one session and resume it from its log, in the same runtime."""
        runtime = self._runtime()
        await runtime.close(session_id)
        self.sessions[session_id] = await runtime.resume(session_id)

    async def restart(self) -> None:
        """Close the runtime and resume every session in a new one on the same store."""
        await self._stop_runtime()
        runtime = await self._start_runtime()
        for session_id in list(self.sessions):
            self.sessions[session_id] = await runtime.resume(session_id)

    def _ended(
        self,
        session_id: str,
        result: TurnResult | None,
        error: Exception | None,
        *,
        counted: bool = True,
    ) -> None:
        if counted:
            self.figures.turns += 1
        if result is not None and result.stopped in FINE_STOPS:
            return
        why = f"stopped={result.stopped}" if result is not None else f"{error!r}"
        irreducible, source = self._irreducible(session_id)
        if irreducible is not None and irreducible > self.gateway.limit:
            return  # the turn's own content cannot fit: stopping is the right answer
        churned = isinstance(error, CompactionLoop) or (
            result is not None and result.stopped == "round_limit"
        )
        if churned and (
            # doubled reports (tool schemas included) calibrate stowage down to its lowest
            # ratio, 1.5 chars a token against this gateway's 4: it believes the provider,
            # as its hard mark must (it uses the larger figure), so a turn that reads more
            # than a third of what this gateway would take stops, saying so with figures
            session_id in self._doubled
            # what the turn needs in view at once is above the compaction mark: every
            # compaction must take some of it (and it is read again), so no runtime could
            # finish it below the hard mark; the loop message gives the figures
            or self._needed_tokens(session_id) > self._content_limit(session_id)
        ):
            self.figures.loops += 1
            return
        self.figures.stopped += 1
        self._stops.append(
            Violation(
                kind="stopped",
                session_id=session_id,
                detail=(
                    f"turn stopped ({why}) while its irreducible content ({irreducible} tokens, "
                    f"from {source}) fits the {self.gateway.limit} a request may carry"
                ),
            )
        )

    def _irreducible(self, session_id: str) -> tuple[int | None, str]:
        rounds = [r for r in self.requests_of(session_id) if r.purpose == "round"]
        session = self.sessions[session_id]
        if rounds:
            last = rounds[-1].request
            from_request = irreducible_tokens(last)
            from_history = irreducible_tokens(replace(last, input=session.history))
            return min(from_request, from_history), "its last request and its history"
        return None, "no request"

    def _content_limit(self, session_id: str) -> float:
        """Tokens of history a session holds before it must compact: the window less the
        output reserve and the tool schemas (stowage's usable budget), at ``compact_mark``."""
        rounds = [r.request for r in self.requests_of(session_id) if r.purpose == "round"]
        tools = request_tokens(replace(rounds[-1], input=())) if rounds else 0
        return self.settings.compact_mark * (self.gateway.limit - tools)

    def _needed_tokens(self, session_id: str) -> int:
        """Tokens of history the turn in flight needs at once, as this gateway counts them:
        the irreducible rest of its last request (without the tool schemas) with every
        distinct call's largest output of the turn, as its requests carried them
        (compactions may have absorbed them since, and a stopped turn keeps no ledger)."""
        rounds = [r.request for r in self.requests_of(session_id) if r.purpose == "round"]
        if not rounds:
            return 0
        last = rounds[-1]
        base = irreducible_tokens(last) - request_tokens(replace(last, input=()))
        asked = turn_text(last)
        largest: dict[tuple[str, str], int] = {}
        for request in rounds:
            if turn_text(request) != asked:
                continue
            calls = {
                i.call_id: (i.name, i.arguments)
                for i in request.input
                if isinstance(i, FunctionCall)
            }
            for item in request.input:
                if isinstance(item, FunctionCallOutput) and item.call_id in calls:
                    key = calls[item.call_id]
                    largest[key] = max(largest.get(key, 0), len(item.output))
        return base + sum(largest.values()) // CHARS_PER_TOKEN

    def requests_of(self, session_id: str) -> list[ZooRequest]:
        """The requests the gateway received for session ``session_id``, in order."""
        return self.gateway.requests_for(cache_key_for(self.settings, session_id))

    def behaviour_of(self, session_id: str) -> ZooBehaviour:
        """The zoo member session ``session_id`` talks to."""
        return self.gateway.behaviour_for(cache_key_for(self.settings, session_id))

    def set_usage(self, session_id: str, usage: UsageMode) -> None:
        """From now on, report usage to session ``session_id`` as ``usage`` says."""
        key = cache_key_for(self.settings, session_id)
        if usage == "double":
            self._doubled.add(session_id)
        self.gateway.assign(key, replace(self.gateway.behaviour_for(key), usage=usage))

    async def check(self, session_id: str) -> list[Violation]:
        """Check what session ``session_id`` sent and logged since the last check (and the turns
        that stopped since); returns the new violations (also added to ``violations``). Raises
        ``StoreError`` when the log cannot be read."""
        found = [v for v in self._stops if v.session_id == session_id]
        self._stops = [v for v in self._stops if v.session_id != session_id]
        found.extend(self._check_requests(session_id))
        found.extend(await self._check_log(session_id))
        self.violations.extend(found)
        return found

    def _check_requests(self, session_id: str) -> list[Violation]:
        found: list[Violation] = []
        requests = self.requests_of(session_id)
        start = self._checked.get(session_id, 0)
        self._checked[session_id] = len(requests)
        marks = self._marks.get(session_id, [])
        for seen in requests[start:]:
            if seen.refused:
                irreducible = irreducible_tokens(seen.request)
                if irreducible <= seen.limit:
                    found.append(
                        Violation(
                            kind="refused",
                            session_id=session_id,
                            detail=(
                                f"{seen.purpose} request {seen.index} carried {seen.tokens} "
                                f"tokens, above the {seen.limit} allowed, though its "
                                f"irreducible content is {irreducible}"
                            ),
                        )
                    )
            found.extend(
                orphan_violations(session_id, f"{seen.purpose} request {seen.index}", seen.request)
            )
            if seen.purpose != "round" or seen.refused:
                continue
            previous = self._previous_round.get(session_id)
            self._previous_round[session_id] = seen
            if previous is None or not breaks_prefix(previous.request, seen.request):
                continue
            self.figures.prefix_breaks += 1
            if not any(previous.index < mark <= seen.index for mark in marks):
                found.append(
                    Violation(
                        kind="prefix_break",
                        session_id=session_id,
                        detail=(
                            f"round request {seen.index} does not start with request "
                            f"{previous.index}'s input and no compaction came in between"
                        ),
                    )
                )
        self.figures.rounds += sum(
            1 for r in requests[start:] if r.purpose == "round" and not r.refused
        )
        return found

    async def _check_log(self, session_id: str) -> list[Violation]:
        found: list[Violation] = []
        store = self._runtime().store
        session = self.sessions[session_id]
        # a plan may land between reading the live history and the log: read until they agree
        for _ in range(5):
            live = session.history
            records = (await store.read(session_id)).records
            tail = (await store.read_tail(session_id)).records
            if session.history == live:
                break
        done = self._checked_seq.get(session_id, 0)
        for record in records:
            if record.seq <= done:
                continue
            if isinstance(record, CompactionRecord):
                if record.kind == "full":
                    self.figures.full += 1
                else:
                    self.figures.fallback += 1
            elif isinstance(record, MicrocompactRecord):
                self.figures.micro += 1
            else:
                continue
            before, after = record.tokens_before, record.tokens_after
            if before is not None and after is not None and after >= before:
                found.append(
                    Violation(
                        kind="grew",
                        session_id=session_id,
                        detail=(
                            f"{type(record).__name__} at seq {record.seq} went from {before} "
                            f"to {after} tokens"
                        ),
                    )
                )
        self._checked_seq[session_id] = records[-1].seq if records else 0
        for name, part in (("log", records), ("tail", tail)):
            try:
                replayed = replay(session_id, part).items
            except CorruptLogError as exc:
                detail = f"replay of the {name} fails: {exc}"
                if (session_id, detail) not in self._replay_reported:
                    self._replay_reported.add((session_id, detail))
                    found.append(Violation(kind="replay", session_id=session_id, detail=detail))
                continue
            if replayed != live:
                found.append(
                    Violation(
                        kind="replay",
                        session_id=session_id,
                        detail=(
                            f"replay of the {name} gives {len(replayed)} items, the live "
                            f"session has {len(live)}"
                        ),
                    )
                )
        return found


def zoo_tools(settings: Settings) -> ToolRegistry:
    """The workspace tools over ``settings.workspace`` and the ``guarded`` tool, which needs
    approval. Raises ``ToolError`` when the workspace is not a directory."""

    @tool(name=GUARDED_TOOL, needs_approval=True)
    async def guarded(note: str = "") -> str:
        """Do something a person must allow first."""
        return f"guarded ran {note}".strip()

    registry = workspace_tools(settings.workspace, settings=settings)
    registry.add(guarded)
    return registry


def zoo_settings(
    store: Path, workspace: Path, *, window: int = 6000, max_output_tokens: int = 500
) -> Settings:
    """Settings for a zoo run: the window and output reserve a zoo gateway enforces, no
    fsync, default compaction policy; a manual compaction that would not shrink history is
    skipped, as ``stowage compact`` does. Raises ``ConfigError`` for a window that is too
    small."""
    return Settings(
        model="zoo",
        store=store,
        workspace=workspace,
        context_window=window,
        max_output_tokens=max_output_tokens,
        durability="none",
    )
