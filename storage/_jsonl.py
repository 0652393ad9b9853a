"""The default store: one append-only JSONL file per session.

Line ``n`` of a log holds seq ``n``, so a reader can locate any record by counting newlines
from a known one. Resume uses that: it scans backwards for the newest compaction line and
decodes only what follows it, so its cost grows with the tail, not with the whole log.

Writes go through one thread hop per call (``append_batches`` writes and syncs every session it
was given in that hop), because the persistence actor batches across many sessions and a hop per
file would cost more than the writes; the hop goes to a thread of the store's own (see
``WriterThread``), as anyio's worker threads cost several times more on the event loop per call.
Each session's file is written and synced on its own: a failure on one file fails that session
only, and its file is cut back to where it stood, so an acknowledged batch is whole and an
unacknowledged one is absent (a crash can still leave a torn last line: bytes after the last
newline). Before every write the open descriptor is checked against the path (still linked,
still the file under that name, still the file the lease was taken on): bytes written to a log
deleted or replaced under a live session would be acknowledged and then found by no reader.

One writer per session: the writer lease is a lock on the session's byte of the root's one lease
file, ``.leases.lock``, taken through the one descriptor the store object holds for all its
leases (see ``_jsonl_lock``: an open-file-description lock, so no descriptor is held per live
session), and a record ``<id>.lock`` beside the log naming the holder. It is held by the store
object from its ``acquire``, ``create`` or first append of the session until ``release`` or
``aclose``, and by nobody once the process is gone. Logs are opened through a bounded cache of
descriptors (``max_open_files``), so a store holds at most ``max_open_files + 1`` however many
sessions are live. A
second writer, in another process or through another store (or a second ``acquire`` through
this one), gets ``SessionBusy`` naming the holder. The store remembers the leases it holds, so
appends carry no token; holding the lock is the fence. Taking the lease cuts a torn last line
off the log, and only the lease holder ever cuts one: a reader reports it and changes nothing
(``read(..., repair=False)``), unless it asks to ``repair`` and the lease is free, in which case
it takes the lease for the cut and gives it back. Readers never create the root, a log or a lock
file; the root is created by the first ``create``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiofiles
import aiofiles.os
import anyio
import anyio.to_thread
from stowage.core import (
    ConfigError,
    Durability,
    FencingError,
    LeaseHolder,
    LogRead,
    Record,
    SessionBusy,
    SessionExists,
    SessionNotFound,
    StoreError,
    TornTail,
    get_logger,
)

from ._codec import encode_record
from ._fdcache import FdCache
from ._jsonl_files import FileId, LogFiles, LogWrite, log_gone
from ._jsonl_lock import LeaseTable, holder_of_file
from ._jsonl_scan import LogEnd, NeedFullScan, Suffix, parse_all, scan_end, tail_of, tail_records
from ._lease import Lease, new_owner
from ._search import Found, scan_file
from ._sql import append_one, check_consecutive, check_follows, group_by_session
from ._syncfs import load_syncfs
from ._writer_thread import WriterThread

__all__ = ["JsonlStore"]

log = get_logger("stowage.storage")

_PARSE_IN_THREAD = 256 * 1024  # decoding a bigger log would stall the event loop


#: reads a log: ``(session_id, path) -> (records, where it ends)``
_Reader = Callable[[str, str], Awaitable[tuple[tuple[Record, ...], LogEnd]]]


@dataclass(eq=False, slots=True)
class _Held:
    """A lease this store holds; ``log_id`` is the log file it writes (None until it exists)."""

    lease: Lease
    log_id: FileId | None = None
    #: the log's path, checked once under this lease (appends do not resolve it again)
    path: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """One batch of a group commit, checked and encoded, and the log it goes to."""

    path: str
    records: Sequence[Record]
    data: bytes


@dataclass(eq=False, slots=True)
class _Slot:
    # asyncio's lock, not anyio's: every group commit takes one per session, and anyio's
    # yields to the event loop even when it is free (the runtime runs on asyncio)
    lock: asyncio.Lock
    users: int = 0


class _SessionLocks:
    """One lock per session id, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._slots: dict[str, _Slot] = {}

    def known(self) -> list[str]:
        return list(self._slots)

    def hold(self, session_ids: Iterable[str]) -> _Holding:
        """The locks of ``session_ids``, held for the body of an ``async with``."""
        return _Holding(self._slots, session_ids)


