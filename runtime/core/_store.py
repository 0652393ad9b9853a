"""The log store boundary: one Protocol that JSONL, SQLite and PostgreSQL stores implement.

One writer per session, by construction. A session is written only under its *writer lease*, and
at most one store object (in any process, on any machine) holds a session's lease at a time:

- ``acquire(session_id)`` takes the lease and returns a ``WriterLease``: a fencing ``token`` that
  grows with every grant, the ``holder`` (owner, pid, host, since), ``renew()`` and ``release()``.
  A session whose lease another store holds raises ``SessionBusy`` naming that holder; that
  includes a second ``acquire`` through the same store while the first lease is out.
- Decision: **the store remembers the leases it holds**; ``append``/``append_batches`` take no
  token argument. Each append checks, in the same transaction as the write (JSONL: while the
  lease's lock is held), that this store still holds the session's current lease, and raises
  ``FencingError`` when the lease was lost (expired and taken over by another writer). So a
  stale writer cannot write even one record, and callers never thread tokens through.
- A store that holds no lease for a session takes one on its first ``create`` or append to it
  (an *implicit* lease, kept until ``release`` or ``aclose``): single-process callers keep
  working unchanged, and a second writer is still refused (``SessionBusy``). A later ``acquire``
  through the same store hands that lease out as a ``WriterLease``. A lost lease is never taken
  again implicitly: appends keep raising ``FencingError`` until the lease is released.
- Leases that can expire (SQLite, PostgreSQL: a TTL) must be renewed every ``renew_every``
  seconds: ``lease.renew()`` for one, ``store.renew_leases()`` for every lease the store holds
  (one round trip; it returns the ids whose lease was lost). JSONL leases are kernel locks:
  they never expire and die with the process (``renew_every`` is ``None``).
- Group commits isolate sessions: ``append_batches`` writes many sessions' batches with one
  durability point and answers *per session* (a mapping ``session_id -> None | exception``).
  A session's batches in one call stand or fall together; a session refused (seq gap, a record
  that cannot be encoded, a lost or busy lease, a missing or invalid id, a log deleted or
  replaced under it, an I/O error on its own file) gets its error and leaves no record, and
  every other session of the call is written and durable. Only a failure of the store itself
  (closed, connection lost, the database's disk full) raises, and then no session is written.
- Readers never take the lease: ``read(..., repair=False)``, ``read_tail(..., repair=False)``,
  ``exists`` and ``list_sessions`` change no byte and create no file or directory; a torn last
  line is reported (``TornTail.removed`` false), never cut. Only the writer that acquires a session
  cuts a torn tail (``WriterLease.repaired``). ``repair=True`` (the default until the runtime
  acquires before it resumes) takes the lease for the cut when it is free and gives it back
  after; when another writer holds it the read only reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from ._records import Record

__all__ = [
    "Durability", "IdentityReader", "LeaseHolder", "LogRead", "LogStore", "TornTail", "WriterLease",
]  # fmt: skip

#: when a store acknowledges a batch: synced (``fsync``; ``syncfs``: a group commit's files
#: with one sync of their filesystem), or once the OS has it (``none``)
Durability: TypeAlias = Literal["fsync", "syncfs", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseHolder:
    """Who holds a session's writer lease: enough for a person to find the process.

    ``owner`` names the store object (``host:pid:random``), so two stores in one process differ.
    """

    owner: str
    pid: int
    host: str
    since: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TornTail:
    """A last record that was cut mid-write: ``bytes_removed`` bytes on line ``line``.

    ``removed`` says whether those bytes were cut off; a reader without the writer lease reports
    them and leaves the file alone (``removed=False``).
    """

    path: str
    line: int
    bytes_removed: int
    removed: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class LogRead:
    """Records read from a log, in seq order, and any repair made while reading."""

    records: tuple[Record, ...]
    torn_tail: TornTail | None = None


@runtime_checkable
class WriterLease(Protocol):
    """The right to append to one session, held by one store until released or lost.

    ``token`` is the fencing token (it grows with every grant of the session's lease);
    ``repaired`` is the torn tail this grant cut off the log, if any; ``renew_every`` is how
    often, in seconds, ``renew`` must be called to keep the lease (``None``: never).
    Usable as ``async with await store.acquire(sid) as lease:`` (released on exit).
    """

    session_id: str
    token: int
    holder: LeaseHolder
    repaired: TornTail | None
    renew_every: float | None

    async def renew(self) -> None:
        """Extend the lease; raises ``FencingError`` if it was released or lost."""
        ...

    async def release(self) -> None:
        """Give the lease up (idempotent); the store stops writing the session under it."""
        ...

    async def __aenter__(self) -> WriterLease: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


@runtime_checkable
class LogStore(Protocol):
    """Durable, append-only session logs, each written by one lease holder at a time.

    Every method raises only ``StoreError`` subclasses (and ``InvalidSessionId`` for a bad id).
    ``append`` returns once the batch is durable to the store's setting (fsync per batch by
    default); a batch is written whole. Writes need this store to hold the session's writer
    lease (see the module docstring: it is taken implicitly by the first write when free);
    ``SessionBusy`` when another holds it, ``FencingError`` when this store's lease was lost.
    ``append_batches`` reports those per session instead of raising (see its docstring).
    """

    async def acquire(self, session_id: str) -> WriterLease:
        """Take the session's writer lease and cut a torn tail off its log.

        Raises ``SessionNotFound``, ``InvalidSessionId``, ``SessionBusy`` naming the holder when
        another writer (or an earlier ``acquire`` through this store) holds it, and
        ``CorruptLogError`` for a bad line that is not a torn tail.
        """
        ...

    async def renew_leases(self) -> list[str]:
        """Renew every lease this store holds; returns the ids whose lease was lost, sorted."""
        ...

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """Start a log and hold its lease; raises ``SessionExists`` if there is one,
        ``InvalidSessionId``, ``SessionBusy``."""
        ...

    async def append(self, session_id: str, records: Sequence[Record]) -> None:
        """Append one batch; raises ``SessionNotFound``, ``StoreError`` on a seq gap,
        ``SessionBusy`` or ``FencingError`` unless this store holds the current lease."""
        ...

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> Mapping[str, Exception | None]:
        """Append several sessions' batches with one durability point (group commit), each
        session isolated from the others; returns one outcome per distinct session id.

        ``None``: every batch of that session in ``batches`` (in their order) is durable. An
        exception: none of them was written, and the exception is what ``append`` would have
        raised for it: ``InvalidSessionId``, ``SessionNotFound``, ``SessionBusy``,
        ``FencingError``, ``CorruptLogError``, or ``StoreError`` naming the session (a seq gap
        or regression, a record that cannot be encoded, a log deleted or replaced under a live
        session, an I/O error on that session's file). A refused session keeps no lease this
        call took for it. Raises ``StoreError`` only for a failure of the whole store (closed,
        connection lost, database disk full): then no session of the call was written, except
        that a commit whose acknowledgement was lost may have landed.
        """
        ...

    async def read(self, session_id: str, *, repair: bool = True) -> LogRead:
        """Every record; a bad middle line raises ``CorruptLogError``. A torn tail is reported;
        it is cut only when this store holds or can take the lease and ``repair`` is true."""
        ...

    async def read_tail(self, session_id: str, *, repair: bool = True) -> LogRead:
        """The session record, then every record from the newest compaction's
        ``covers_through + 1`` on (everything when there is no compaction); torn tails as
        ``read``."""
        ...

    async def exists(self, session_id: str) -> bool:
        """Whether a log exists for the id."""
        ...

    async def list_sessions(self) -> list[str]:
        """Ids of every session in the store, sorted."""
        ...

    async def lease_holder(self, session_id: str) -> LeaseHolder | None:
        """Who holds the session's writer lease now (this store included), or None when it is
        free: released, expired, or held by a process on this host that is dead. A reader:
        takes nothing and writes nothing. Raises ``InvalidSessionId``."""
        ...

    async def aclose(self) -> None:
        """Release every lease this store holds, then files and connections."""
        ...


@runtime_checkable
class IdentityReader(Protocol):
    """A store that reads what a session's identity is folded from without its whole log
    (the SQL stores, whose archive of covered records resume never reads)."""

    async def read_identity(self, session_id: str) -> LogRead:
        """The session's first record, then every ``settings_changed``, ``rewind`` and
        ``forked_from`` record, in seq order. Raises ``SessionNotFound``,
        ``InvalidSessionId``, ``CorruptLogError``, ``StoreError``."""
        ...
