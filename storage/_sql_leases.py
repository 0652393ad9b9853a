"""The leases an SQL store object holds, and the one set of rules both SQL stores apply to them.

SQLite and PostgreSQL keep a session's lease in a row (the last token granted, its holder, an
expiry) and differ only in the statements that read and write it. What a lease may do next is
decided here, once: a lease a write took is handed to the next ``acquire`` while its row still
carries it; a write goes through only under the row's current token, or on a free row (then the
store takes the lease with it); a grant supersedes whatever this store held before; a released
lease is forgotten before its row is freed. The stores supply the I/O: ``extend`` (renew one
lease, ``FencingError`` if its row moved on) and ``free`` (give rows back).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from stowage.core import FencingError, LeaseHolder, SessionBusy

from ._lease import Lease, LeaseHook, LeaseRow, Taken, busy, check_lease_row, lease_is_free

__all__ = ["HeldLeases"]


@dataclass(eq=False, kw_only=True)
class HeldLeases:
    """The writer leases one SQL store object (``owner``) holds, by session id."""

    owner: str
    renew_every: float
    where: str
    dead_pid_frees: bool
    extend: LeaseHook
    free: Callable[[Sequence[Lease]], Awaitable[None]]
    _held: dict[str, Lease] = field(default_factory=dict, init=False)

    def get(self, session_id: str) -> Lease | None:
        """The lease held for the session, lost or not."""
        return self._held.get(session_id)

    def live(self) -> list[Lease]:
        """Every lease held and not known to be lost."""
        return [lease for lease in self._held.values() if not lease.lost]

    def tokens(self, session_ids: Iterable[str]) -> dict[str, int]:
        """The token of each live lease among ``session_ids``."""
        return {
            session_id: lease.token
            for session_id in session_ids
            if (lease := self._held.get(session_id)) is not None and not lease.lost
        }

    def renewed(self, leases: Iterable[Lease], renewed: set[str]) -> list[str]:
        """Mark lost the leases not ``renewed``; the ids of every lost lease held, sorted."""
        for lease in leases:
            if lease.session_id not in renewed:
                lease.lost = True
        return sorted(lease.session_id for lease in self._held.values() if lease.lost)

    # -- judging a lease row ------------------------------------------------------------------

    def carries(self, row: LeaseRow, lease: Lease) -> bool:
        """Whether ``row`` still carries ``lease``: its token, this store as the owner."""
        return row.token == lease.token and row.owner == self.owner

    def reusable(self, session_id: str, row: LeaseRow) -> Lease | None:
        """The held lease ``acquire`` may hand out while ``row`` still carries it, else None."""
        held = self._held.get(session_id)
        if held is None or held.lost or not self.carries(row, held):
            return None
        if held.handed_out:
            raise SessionBusy(session_id, held.holder, where=self.where)
        return held

    def check_free(self, session_id: str, row: LeaseRow) -> None:
        """Raises ``SessionBusy`` naming the holder unless a new grant may take ``row``."""
        if not lease_is_free(row, dead_pid_frees=self.dead_pid_frees):
            raise busy(session_id, row, where=self.where)

    def holder_of(self, row: LeaseRow) -> LeaseHolder | None:
        """Who holds ``row``'s lease: None when it is free."""
        return None if lease_is_free(row, dead_pid_frees=self.dead_pid_frees) else row.holder

    def check(self, lease: Lease, row: LeaseRow) -> None:
        """Raises ``FencingError`` (and marks ``lease`` lost) unless ``row`` still carries it."""
        check_lease_row(lease.session_id, lease, row, owner=self.owner, where=self.where)

    def check_write(self, session_id: str, row: LeaseRow) -> bool:
        """Whether a write must take the lease first (none held and ``row`` free)."""
        lease = self._held.get(session_id)
        if lease is None:
            self.check_free(session_id, row)
            return True
        self.check(lease, row)
        return False

    def require(self, session_id: str) -> Lease:
        """The lease held for the session; raises ``FencingError`` when none is."""
        lease = self._held.get(session_id)
        if lease is None:
            raise FencingError(f"session {session_id!r}: this store holds no lease for it")
        return lease

    # -- transitions --------------------------------------------------------------------------

    def grant(self, taken: Taken) -> Lease:
        """Hold a committed grant; a lease held before for the session is lost to it."""
        session_id, token, holder = taken
        old = self._held.get(session_id)
        if old is not None:
            old.lost = True
        lease = Lease(
            session_id=session_id,
            token=token,
            holder=holder,
            repaired=None,
            renew_every=self.renew_every,
            renew=self._renew,
            release=self._release,
        )
        self._held[session_id] = lease
        return lease

    def hand_out(self, got: Lease | Taken) -> Lease:
        """What ``acquire`` returns: the reused lease, or the new grant, marked handed out."""
        lease = got if isinstance(got, Lease) else self.grant(got)
        lease.handed_out = True
        return lease

    def close(self) -> list[Lease]:
        """Forget every lease as released; the ones not lost, whose rows the store frees."""
        leases, self._held = list(self._held.values()), {}
        for lease in leases:
            lease.released = True
        return [lease for lease in leases if not lease.lost]

    async def _renew(self, lease: Lease) -> None:
        if self._held.get(lease.session_id) is not lease:
            raise FencingError(f"session {lease.session_id!r}: lease {lease.token} is not held")
        await self.extend(lease)

    async def _release(self, lease: Lease) -> None:
        if self._held.get(lease.session_id) is not lease:
            return
        del self._held[lease.session_id]
        if not lease.lost:
            await self.free([lease])