class _Holding:
    """One ``async with`` of ``_SessionLocks.hold``: a class, cheaper than a generator CM."""

    __slots__ = ("_held", "_session_ids", "_slots", "_taken")

    def __init__(self, slots: dict[str, _Slot], session_ids: Iterable[str]) -> None:
        self._slots = slots
        self._session_ids = session_ids
        self._taken: list[tuple[str, _Slot]] = []
        self._held = 0  # how many of ``_taken`` are locked, from the first

    async def __aenter__(self) -> None:
        # Sorted order everywhere, so two group commits over overlapping sessions cannot
        # deadlock; the user count (not lock state) decides removal, so a slot is never
        # replaced while someone is about to acquire it.
        for session_id in sorted(set(self._session_ids)):
            slot = self._slots.get(session_id)
            if slot is None:
                slot = self._slots[session_id] = _Slot(asyncio.Lock())
            slot.users += 1
            self._taken.append((session_id, slot))
        try:
            for _, slot in self._taken:
                await slot.lock.acquire()
                self._held += 1
        except BaseException:
            self._give_back()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._give_back()

    def _give_back(self) -> None:
        for _, slot in reversed(self._taken[: self._held]):
            slot.lock.release()
        for session_id, slot in self._taken:
            slot.users -= 1
            if slot.users == 0:
                del self._slots[session_id]


