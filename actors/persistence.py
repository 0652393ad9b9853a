"""The persistence actor: the single writer of every log of one store.

One per store, shared by all sessions of a process. It takes whatever appends are waiting,
writes them as one group commit (one durability point for many sessions), and only then
acknowledges each and hands each durable boundary to its session's compactor. Nothing is acknowledged
before it is durable.

Sessions share the commit, not its failures: the store answers per session, so one session's
bad append (a seq gap, a lost lease, a record that cannot be encoded, a log deleted under it)
fails that session's appends only, and every other append of the group is acknowledged. Only a
failure of the store itself fails the whole group.
"""

from __future__ import annotations

from collections import defaultdict

import anyio
import structlog
from stowage.core import LogStore, Record, StoreError

from ._messages import Append
from ._queue import MailboxReceive

__all__ = ["run_persistence"]

_log = structlog.get_logger("stowage.persistence")


async def run_persistence(
    store: LogStore, inbox: MailboxReceive[Append], *, max_batch: int = 1024
) -> None:
    """Serve appends until every send end of ``inbox`` is closed, then drain and return."""
    log = _log.bind(actor="persistence")
    async with inbox:
        while True:
            try:
                first = await inbox.receive()
            except anyio.EndOfStream:
                return
            pending = [first]
            while len(pending) < max_batch:
                try:
                    pending.append(inbox.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            await _commit(store, pending, log)
            del first, pending  # answered: nothing of this group is kept while waiting


async def _commit(store: LogStore, pending: list[Append], log: structlog.BoundLogger) -> None:
    # A session's appends in one group are one batch: they stand or fall together.
    by_session: dict[str, list[Record]] = defaultdict(list)
    for append in pending:
        by_session[append.session_id].extend(append.records)
    try:
        outcomes = await store.append_batches(list(by_session.items()))
    except StoreError as exc:
        log.error("append_failed", sessions=len(by_session), error=str(exc))
        for append in pending:
            append.reply.fail(exc)
        return
    except Exception as exc:  # an unexpected store failure must reach the askers, not vanish
        log.exception("append_crashed", sessions=len(by_session))
        error = StoreError(f"store failed: {exc!r}")
        error.__cause__ = exc
        for append in pending:
            append.reply.fail(error)
        return
    errors: dict[str, Exception] = {}
    for session_id in by_session:
        if session_id not in outcomes:  # never acknowledge what the store did not confirm
            errors[session_id] = StoreError(
                f"{store!r} reported no outcome for session {session_id!r}; "
                "its append is not known to be durable"
            )
        elif (outcome := outcomes[session_id]) is not None:
            errors[session_id] = outcome
    for session_id, refusal in errors.items():
        log.error("append_refused", session_id=session_id, error=str(refusal))
    for append in pending:
        refused = errors.get(append.session_id)
        if refused is not None:
            append.reply.fail(refused)
            continue
        if append.boundary is not None and append.notify is not None:
            append.notify.put(append.boundary)
        append.reply.set(None)
