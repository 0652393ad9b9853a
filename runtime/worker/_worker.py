"""A worker: one ``Runtime`` serving whichever sessions of a shared PostgreSQL store have input.

Any number of workers, on any number of machines, share one store. Each claims sessions with
messages queued and no live lease (``FOR UPDATE SKIP LOCKED``: two workers never claim one
session), serves them through its runtime with the runtime's shared limits, and hibernates
them when they run out of input, which gives their leases back. It sleeps on LISTEN/NOTIFY and
claims again when a message is queued or a place frees up; a slow poll is only the fallback
for a lost notification.

The runtime gets the worker's store object, so the lease a claim took is the one the runtime
then holds, renews and releases, and the one every append of the session is fenced with: a
worker whose lease passed to another (it stalled past the TTL) cannot write another record.
A killed worker's sessions are claimed by others once its leases expire (a takeover, logged
with the holder it replaced), resumed from the log (an open round gets "interrupted"
outputs) and their turns finished.

Once the store is open a worker writes its own row in the store's workers table and rewrites
it every lease-renew interval with its rounds so far (one statement, whatever the rounds), so
``stowage workers`` lists it while it holds nothing, with its rounds/s; it deletes the row when
it stops.

``drain()`` (SIGTERM in ``stowage worker``): stop claiming, let turns in flight finish for up
to ``grace`` seconds, then interrupt what is left (nothing half-done is written); every lease
is given back and ``run`` returns.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus
from stowage.core import (
    LeaseHolder,
    ModelGateway,
    RuntimeLimits,
    SessionBusy,
    SessionLeaseLost,
    Settings,
    StoreError,
    StowageError,
)
from stowage.facade import Runtime
from stowage.storage import PostgresStore
from stowage.tools import ToolRegistry

from ._metrics import WorkerMetrics, render_metrics, serve_metrics
from ._options import WORKER_LIMITS, WorkerOptions
from ._serve import Served, serve_session

__all__ = ["Worker"]

_log = structlog.get_logger("stowage.worker")

# after a session failed here, this long before its lease is given back (and it may be claimed
# again): a session that cannot be served must not be claimed in a tight loop
_FAILURE_BACKOFF = 1.0


class Worker:
    """Serves the sessions of ``store`` that have messages queued, until ``drain()``; it runs
    once (``run`` closes the store).

    ``settings``, ``gateway``, ``tools`` and ``limits`` (``WORKER_LIMITS`` unless given; a
    limit given by name, ``max_model_calls=20``, replaces its value) are the runtime's (see
    ``Runtime``); ``settings.system`` is the system message of sessions a worker creates
    (``send --create``). Raises ``ConfigError`` for a limit out of range, ``TypeError`` for
    a name that is not a limit.
    """

    def __init__(
        self,
        store: PostgresStore,
        settings: Settings,
        *,
        options: WorkerOptions | None = None,
        limits: RuntimeLimits | None = None,
        gateway: ModelGateway | None = None,
        tools: ToolRegistry | None = None,
        **limit_values: Any,
    ) -> None:
        self.store = store
        self.options = options or WorkerOptions()
        #: the runtime's limits; ``idle_timeout`` is how long a served session lingers idle
        self.limits = (limits or WORKER_LIMITS).with_(**limit_values)
        self._runtime = Runtime(
            settings,
            store=store,
            gateway=gateway,
            tools=tools,
            # the worker hibernates its idle sessions itself (see ``serve_session``)
            limits=self.limits.with_(idle_timeout=None),
        )
        self._serving: dict[str, Served] = {}
        self._serving_group: TaskGroup | None = None
        self._interrupt: anyio.CancelScope | None = None
        self._connecting: anyio.CancelScope | None = None
        self._draining = False
        self._drain = anyio.Event()
        self._claim = anyio.Event()
        self._log = _log
        # the workers-table row: beats and the final delete, one at a time
        self._row = anyio.Lock()
        self._left = False
        #: counters for people and benchmarks
        self.claimed = 0
        self.taken_over = 0
        self.answered = 0
        self.metrics = WorkerMetrics()
        self._runtime.subscribe(self.metrics.observe)
        #: the port the metrics page is served on, once it is (``options.metrics_port``)
        self.metrics_port: int | None = None

    @property
    def runtime(self) -> Runtime:
        """The runtime the sessions run in (its events, limits, live sessions)."""
        return self._runtime

    @property
    def serving(self) -> frozenset[str]:
        """Ids of the sessions being served now."""
        return frozenset(self._serving)

    def drain(self) -> None:
        """Stop claiming; finish the turns in flight (for up to ``options.grace`` seconds),
        give every lease back, and let ``run`` return. Idempotent; never waits."""
        if self._draining:
            return
        self._draining = True
        self._drain.set()
        self._claim.set()
        if self._connecting is not None:  # nothing is held yet: stop waiting for the database
            self._connecting.cancel()
        for served in self._serving.values():
            served.wake()

    def interrupt(self) -> None:
        """Stop now, without waiting for the grace period: turns in flight are abandoned
        (nothing half-done is written; their messages stay queued for the next worker) and
        every lease is given back. Does nothing before ``run`` started; never waits."""
        self.drain()
        if self._interrupt is not None:
            self._interrupt.cancel()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``drain()`` has finished (or ``interrupt()``); the store is closed when
        it returns. ``task_status`` is started once the runtime runs (for ``TaskGroup.start``);
        ``worker_ready`` is logged once the store is open and claims begin.

        Raises nothing for the store: a database that cannot be reached is logged
        (``connect_failed``, ``claim_failed``, ``listen_failed``) and tried again every
        ``poll_interval``. Raises ``ConfigError`` when ``options.metrics_port`` is taken.
        """
        self._log = _log.bind(pid=os.getpid())
        interrupt = self._interrupt = anyio.CancelScope()
        with interrupt:
            async with self._runtime, anyio.create_task_group() as tg:
                tg.start_soon(self._listen)
                tg.start_soon(self._interrupt_after_grace, interrupt)
                if self.options.metrics_port is not None:
                    self.metrics_port = await tg.start(
                        serve_metrics, self.options.metrics_port, self._metrics_page
                    )
                    self._log.info("metrics_serving", port=self.metrics_port)
                self._log.info("worker_started", concurrency=self.options.concurrency)
                task_status.started()
                if await self._connect():
                    tg.start_soon(self._beat)
                    try:
                        await self._claim_and_serve()
                    finally:
                        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                            await self._leave()
                tg.cancel_scope.cancel()
        if interrupt.cancelled_caught:
            self._log.warning("worker_interrupted", grace=self.options.grace)
        self._log.info("worker_stopped", claimed=self.claimed, answered=self.answered)

    # -- claiming ---------------------------------------------------------------------------

    async def _connect(self) -> bool:
        """Open the store before the first claim, retrying; False when ``drain()`` came first."""
        self._connecting = connecting = anyio.CancelScope()
        try:
            with connecting:
                while not self._draining:
                    try:
                        await self.store.connect()
                    except StoreError as exc:
                        self._log.warning("connect_failed", error=str(exc))
                        await anyio.sleep(self.options.poll_interval)
                        continue
                    self._log.info("worker_ready")
                    return True
            return False
        finally:
            self._connecting = None

    async def _claim_and_serve(self) -> None:
        async with anyio.create_task_group() as serving:
            self._serving_group = serving
            while not self._draining:
                self._claim = anyio.Event()  # armed before the claim: no wake-up is missed
                free = self.options.concurrency - self._busy()
                claimed = await self._claim_some(free) if free > 0 else 0
                self._evict_idle()
                if claimed and claimed == free:
                    continue  # there may be more waiting
                with anyio.move_on_after(self.options.poll_interval):
                    await self._claim.wait()
            self._log.info("worker_draining", serving=len(self._serving))

    async def _claim_some(self, limit: int) -> int:
        began = anyio.current_time()
        try:
            claimed = await self.store.claim_waiting(limit=limit)
        except StoreError as exc:
            self._log.warning("claim_failed", error=str(exc))
            return 0
        seconds = anyio.current_time() - began
        self.metrics.claimed(seconds, len(claimed))
        for session_id, previous in claimed:
            self._claimed(session_id, previous, claim_ms=round(seconds * 1000, 3))
        return len(claimed)

    def _claimed(self, session_id: str, previous: LeaseHolder | None, *, claim_ms: float) -> None:
        self.claimed += 1
        if previous is None:
            self._log.info("session_claimed", session=session_id, claim_ms=claim_ms)
        else:
            self.taken_over += 1
            self._log.warning(
                "session_taken_over",
                session=session_id,
                claim_ms=claim_ms,
                previous_pid=previous.pid,
                previous_host=previous.host,
                previous_since=previous.since.isoformat(),
            )
        earlier = self._serving.get(session_id)
        served = Served(session_id, after=earlier.done if earlier is not None else None)
        self._serving[session_id] = served
        self._tasks.start_soon(self._serve, served)

    def _busy(self) -> int:
        return sum(1 for served in self._serving.values() if served.idle_since is None)

    def _evict_idle(self) -> None:
        """Over ``concurrency`` with idle sessions among them: the longest idle give way."""
        excess = len(self._serving) - self.options.concurrency
        if excess <= 0:
            return
        idle = sorted(
            (s for s in self._serving.values() if s.idle_since is not None and not s.evicted),
            key=lambda s: s.idle_since or 0.0,
        )
        for served in idle[:excess]:
            served.evict()

    # -- serving ----------------------------------------------------------------------------

    @property
    def _tasks(self) -> TaskGroup:
        assert self._serving_group is not None
        return self._serving_group

    async def _serve(self, served: Served) -> None:
        session_id = served.session_id
        log = self._log.bind(session=session_id)
        failed = False
        try:
            if served.after is not None:
                await served.after.wait()
            await serve_session(
                self._runtime,
                self.store,
                served,
                self.options,
                self.limits.idle_timeout,
                lambda: self._draining,
            )
        except SessionLeaseLost as exc:
            log.error("lease_lost", reason=exc.reason)
        except SessionBusy as exc:
            log.warning("session_busy", error=str(exc))
        except StowageError as exc:
            failed = True
            log.error("session_serve_failed", error=repr(exc))
        try:
            if failed and not self._draining:
                await anyio.sleep(_FAILURE_BACKOFF)
            await self._runtime.hibernate(session_id)  # gives its lease back
            if self._serving.get(session_id) is served:  # not claimed again meanwhile
                await self.store.release(session_id)  # a lease the runtime never took
            log.info("session_released", answered=served.answered)
        except StowageError as exc:
            log.warning("session_release_failed", error=repr(exc))
        finally:
            self.answered += served.answered
            if self._serving.get(session_id) is served:
                del self._serving[session_id]
            served.done.set()
            self._claim.set()  # a place is free, and input may have come since the last look

    # -- metrics ----------------------------------------------------------------------------

    async def _metrics_page(self) -> str:
        try:
            depth: tuple[int, int] | None = await self.store.queue_depth()
        except StoreError as exc:
            self._log.warning("queue_depth_failed", error=str(exc))
            depth = None
        answered = self.answered + sum(s.answered for s in self._serving.values())
        return render_metrics(
            self.metrics,
            answered=answered,
            serving=self._busy(),
            queue_depth=depth,
            descriptors=self._runtime.descriptors,
        )

    # -- the workers table ------------------------------------------------------------------

    async def _beat(self) -> None:
        """Keep this worker's row in the workers table, every lease-renew interval."""
        while not self._left:
            async with self._row:  # a beat in flight finishes before the row is deleted
                if self._left:
                    return
                try:
                    await self.store.beat(self.metrics.rounds)
                except StoreError as exc:
                    self._log.warning("beat_failed", error=str(exc))
            await anyio.sleep(self.store.renew_every)

    async def _leave(self) -> None:
        self._left = True  # no beat after this one writes the row again
        async with self._row:
            try:
                await self.store.leave()
            except StoreError as exc:  # the row expires by itself
                self._log.warning("leave_failed", error=str(exc))

    # -- wake-ups ---------------------------------------------------------------------------

    async def _listen(self) -> None:
        """Wake the claimer (or the session, when served here) on every queued message."""
        while True:
            try:
                async with self.store.notifications("inbox") as queued:
                    self._claim.set()  # anything queued while not listening
                    async for session_id in queued:
                        served = self._serving.get(session_id)
                        if served is not None:
                            served.wake()
                        else:
                            self._claim.set()
                self._log.warning("listen_lost")
            except StoreError as exc:
                self._log.warning("listen_failed", error=str(exc))
            await anyio.sleep(self.options.poll_interval)

    async def _interrupt_after_grace(self, interrupt: anyio.CancelScope) -> None:
        await self._drain.wait()
        await anyio.sleep(self.options.grace)
        self._log.warning("grace_expired", serving=len(self._serving))
        interrupt.cancel()
