"""The writer leases a runtime holds: one per live session, taken before its log is read.

A session is written only while its runtime holds the session's lease, so two processes can
never write one log. Leases that expire (SQLite, PostgreSQL) are renewed in the background in
one round trip for all of them; a lease found lost is reported to the runtime, which stops that
session alone.

The leases themselves live in the runtime's session records (``_slots.SessionSlot.lease``);
``Leases`` takes, renews, checks and gives them back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import anyio
import structlog
from stowage.core import FencingError, LogStore, StoreError, WriterLease

__all__ = ["Leases"]

_log = structlog.get_logger("stowage.leases")

# how long a release may take before the runtime gives up on it (an expiring lease then lapses)
_RELEASE_TIMEOUT = 10.0


class Leases:
    """The leases one runtime holds in ``store``. ``on_lost(session_id, reason)`` is called
    (synchronously, from the renewal task) for every held lease a renewal finds lost; it must not
    block."""

    def __init__(
        self,
        store: LogStore,
        on_lost: Callable[[str, str], None],
        held: Callable[[], Iterable[tuple[str, WriterLease]]],
    ) -> None:
        self._store = store
        self._on_lost = on_lost
        self._held = held
        self._wake = anyio.Event()

    async def acquire(self, session_id: str) -> WriterLease:
        """Take the session's lease."""
        lease = await self._store.acquire(session_id)
        if lease.renew_every is not None:
            self._wake.set()
        _log.debug("lease_acquired", session=session_id, token=lease.token)
        return lease

    async def release(self, session_id: str, lease: WriterLease | None) -> None:
        """Give the session's lease back (the caller no longer lists it in ``held()``); never
        raises: a failed release is logged, and an expiring lease lapses on its own."""
        if lease is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT):
            try:
                await lease.release()
            except StoreError as exc:
                _log.warning("lease_release_failed", session=session_id, error=str(exc))
                return
            _log.debug("lease_released", session=session_id, token=lease.token)

    async def confirm_lost(self, lease: WriterLease | None) -> bool:
        """Whether ``lease`` is really lost: a renewal is refused (``FencingError``)."""
        if lease is None:
            return False
        try:
            await lease.renew()
        except FencingError:
            return True
        except StoreError:
            return False
        return False

    async def run(self) -> None:
        """Renew every held lease that needs it, every ``renew_every`` seconds, until cancelled;
        a failed renewal is logged and tried again next time (the lease may still be ours)."""
        while True:
            every = self._interval()
            if every is None:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            await anyio.sleep(every)
            if self._interval() is None:
                continue
            try:
                lost = await self._store.renew_leases()
            except StoreError as exc:
                held = sum(1 for _ in self._held())
                _log.warning("lease_renew_failed", leases=held, error=str(exc))
                continue
            if not lost:
                continue
            held_ids = {session_id for session_id, _ in self._held()}
            for session_id in lost:
                if session_id in held_ids:
                    _log.error("lease_lost", session=session_id, found_by="renewal")
                    self._on_lost(session_id, "a renewal found it taken over by another writer")

    def _interval(self) -> float | None:
        intervals = [
            lease.renew_every for _, lease in self._held() if lease.renew_every is not None
        ]
        return min(intervals) if intervals else None
