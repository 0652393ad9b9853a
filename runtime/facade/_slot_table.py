"""The records of the sessions a runtime knows, by id, and the views it takes of them.

A record lives from the open or create that claims its id until the session is gone; a
hibernated session keeps its id and nothing more. Claiming is where one open per id is kept:
a second open of an id waits for the first, and a closing session's last writes land (and its
lease is free) before its log is read again.
"""

from __future__ import annotations

from collections.abc import Iterator

from stowage.core import WriterLease

from ._descriptors import DescriptorBudget
from ._session import Session
from ._slots import SessionSlot, SlotState

__all__ = ["SlotTable"]


class SlotTable(dict[str, SessionSlot]):
    """Session records by id (a dict, read as one by the tests), with the claims on them."""

    def __init__(self) -> None:
        super().__init__()
        self._descriptors = DescriptorBudget()  # checked before a session starts

    async def claim(self, session_id: str) -> SessionSlot | None:
        """The id's record, moved to ``CREATING`` for the caller to open; None when live here.
        Waits while another open of the id or its close is under way."""
        while True:
            slot = self.get(session_id)
            if slot is None:
                self._descriptors.check(session_id)
                slot = self[session_id] = SessionSlot(session_id)
                return slot
            if slot.state is SlotState.CREATING:
                await slot.wait_opened()
            elif slot.state is SlotState.CLOSING:
                assert slot.session is not None
                await slot.session.close()
            elif slot.state is SlotState.HIBERNATED:
                self._descriptors.check(session_id)
                slot.move(SlotState.CREATING)
                slot.from_hibernation = True
                return slot
            else:
                return None

    def forget(self, slot: SessionSlot, to: SlotState) -> None:
        """Move ``slot`` to ``to``, a state of a session gone, and drop the record."""
        slot.move(to)
        if self.get(slot.id) is slot:
            del self[slot.id]

    def live(self) -> dict[str, Session]:
        """The live sessions, by id."""
        return {i: s.session for i, s in self.items() if s.live and s.session is not None}

    def hibernated(self) -> frozenset[str]:
        """Ids of the sessions hibernated and not woken since."""
        return frozenset(
            i
            for i, s in self.items()
            if s.state is SlotState.HIBERNATED
            or (s.state is SlotState.CREATING and s.from_hibernation)
        )

    def idle(self, now: float, idle_timeout: float) -> list[SessionSlot]:
        """The live sessions with nothing to do for ``idle_timeout`` seconds at ``now``."""
        return [
            s
            for s in self.values()
            if s.live
            and s.session is not None
            and not s.session.busy
            and now - s.session.last_active >= idle_timeout
        ]

    def held_leases(self) -> Iterator[tuple[str, WriterLease]]:
        """The leases held, by session id."""
        for session_id, slot in self.items():
            if slot.lease is not None:
                yield session_id, slot.lease
