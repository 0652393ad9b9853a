"""One session's state and the only way it changes: batches of records, folded in and made durable.

The sampler and its helpers (``Gate``, ``PlanApplier``) share one ``Journal``. They read
``state`` freely but change it only through ``write``, which folds records exactly as replay
does, so live and replayed history cannot drift apart. The journal also hands the compactor
its snapshots, since persistence delivers them on the same edge once a batch is durable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import structlog
from stowage.core import ProtectedState, Record, SessionState
from stowage.core import render as render_protected
from stowage.policy import Accounting, BoundaryCause, Refusal, Snapshot, snapshot_of

from ._context import SessionContext
from ._mailbox import Reply
from ._messages import Append, BoundarySink

__all__ = ["Journal", "SessionPart"]

_log = structlog.get_logger("stowage.sampler")


@dataclass(eq=False)
class Journal:
    """Writes one session's records and snapshots its committed history for the compactor."""

    ctx: SessionContext
    state: SessionState
    #: the compactor's inbox: a coalescing slot, so a write never waits on a plan
    compactor: BoundarySink
    #: replaced when a provider's refusal states the window (``Accounting.with_window``)
    accounting: Accounting
    #: the last seq of the newest batch that ended at a boundary (the compactor's verdicts
    #: are on such seqs)
    boundary_seq: int = 0
    _rendered_from: ProtectedState | None = field(default=None, init=False, repr=False)
    _rendered: str | None = field(default=None, init=False, repr=False)

    def protected_text(self) -> str | None:
        """The protected state as every projection renders it; None when there is none."""
        protected = self.state.protected
        # an immutable value, replaced on change: rendered once per value, not per request
        if protected is not self._rendered_from:
            self._rendered_from = protected
            self._rendered = render_protected(protected) or None
        return self._rendered

    def snapshot(
        self,
        cause: BoundaryCause,
        *,
        refusal: Refusal | None = None,
        dropped: tuple[int, str] | None = None,
    ) -> Snapshot:
        """The session as of the last folded record, for the compactor."""
        return snapshot_of(
            self.state,
            self.accounting,
            cause,
            protected_text=self.protected_text(),
            refusal=refusal,
            dropped=dropped,
        )

    def seed(self) -> None:
        """Hand the compactor the state the session starts from: replayed from the log, so
        durable like any boundary."""
        snapshot = self.snapshot("seed")
        self.boundary_seq = snapshot.last_seq
        self.compactor.put(snapshot)

    async def write(
        self,
        records: Sequence[Record],
        *,
        boundary: BoundaryCause | None = None,
        refusal: Refusal | None = None,
        dropped: tuple[int, str] | None = None,
    ) -> None:
        """Fold one batch into the state and wait until it is durable. Folding first lets the
        committed snapshot include the batch; if the write fails the session fails with it, so no
        caller ever sees state that is not on disk."""
        if not records:
            return
        for record in records:
            self.state.apply(record)
        snapshot = (
            self.snapshot(boundary, refusal=refusal, dropped=dropped)
            if boundary is not None
            else None
        )
        if snapshot is not None:
            self.boundary_seq = snapshot.last_seq
        reply: Reply[None] = Reply()
        await self.ctx.persistence.send(
            Append(
                session_id=self.ctx.session_id,
                records=tuple(records),
                reply=reply,
                boundary=snapshot,
                notify=self.compactor if snapshot is not None else None,
            )
        )
        with anyio.CancelScope(shield=True):
            # a write already sent must be answered before this task may be cancelled
            await reply.wait_within(self.ctx.write_timeout)


class SessionPart:
    """A helper of one live session's sampler."""

    # eight helpers per live session: no per-instance dict (each subclass names its own)
    __slots__ = ("_log", "ctx", "journal")

    def __init__(
        self,
        ctx: SessionContext,
        journal: Journal,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.ctx = ctx
        self.journal = journal
        self._log = log if log is not None else _log.bind(session=ctx.session_id, actor="sampler")