class JsonlStore:
    """Session logs as ``<root>/<session_id>.jsonl``, one record per line, each written under
    the session's writer lease: a lock on its byte of ``<root>/.leases.lock``, its holder named
    in ``<root>/<session_id>.lock``. The store holds one descriptor for all its leases and at
    most ``max_open_files`` for its logs (least recently written closed first).

    ``durability="fsync"`` syncs every batch before acknowledging it; ``"syncfs"`` does too, but
    syncs a group commit of several logs with one ``syncfs`` of their filesystem instead of an
    ``fdatasync`` per log (a fraction of the CPU with many sessions at once; Linux 5.8 or later;
    it also flushes what other programs wrote to that filesystem); ``"none"`` leaves it to the
    OS (fast, loses recent batches on a power cut, never corrupts the middle of a log). The root
    is created by the first ``create``, not here. Raises ``ConfigError`` for an unknown
    durability, a ``syncfs`` this system cannot give, or a root that exists and is not a
    directory.
    """

    def __init__(
        self, root: Path | str, *, durability: Durability = "fsync", max_open_files: int = 512
    ) -> None:
        if durability not in ("fsync", "syncfs", "none"):
            raise ConfigError(f"durability must be 'fsync', 'syncfs' or 'none', got {durability!r}")
        if os.path.exists(root) and not os.path.isdir(root):
            raise ConfigError(f"store root {str(root)!r} exists and is not a directory")
        self._root = os.path.realpath(root)
        self._durability: Durability = durability
        self._fds = FdCache(max_open_files)
        self._files = LogFiles(
            self._root,
            fds=self._fds,
            fsync=durability != "none",
            # a group commit of several logs: one syncfs instead of an fdatasync each
            syncfs=load_syncfs() if durability == "syncfs" else None,
        )
        self._locks = _SessionLocks()
        self._owner = new_owner()
        self._leases = LeaseTable(self._root, self._owner)
        self._held: dict[str, _Held] = {}  # the leases this store holds, by session id
        self._last_seq: dict[str, int] = {}  # per held session; reloaded from the file if lost
        self._writer = WriterThread(f"stowage-jsonl-writer {self._root}")
        weakref.finalize(self, self._writer.stop_soon)  # a store dropped without aclose
        self._closed = False

    def __repr__(self) -> str:
        return f"JsonlStore({self._root!r}, durability={self._durability!r})"

    @property
    def root(self) -> Path:
        """The directory holding the logs."""
        return Path(self._root)

    @property
    def open_descriptors(self) -> int:
        """Descriptors this store holds open now: its lease file's and its cached logs'."""
        return self._leases.descriptors + len(self._fds)

    # -- LogStore ---------------------------------------------------------------------------

    async def acquire(self, session_id: str) -> Lease:
        """Take the session's writer lease (its lock), cutting a torn last line off the log.

        Raises ``InvalidSessionId``, ``SessionNotFound`` (creating no file), ``SessionBusy``
        naming the holder when another store or process holds the lock or this store has handed
        the lease out already, ``CorruptLogError`` for a bad line that is not a torn tail, and
        ``StoreError`` when the lock file cannot be written.
        """
        path = self._files.path(session_id)
        async with self._locks.hold((session_id,)):
            self._check_open()
            held = self._held.get(session_id)
            if held is not None:
                if held.lease.handed_out:
                    raise SessionBusy(
                        session_id, held.lease.holder, where=self._files.lock_path(path)
                    )
                held.lease.handed_out = True  # taken by a write; now the caller's
                return held.lease
            lease = await self._take_locked(session_id, path)
            lease.handed_out = True
            return lease

    async def renew_leases(self) -> list[str]:
        """Nothing to renew: a lease's lock lasts until released. Returns ``[]``."""
        self._check_open()
        return []

    async def create(self, session_id: str, records: Sequence[Record]) -> None:
        """Start a log holding ``records`` (seqs 1, 2, ...), atomically, and hold its lease.

        Raises ``InvalidSessionId``, ``SessionExists``, ``SessionBusy`` when another writer
        holds the lock of a session not created yet, or ``StoreError`` for bad seqs or I/O.
        """
        path = self._files.path(session_id)
        if records and records[0].seq != 1:
            raise StoreError(f"session {session_id!r}: a log starts at seq 1, not {records[0].seq}")
        check_consecutive(session_id, [record.seq for record in records])
        data = _encode(session_id, records)
        async with self._locks.hold((session_id,)):
            self._check_open()
            taken: tuple[int, LeaseHolder] | None = None
            if session_id not in self._held:
                try:
                    taken = await self._lock(session_id, path, make_root=True)
                except SessionBusy:
                    if await aiofiles.os.path.isfile(path):
                        raise SessionExists(
                            f"session {session_id!r} already has a log at {path}"
                        ) from None
                    raise
            try:
                log_id = await anyio.to_thread.run_sync(self._files.create, session_id, path, data)
            except BaseException:
                if taken is not None:
                    with anyio.CancelScope(shield=True):
                        await self._unlock(session_id, path, taken[0])
                raise
            if taken is not None:
                self._hold(session_id, *taken, repaired=None)
            self._held[session_id].log_id = log_id
            self._last_seq[session_id] = records[-1].seq if records else 0

    async def append(self, session_id: str, records: Sequence[Record]) -> None:
        """Append one batch, written whole and synced before this returns.

        Raises ``InvalidSessionId``, ``SessionNotFound``, ``SessionBusy`` when another writer
        holds the session, ``CorruptLogError`` for a bad line in the log, ``StoreError`` when
        the seqs do not continue the log exactly, when the log was deleted or replaced while
        this store held it, or on I/O failure (then nothing of the batch remains).
        """
        await append_one(self.append_batches, session_id, records)

    async def append_batches(
        self, batches: Sequence[tuple[str, Sequence[Record]]]
    ) -> dict[str, Exception | None]:
        """Append several sessions' batches, then sync each file once (group commit); returns
        an outcome per distinct session id: ``None`` when all its batches are durable, or the
        error ``append`` would raise for it, when none of them was kept.

        Every session is written under this store's lease, taken here if it is not held yet
        (cutting a torn tail first) and given back if the session is then refused. Sessions
        are isolated: one refused or failing on its own file leaves the others written.
        Raises ``StoreError`` only when the store is closed; anything unexpected in the
        writing thread cuts every file of the group back and is raised.
        """
        planned, outcomes = group_by_session(batches, self._plan)
        if not planned:
            return outcomes
        async with self._locks.hold(planned):
            self._check_open()
            writes: list[LogWrite] = []
            for session_id in sorted(planned):
                try:
                    write = await self._prepare(session_id, planned[session_id])
                except StoreError as exc:
                    outcomes[session_id] = exc
                    continue
                if write is not None:
                    writes.append(write)
            if not writes:
                return outcomes
            try:
                failed = await self._writer.run(self._files.write_group, writes)
            except BaseException:
                for write in writes:  # the files are the truth again; reload on next use
                    self._last_seq.pop(write.session_id, None)
                raise
            give_back: list[Lease] = []
            for write in writes:
                error = failed.get(write.session_id)
                if error is None:
                    self._last_seq[write.session_id] = write.last_seq
                    continue
                outcomes[write.session_id] = error
                self._last_seq.pop(write.session_id, None)
                held = self._held.get(write.session_id)
                if write.took_lease and held is not None:
                    give_back.append(held.lease)
            if give_back:
                with anyio.CancelScope(shield=True):
                    for lease in give_back:
                        await self._drop_locked(lease)
        return outcomes

    async def read(self, session_id: str, *, repair: bool = True) -> LogRead:
        """Every record, in seq order, and a torn last line if there is one.

        The torn line is cut off (``removed``) only when ``repair`` is true and this store
        holds the lease or can take it (then only for the cut: it is given back); otherwise it
        is reported and the file is left byte for byte as it was, and no lock file is made.
        Raises ``InvalidSessionId``, ``SessionNotFound``, ``CorruptLogError`` naming the file and
        line of a bad record that is not a torn tail, or of a seq out of place.
        """
        return await self._read_repairing(session_id, self._read_whole, repair=repair)

    async def read_tail(self, session_id: str, *, repair: bool = True) -> LogRead:
        """The session record, then every record from the newest compaction's
        ``covers_through + 1`` on; reads backwards, so its cost grows with the tail only.

        Torn tails and errors as ``read``.
        """
        return await self._read_repairing(session_id, self._read_tail_or_all, repair=repair)

    async def search_log(self, session_id: str, words: Sequence[str], *, deadline: float) -> Found:
        """The item records whose line may hold every one of ``words``, in one streaming
        pass over the log until ``deadline`` (``time.monotonic()``); see ``_search``. Holds
        no lock: a line still being appended is not a record yet, and a search must not keep
        the session's writes waiting. Raises ``InvalidSessionId``, ``SessionNotFound``,
        ``CorruptLogError``, ``StoreError``."""
        path = self._files.path(session_id)
        self._check_open()
        scan = functools.partial(scan_file, path, session_id, words, deadline=deadline)
        return await anyio.to_thread.run_sync(scan)

    async def exists(self, session_id: str) -> bool:
        """Whether a log exists for the id; raises ``InvalidSessionId``."""
        path = self._files.path(session_id)
        return await aiofiles.os.path.isfile(path)

    async def lease_holder(self, session_id: str) -> LeaseHolder | None:
        """Who holds the session's lock (see ``LogStore.lease_holder``): the holder the lock
        file names while its process lives. Raises ``InvalidSessionId``."""
        held = self._held.get(session_id)
        if held is not None:
            return held.lease.holder
        lock_path = self._files.lock_path(self._files.path(session_id))
        return await anyio.to_thread.run_sync(holder_of_file, self._root, session_id, lock_path)

    async def list_sessions(self) -> list[str]:
        """Ids of every log under the root (none if it does not exist), sorted; raises
        ``StoreError`` if it cannot list."""
        try:
            return await anyio.to_thread.run_sync(self._files.list_sessions)
        except OSError as exc:
            raise StoreError(f"cannot list store root {self._root!r}: {exc}") from exc

    async def aclose(self) -> None:
        """Wait for writes in flight, release every lease, close every open file; later calls
        raise."""
        if self._closed:
            return
        async with self._locks.hold([*self._locks.known(), *self._held]):
            self._closed = True
            with anyio.CancelScope(shield=True):
                await self._writer.stop()  # before the leases go and the descriptors close
                for held in list(self._held.values()):
                    await self._drop_locked(held.lease)
            self._fds.close_all()
            self._leases.close()

    # -- leases -----------------------------------------------------------------------------

    async def _lock(
        self, session_id: str, path: str, *, make_root: bool = False
    ) -> tuple[int, LeaseHolder]:
        """Take the session's lock: ``(token, holder)``; ``SessionBusy`` if held."""
        lock_path = self._files.lock_path(path)
        try:
            return await anyio.to_thread.run_sync(self._lock_sync, session_id, lock_path, make_root)
        except OSError as exc:
            raise StoreError(f"cannot lock {lock_path}: {exc}") from exc

    async def _unlock(self, session_id: str, path: str, token: int) -> None:
        """Give back a lock ``_lock`` took."""
        release = self._leases.release
        await anyio.to_thread.run_sync(release, session_id, self._files.lock_path(path), token)

    def _hold(
        self,
        session_id: str,
        token: int,
        holder: LeaseHolder,
        *,
        repaired: TornTail | None,
        log_id: FileId | None = None,
    ) -> Lease:
        lease = Lease(
            session_id=session_id,
            token=token,
            holder=holder,
            repaired=repaired,
            renew_every=None,
            renew=self._renew_lease,
            release=self._release_lease,
        )
        self._held[session_id] = _Held(lease=lease, log_id=log_id)
        return lease

    async def _take_locked(self, session_id: str, path: str) -> Lease:
        """Take the lease of an existing log, cut its torn tail, learn where it ends."""
        if not await aiofiles.os.path.isfile(path):  # before the lock file is made
            raise SessionNotFound(f"no log for session {session_id!r} at {path}")
        token, holder = await self._lock(session_id, path)
        try:
            repaired = await self._load_end(session_id, path)
            log_id = await self._log_id(session_id, path)
        except BaseException:
            self._last_seq.pop(session_id, None)
            with anyio.CancelScope(shield=True):
                await self._unlock(session_id, path, token)
            raise
        return self._hold(session_id, token, holder, repaired=repaired, log_id=log_id)

    async def _log_id(self, session_id: str, path: str) -> FileId:
        try:
            info = await aiofiles.os.stat(path)
        except FileNotFoundError:
            raise SessionNotFound(f"no log for session {session_id!r} at {path}") from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc
        return info.st_dev, info.st_ino

    # -- group commits ----------------------------------------------------------------------

    def _plan(self, session_id: str, records: Sequence[Record]) -> _Plan:
        """Check and encode one batch; raises ``InvalidSessionId``, ``StoreError``."""
        held = self._held.get(session_id)
        path = held.path if held is not None else None
        if path is None:
            path = self._files.path(session_id)
            if held is not None:
                held.path = path
        check_consecutive(session_id, [record.seq for record in records])
        return _Plan(path=path, records=records, data=_encode(session_id, records))

    async def _prepare(self, session_id: str, plans: list[_Plan]) -> LogWrite | None:
        """One session's batches checked under its lease: the write to make, or None."""
        path = plans[0].path
        took_lease = session_id not in self._held
        if took_lease:
            await self._take_locked(session_id, path)
        held = self._held[session_id]
        try:
            if session_id not in self._last_seq:  # a failed write forgot it
                await self._check_still_the_log(session_id, path, held.log_id)
                await self._load_end(session_id, path)
            last = self._last_seq[session_id]
            parts: list[bytes] = []
            for plan in plans:
                if not plan.records:
                    continue
                check_follows(session_id, plan.records[0].seq, last)
                last = plan.records[-1].seq
                parts.append(plan.data)
        except BaseException:
            if took_lease:
                with anyio.CancelScope(shield=True):
                    await self._drop_locked(held.lease)
            raise
        if not parts:
            return None
        return LogWrite(
            session_id=session_id,
            path=path,
            data=b"".join(parts),
            last_seq=last,
            log_id=held.log_id,
            took_lease=took_lease,
        )

    async def _check_still_the_log(self, session_id: str, path: str, log_id: FileId | None) -> None:
        """Before a held log is read again: raises ``StoreError`` if it is gone or replaced."""
        if log_id is None:
            return
        try:
            info = await aiofiles.os.stat(path)
        except FileNotFoundError:
            raise log_gone(session_id, path, "deleted or moved away") from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc
        if (info.st_dev, info.st_ino) != log_id:
            raise log_gone(session_id, path, "replaced by another file")

    async def _drop_locked(self, lease: Lease) -> None:
        held = self._held.get(lease.session_id)
        if held is None or held.lease is not lease:
            return
        del self._held[lease.session_id]
        lease.released = True
        self._last_seq.pop(lease.session_id, None)  # another writer may append from now on
        self._fds.discard(lease.session_id)
        await self._unlock(lease.session_id, self._files.path(lease.session_id), lease.token)

    async def _release_lease(self, lease: Lease) -> None:
        async with self._locks.hold((lease.session_id,)):  # after the writes in flight
            await self._drop_locked(lease)

    async def _renew_lease(self, lease: Lease) -> None:
        held = self._held.get(lease.session_id)
        if held is None or held.lease is not lease:
            raise FencingError(f"session {lease.session_id!r}: lease {lease.token} is not held")

    async def _repair_as_writer(
        self, session_id: str, path: str
    ) -> TornTail | Literal[False] | None:
        """Cut a torn tail under this store's lease (or one taken for it); what was cut, or None."""
        if session_id in self._held:
            return await self._load_end(session_id, path)
        try:
            lease = await self._take_locked(session_id, path)
        except SessionBusy:
            return False
        except StoreError as exc:
            if isinstance(exc.__cause__, OSError):  # the lock file could not be made
                return False
            raise
        with anyio.CancelScope(shield=True):
            await self._drop_locked(lease)
        return lease.repaired

    @staticmethod
    def _report(path: str, end: LogEnd) -> TornTail | None:
        if not end.torn_bytes:
            return None
        line = end.last.seq + 1 if end.last is not None else 1
        return TornTail(path=path, line=line, bytes_removed=end.torn_bytes, removed=False)

    # -- reading ----------------------------------------------------------------------------

    async def _read_repairing(self, session_id: str, read: _Reader, *, repair: bool) -> LogRead:
        """``read``, cutting a torn tail first when ``repair`` and the lease can be had."""
        path = self._files.path(session_id)
        async with self._locks.hold((session_id,)):
            self._check_open()
            records, end = await read(session_id, path)
            if end.torn_bytes and repair:
                cut = await self._repair_as_writer(session_id, path)
                if cut is not False:
                    records, _ = await read(session_id, path)
                    return LogRead(records=records, torn_tail=cut)
            return LogRead(records=records, torn_tail=self._report(path, end))

    async def _read_whole(self, session_id: str, path: str) -> tuple[tuple[Record, ...], LogEnd]:
        records, end = await self._read_locked(session_id, path)
        return tuple(records), end

    async def _read_tail_or_all(
        self, session_id: str, path: str
    ) -> tuple[tuple[Record, ...], LogEnd]:
        try:
            end, records = await self._read_tail_locked(session_id, path)
        except NeedFullScan:
            full, end = await self._read_locked(session_id, path)
            return tail_of(full), end
        return records, end

    async def _read_locked(self, session_id: str, path: str) -> tuple[list[Record], LogEnd]:
        try:
            async with aiofiles.open(path, "rb") as file:
                data = await file.read()
        except FileNotFoundError:
            raise SessionNotFound(f"no log for session {session_id!r} at {path}") from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc
        if len(data) > _PARSE_IN_THREAD:
            return await anyio.to_thread.run_sync(parse_all, data, path)
        return parse_all(data, path)

    async def _read_tail_locked(
        self, session_id: str, path: str
    ) -> tuple[LogEnd, tuple[Record, ...]]:
        try:
            async with aiofiles.open(path, "rb") as file:
                sx = Suffix(file, await file.seek(0, os.SEEK_END))
                end = await scan_end(sx)
                records = () if end.last is None else await tail_records(sx, end)
        except FileNotFoundError:
            raise SessionNotFound(f"no log for session {session_id!r} at {path}") from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc
        return end, records

    async def _load_end(self, session_id: str, path: str) -> TornTail | None:
        """Learn where a held log ends, cutting a torn tail off first; only a lease holder may."""
        try:
            try:
                async with aiofiles.open(path, "rb") as file:
                    end = await scan_end(Suffix(file, await file.seek(0, os.SEEK_END)))
            except NeedFullScan:
                _, end = await self._read_locked(session_id, path)  # names the bad line
        except FileNotFoundError:
            raise SessionNotFound(f"no log for session {session_id!r} at {path}") from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc
        torn = await self._cut(session_id, path, end)
        self._last_seq[session_id] = end.last.seq if end.last is not None else 0
        return torn

    async def _cut(self, session_id: str, path: str, end: LogEnd) -> TornTail | None:
        if not end.torn_bytes:
            return None
        await anyio.to_thread.run_sync(self._files.truncate, path, end.good_end)
        line = end.last.seq + 1 if end.last is not None else 1
        log.warning(
            "log_torn_tail_repaired",
            session_id=session_id,
            path=path,
            line=line,
            bytes_removed=end.torn_bytes,
        )
        return TornTail(path=path, line=line, bytes_removed=end.torn_bytes)

    # -- blocking parts, run in a worker thread ---------------------------------------------

    def _lock_sync(
        self, session_id: str, lock_path: str, make_root: bool
    ) -> tuple[int, LeaseHolder]:
        if make_root:
            self._files.make_root()  # raises StoreError, not OSError: not a failure to lock
        return self._leases.take(session_id, lock_path)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed")


def _encode(session_id: str, records: Sequence[Record]) -> bytes:
    try:
        return b"".join(map(encode_record, records))
    except TypeError as exc:
        raise StoreError(f"session {session_id!r}: a record cannot be encoded: {exc}") from exc
