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
from stowage.core import MilestoneRecord, ProtectedState, Record, SessionState
from stowage.core import render as render_protected

from ._accounting import Accounting
from ._context import SessionContext
from ._mailbox import Reply
from ._messages import Append, CommittedSnapshot, SnapshotCause, SnapshotSink

__all__ = ["Journal"]


@dataclass(eq=False)
class Journal:
    """Writes one session's records and snapshots its committed history for the compactor."""

    ctx: SessionContext
    state: SessionState
    #: the compactor's inbox: a coalescing slot, so a write never waits on a plan
    compactor: SnapshotSink
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

    def snapshot(self, cause: SnapshotCause) -> CommittedSnapshot:
        """The session as of the last folded record, for the compactor."""
        state = self.state
        protected = self.protected_text()
        ledger = state.ledger
        return CommittedSnapshot(
            session_id=self.ctx.session_id,
            cause=cause,
            round=state.round,
            turn=state.turn,
            turn_open=state.turn_open,
            history=tuple(state.history),
            usage=state.round_usage,
            last_seq=state.last_seq,
            last_compaction_seq=state.last_compaction_seq,
            usage_after_compaction=state.usage_after_compaction,
            protected_text=protected,
            stubbed=frozenset(state.stubbed),
            open_calls=frozenset(state.open_calls),
            status=self.accounting.status(state, protected),
            looping=(ledger.looping(self.ctx.settings.compaction_loop_repeats) if ledger else None),
            turn_compactions=ledger.compactions if ledger else 0,
            reground_base=state.reground_base,
            fulls_since_reground=state.fulls_since_reground,
            milestone=_phase(state.last_milestone) if cause == "milestone" else None,
            turns_since_compaction=state.turns_since_compaction,
        )

    def seed(self) -> None:
        """Hand the compactor the state the session starts from: replayed from the log, so
        durable like any boundary (a resumed turn goes on without writing first)."""
        snapshot = self.snapshot("seed")
        self.boundary_seq = snapshot.last_seq
        self.compactor.put(snapshot)

    async def write(
        self, records: Sequence[Record], *, boundary: SnapshotCause | None = None
    ) -> None:
        """Fold one batch into the state and wait until it is durable.

        Folding first lets the committed snapshot include the batch; if the write fails the
        session fails with it, so no caller ever sees state that is not on disk. A batch that
        ends at a ``boundary`` (a committed round, a turn's input, an applied plan) is handed
        to the compactor as a snapshot by persistence once it is durable. Raises the store's
        error when the write fails, and ``TimeoutError`` when it is not answered within the
        context's ``write_timeout``.
        """
        if not records:
            return
        for record in records:
            self.state.apply(record)
        committed = self.snapshot(boundary) if boundary is not None else None
        if committed is not None:
            self.boundary_seq = committed.last_seq
        reply: Reply[None] = Reply()
        await self.ctx.persistence.send(
            Append(
                session_id=self.ctx.session_id,
                records=tuple(records),
                reply=reply,
                committed=committed,
                notify=self.compactor if committed is not None else None,
            )
        )
        with anyio.CancelScope(shield=True):
            # a write already sent must be answered before this task may be cancelled
            await reply.wait_within(self.ctx.write_timeout)


def _phase(milestone: MilestoneRecord | None) -> str | None:
    """The phase a milestone ended, as the summary is told it."""
    if milestone is None:
        return None
    return f"{milestone.name}: {milestone.note}" if milestone.note else milestone.name
