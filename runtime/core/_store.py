"""The log store boundary: one Protocol that JSONL, SQLite and PostgreSQL stores implement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ._records import Record

__all__ = ["LogRead", "LogStore", "TornTail"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TornTail:
    """A last record that was cut mid-write and has been removed."""

    path: str
    line: int
    bytes_removed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LogRead:
    """Records read from a log, in seq order, and any repair made while reading."""

    records: tuple[Record, ...]
    torn_tail: TornTail | None = None


@runtime_checkable
class LogStore(Protocol):
    """Durable, append-only session logs.

    Every method raises only ``StoreError`` subclasses. ``append`` returns once the batch is
    durable to the store's setting (fsync per batch by default); a batch is written whole.
    """

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """Start a log; raises ``SessionExists`` if there is one, ``InvalidSessionId``."""
        ...

    async def append(self, session_id: str, records: Sequence[Record]) -> None:
        """Append one batch; raises ``SessionNotFound``, ``StoreError`` on a seq gap."""
        ...

    async def append_batches(self, batches: Sequence[tuple[str, Sequence[Record]]]) -> None:
        """Append several sessions' batches with one durability point (group commit)."""
        ...

    async def read(self, session_id: str) -> LogRead:
        """Every record; a torn tail is cut off and reported, a bad middle line raises."""
        ...

    async def read_tail(self, session_id: str) -> LogRead:
        """The session record, then every record from the newest compaction's
        ``covers_through + 1`` on (everything when there is no compaction)."""
        ...

    async def exists(self, session_id: str) -> bool:
        """Whether a log exists for the id."""
        ...

    async def list_sessions(self) -> list[str]:
        """Ids of every session in the store, sorted."""
        ...

    async def aclose(self) -> None:
        """Release files and connections."""
        ...
