"""What the stores' writer leases share: the lease object, who this process is, and the rule an SQL
store applies to a session's lease row before it lets a write through."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio
from stowage.core import ConfigError, FencingError, LeaseHolder, SessionBusy, TornTail

__all__ = [
    "Lease",
    "LeaseHook",
    "Taken",
    "LeaseRow",
    "busy",
    "check_lease_row",
    "lease_is_free",
    "lease_times",
    "new_owner",
    "now_holder",
    "pid_alive",
]


def new_owner() -> str:
    """A name for one store object: ``host:pid:random``, unique across processes and machines."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (a zombie counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, and belongs to someone else
        return True
    return True


class Lease:
    """One grant of a session's writer lease; see ``stowage.core.WriterLease``."""

    def __init__(
        self,
        *,
        session_id: str,
        token: int,
        holder: LeaseHolder,
        repaired: TornTail | None,
        renew_every: float | None,
        renew: Callable[[Lease], Awaitable[None]],
        release: Callable[[Lease], Awaitable[None]],
    ) -> None:
        self.session_id = session_id
        self.token = token
        self.holder = holder
        self.repaired = repaired
        self.renew_every = renew_every
        self.handed_out = False
        self.lost = False
        self.released = False
        self._renew = renew
        self._release = release

    def __repr__(self) -> str:
        state = "released" if self.released else "lost" if self.lost else "held"
        return f"Lease({self.session_id!r}, token={self.token}, {state})"

    async def renew(self) -> None:
        """Extend the lease; raises ``FencingError`` if it was released or lost."""
        if self.released:
            raise FencingError(f"session {self.session_id!r}: lease {self.token} was released")
        if self.lost:
            raise FencingError(
                f"session {self.session_id!r}: lease {self.token} was lost to another writer"
            )
        await self._renew(self)

    async def release(self) -> None:
        """Give the lease up; calling it again does nothing."""
        if self.released:
            return
        with anyio.CancelScope(shield=True):
            await self._release(self)
        self.released = True

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRow:
    """A session's lease as an SQL store keeps it: the last token granted and its holder."""

    token: int
    owner: str | None  # None: released (or never granted)
    expired: bool
    holder: LeaseHolder | None


def lease_is_free(row: LeaseRow, *, dead_pid_frees: bool) -> bool:
    """Whether a new writer may take the lease: released, expired, or its local holder dead."""
    if row.owner is None or row.expired:
        return True
    holder = row.holder
    return (
        dead_pid_frees
        and holder is not None
        and holder.host == socket.gethostname()
        and not pid_alive(holder.pid)
    )


def check_lease_row(
    session_id: str, lease: Lease, row: LeaseRow, *, owner: str, where: str = ""
) -> None:
    """Raises ``FencingError`` (and marks ``lease`` lost) unless ``row`` is still ``lease``."""
    if row.token == lease.token and row.owner == owner:
        return
    lease.lost = True
    by = ""
    if row.holder is not None and row.owner is not None:
        by = f" by pid {row.holder.pid} on host {row.holder.host}"
    place = f" in {where}" if where else ""
    raise FencingError(
        f"session {session_id!r}{place}: lease {lease.token} is stale; the session was taken "
        f"over{by} (lease {row.token})"
    )


def busy(session_id: str, row: LeaseRow, *, where: str = "") -> SessionBusy:
    """The error for a write or acquire refused because ``row`` is held by another writer."""
    return SessionBusy(session_id, row.holder, where=where)


def now_holder(owner: str, since: datetime | None = None) -> LeaseHolder:
    """This process as a lease holder, from ``since`` (now, in UTC, by default)."""
    return LeaseHolder(
        owner=owner,
        pid=os.getpid(),
        host=socket.gethostname(),
        since=since if since is not None else datetime.now(UTC),
    )


def lease_times(ttl: float, renew_every: float | None) -> tuple[float, float]:
    """Check a lease TTL and renew interval (default: a third of the TTL)."""
    if not ttl > 0:
        raise ConfigError(f"lease_ttl must be a positive number of seconds, got {ttl!r}")
    every = ttl / 3 if renew_every is None else renew_every
    if not 0 < every < ttl:
        raise ConfigError(
            f"lease_renew_every must be positive and below lease_ttl ({ttl}), got {every!r}"
        )
    return float(ttl), float(every)


#: a grant as a transaction made it: (session_id, token, holder), registered once committed
Taken = tuple[str, int, LeaseHolder]
LeaseHook = Callable[[Lease], Awaitable[None]]
