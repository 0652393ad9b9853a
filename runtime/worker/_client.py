"""Send a message to a session that workers serve, and wait for its answer if asked.

The message goes into the session's inbox with an id of its own; any worker may take it. A
sender that waits listens for the store's NOTIFY of answers *before* queueing, so an answer that
comes fast is not missed, and looks again every few seconds in case a notification was (the
listening connection can drop). The answer is read from the log, where the worker committed it.
One listening connection serves every wait of a client (``async with``), however many.

A forked session's log numbers its own records from 1 while the records refer to lineage seqs
(see ``stowage.core.LineageStore``): the seq a message row names is the log's own, the first
seq of a round is the lineage's, so the answer is read back in the log's own numbering, with
the offset its first record (``ForkedFromRecord``) gives; it never changes, so a client asks
once per session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import anyio
from anyio.abc import TaskGroup, TaskStatus
from stowage.core import ConfigError, ForkedFromRecord, StoreError, validate_session_id
from stowage.storage import PostgresStore

from ._errors import MessageFailed
from ._messages import InboxMessage, answer_text, final_round_first_seq, new_message_id

__all__ = ["Client", "Sent"]

# a look at a message's status this often, whatever the notifications say
_RECHECK = 2.0
# the most sessions whose fork offset a client keeps (forgotten: one more read of seq 1)
_OFFSETS_KEPT = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    """A message handed to the workers: its ids, whether this call queued it (False: that id
    was queued or logged already, say by an earlier try), and its answer when waited for."""

    session_id: str
    message_id: str
    queued: bool
    answer: str | None = None


@dataclass(eq=False)
class _Connection:
    """A client's store, and the sessions its waiters wait on (woken by one listener)."""

    store: PostgresStore
    tasks: TaskGroup
    waiting: dict[str, anyio.Event] = field(default_factory=dict)
    listening: bool = False
    #: session id -> lineage seq before its log's first record (0 unless a fork)
    offsets: dict[str, int] = field(default_factory=dict)

    def arm(self, session_id: str) -> anyio.Event:
        """The event the next answer notified in ``session_id`` sets."""
        event = self.waiting.get(session_id)
        if event is None or event.is_set():
            event = self.waiting[session_id] = anyio.Event()
        return event

    def notified(self, session_id: str) -> None:
        event = self.waiting.pop(session_id, None)
        if event is not None:
            event.set()

    async def listen(self) -> None:
        """Make sure the listener runs (started before the caller queues anything)."""
        if not self.listening:
            self.listening = True
            await self.tasks.start(self._listen)

    async def _listen(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        while True:
            try:
                async with self.store.notifications("answers") as answers:
                    if not started:
                        started = True
                        task_status.started()
                    async for session_id in answers:
                        self.notified(session_id)
            except StoreError:
                pass  # the waiters poll every _RECHECK seconds meanwhile
            if not started:
                started = True
                task_status.started()
            await anyio.sleep(_RECHECK)


class Client:
    """Queues messages for workers: ``await Client(url).send("s1", "hello", wait=True)``.

    ``store_url`` is a ``postgresql://`` URL (it may hold a password: it is never logged or
    shown), ``schema`` the store's schema (default: the URL's ``?schema=``, else public).
    Use it as ``async with`` to share one connection pool and one listening connection across
    sends; otherwise each ``send`` opens and closes its own. Raises ``ConfigError`` for a URL that is not PostgreSQL or a bad schema name, or
    without the ``[postgres]`` extra.
    """

    def __init__(self, store_url: str, *, schema: str | None = None) -> None:
        if not isinstance(store_url, str) or not store_url.startswith(
            ("postgresql://", "postgres://")
        ):
            raise ConfigError("workers share a PostgreSQL store: give a postgresql:// URL")
        self._url = store_url
        # checks the schema name and the extra now; the schema is the URL's ?schema= if not given
        self._schema = PostgresStore(store_url, schema=schema).schema
        self._stack: AsyncExitStack | None = None
        self._conn: _Connection | None = None

    def __repr__(self) -> str:
        return f"Client(schema={self._schema!r})"  # the URL may hold a password

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            self._conn = await stack.enter_async_context(self._connected())
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack, self._conn = self._stack, None, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    async def send(
        self,
        session_id: str,
        text: str,
        *,
        wait: bool = False,
        create: bool = False,
        pin: bool = False,
        message_id: str | None = None,
    ) -> Sent:
        """Queue ``text`` for session ``session_id`` under ``message_id`` (a new uuid when
        None; give the same one to retry safely: an id is queued and answered once).

        ``create``: a session with no log gets one from the worker that takes the message
        (with that worker's settings). ``wait``: return once a worker committed the answer,
        with its text; bound the wait with ``anyio.fail_after`` (the message stays queued).

        Raises ``InvalidSessionId``, ``SessionNotFound`` (no such session, no ``create``),
        ``MessageFailed`` when a worker gave up on it, ``StoreError``.
        """
        validate_session_id(session_id)
        message = InboxMessage(message_id=message_id or new_message_id(), text=text, pinned=pin)
        async with self._using() as conn:
            if wait:  # listening before queueing: a fast answer cannot slip by
                await conn.listen()
            entry = message.to_entry()
            queued = await conn.store.push_message(session_id, entry, create=create)
            answer = await _answer(conn, session_id, message.message_id) if wait else None
        return Sent(
            session_id=session_id, message_id=message.message_id, queued=queued, answer=answer
        )

    async def answer(self, session_id: str, message_id: str) -> str:
        """Wait for the answer to a message sent earlier (by any sender) and return its text;
        bound the wait with ``anyio.fail_after``.

        Raises ``MessageFailed``, ``StoreError``.
        """
        validate_session_id(session_id)
        async with self._using() as conn:
            await conn.listen()
            return await _answer(conn, session_id, message_id)

    @asynccontextmanager
    async def _connected(self) -> AsyncIterator[_Connection]:
        store = PostgresStore(self._url, schema=self._schema, min_size=1, max_size=4)
        try:
            async with anyio.create_task_group() as tasks:
                yield _Connection(store=store, tasks=tasks)
                tasks.cancel_scope.cancel()
        finally:
            await store.aclose()

    @asynccontextmanager
    async def _using(self) -> AsyncIterator[_Connection]:
        if self._conn is not None:
            yield self._conn
            return
        async with self._connected() as conn:
            yield conn


async def _answer(conn: _Connection, session_id: str, message_id: str) -> str:
    while True:
        notified = conn.arm(session_id)  # armed before the look: no notification slips by
        status = await conn.store.message_status(session_id, message_id)
        if status is not None and status["status"] == "answered":
            return await _read_answer(conn, session_id, int(status["answered_seq"]))
        if status is not None and status["status"] == "failed":
            raise MessageFailed(session_id, message_id, str(status["reason"]))
        with anyio.move_on_after(_RECHECK):
            await notified.wait()


async def _read_answer(conn: _Connection, session_id: str, finished_seq: int) -> str:
    """The text of the turn whose ``finished`` record is at ``finished_seq``."""
    store = conn.store
    commit = await store.read_range(session_id, finished_seq - 1, finished_seq - 1)
    first = final_round_first_seq(commit)
    if first is None:
        raise StoreError(
            f"session {session_id!r}: seq {finished_seq - 1} should close the answering round"
        )
    offset = conn.offsets.get(session_id)
    if offset is None:
        opening = await store.read_range(session_id, 1, 1)
        head = opening[0] if opening else None
        if len(conn.offsets) >= _OFFSETS_KEPT:  # a client of millions of sessions
            conn.offsets.clear()
        offset = conn.offsets[session_id] = (
            head.through_seq if isinstance(head, ForkedFromRecord) else 0
        )
    return answer_text(await store.read_range(session_id, first - offset, finished_seq - 1))
