"""One session's state and the only way it changes: batches of records, folded in and made durable.

The sampler and its helpers (``Pressure``, ``PlanApplier``) share one ``Journal``. They read
``state`` freely but change it only through ``write``, which folds records exactly as replay
does, so live and replayed history cannot drift apart. The journal also hands the compactor
its snapshots, since persistence delivers them on the same edge once a batch is durable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import anyio
from stowage.core import Record, SessionState
from stowage.core import render as render_protected

from ._context import SessionContext
from ._mailbox import Reply, Slot
from ._messages import Append, CommittedSnapshot, PlanRequest

__all__ = ["Journal"]


@dataclass(eq=False)
class Journal:
    """Writes one session's records and snapshots its committed history for the compactor."""

    ctx: SessionContext
    state: SessionState
    #: the compactor's inbox: one coalescing slot, so a write never waits on a plan
    compactor: Slot[CommittedSnapshot]

    def protected_text(self) -> str | None:
        """The protected state as every projection renders it; None when there is none."""
        return render_protected(self.state.protected) or None

    def snapshot(
        self,
        *,
        manual: bool = False,
        focus: str | None = None,
        request: PlanRequest | None = None,
    ) -> CommittedSnapshot:
        """The history as of the last folded record, for the compactor."""
        state = self.state
        return CommittedSnapshot(
            session_id=self.ctx.session_id,
            round=state.round,
            history=tuple(state.history),
            usage=state.round_usage,
            last_seq=state.last_seq,
            last_compaction_seq=state.last_compaction_seq,
            usage_after_compaction=state.usage_after_compaction,
            manual=manual,
            focus=focus,
            protected_text=self.protected_text(),
            request=request,
            stubbed=frozenset(state.stubbed),
        )

    def send_to_compactor(self, snapshot: CommittedSnapshot) -> None:
        """Ask the compactor for a plan on ``snapshot`` (replacing any it has not read yet)."""
        self.compactor.put(snapshot)

    async def write(
        self, records: Sequence[Record], *, notify_compactor: bool = False
    ) -> CommittedSnapshot | None:
        """Fold one batch into the state and wait until it is durable.

        Folding first lets the committed snapshot include the batch; if the write fails the
        session fails with it, so no caller ever sees state that is not on disk. With
        ``notify_compactor``, persistence hands the compactor that snapshot once the batch is
        durable, and it is returned. Raises the store's error when the write fails, and
        ``TimeoutError`` when it is not answered within the context's ``write_timeout``.
        """
        if not records:
            return None
        for record in records:
            self.state.apply(record)
        committed = self.snapshot() if notify_compactor else None
        reply: Reply[None] = Reply()
        await self.ctx.persistence.send(
            Append(
                session_id=self.ctx.session_id,
                records=tuple(records),
                reply=reply,
                committed=committed,
                notify=self.compactor if notify_compactor else None,
            )
        )
        with anyio.fail_after(self.ctx.write_timeout, shield=True):
            # a write already sent must be answered before this task may be cancelled
            await reply.wait()
        return committed
