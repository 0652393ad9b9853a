"""One record per session a runtime knows: where the session is in its life, and all it holds.

A ``Runtime`` keeps one ``SessionSlot`` per session id, from the moment an open or a create
claims the id until the session is gone (closed, failed, or an open that started nothing); a
hibernated session keeps its slot and nothing else. ``SessionSlot.state`` is one of
``SlotState``, and ``TRANSITIONS`` below, the one place they are declared, says where each
state may go next. ``SessionSlot.move`` refuses any other move with ``IllegalTransition``: a
bug in the runtime, never a user's error.

A session's life, in the order of the table: an open or create claims its id (creating) and
starts it (live); it parks once its log is recovered and runs whenever a command comes (parked,
running); it leaves memory (closing) when it is hibernated, closed, fails or loses its lease,
and rests hibernated, or is gone (closed, failed). An open that starts nothing leaves a new id
gone and a hibernated one hibernated.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

import anyio
from stowage.core import SessionLeaseLost, Settings, WriterLease

from ._session import Session

__all__ = ["LIVE_STATES", "TRANSITIONS", "IllegalTransition", "SessionSlot", "SlotState"]


class SlotState(enum.Enum):
    """Where a session is in its life, as its runtime sees it."""

    #: an open or create claimed the id: the lease is being taken and the log read or made;
    #: nothing runs yet, and other opens of the id wait (never two sessions on one log)
    CREATING = "creating"
    #: started: its supervisor sets up its actors and closes the log's open round, if any,
    #: before it first parks
    LIVE = "live"
    #: between runs: no task until the next command comes (which starts its supervisor
    #: again), or waiting for a running place under ``max_running_sessions``
    PARKED = "parked"
    #: its actors run (a turn, an approval, a compaction...), holding a running place under
    #: ``max_running_sessions``
    RUNNING = "running"
    #: leaving memory: being hibernated (the work already sent is still finished, without
    #: coming back to parked or running), or its actors ended (closed, failed, lease lost,
    #: stopped at once); its lease is being given back
    CLOSING = "closing"
    #: its actors stopped and its lease given back by a hibernation: only the id is kept;
    #: ``Runtime.open``/``send`` wake it (rebuilt from the log)
    HIBERNATED = "hibernated"
    #: gone (terminal): closed, or an open or create that started nothing
    CLOSED = "closed"
    #: gone (terminal): its actors stopped on a failure or a lost lease (its handle says why)
    FAILED = "failed"


_S = SlotState

#: every move a session's slot may make, by the state it leaves: the only such table
TRANSITIONS: Final[Mapping[SlotState, frozenset[SlotState]]] = MappingProxyType(
    {
        # started; or refused (busy, not found, corrupt, bad settings...) with nothing
        # started: a new id is forgotten, a hibernated one stays hibernated
        _S.CREATING: frozenset({_S.LIVE, _S.CLOSED, _S.HIBERNATED}),
        # parks once recovered; hibernated, or stopped at once (lease lost, interrupted, a
        # failure while recovering)
        _S.LIVE: frozenset({_S.PARKED, _S.CLOSING}),
        _S.PARKED: frozenset({_S.RUNNING, _S.CLOSING}),
        _S.RUNNING: frozenset({_S.PARKED, _S.CLOSING}),
        # a hibernation that failed on the way ends failed, not hibernated
        _S.CLOSING: frozenset({_S.CLOSED, _S.FAILED, _S.HIBERNATED}),
        # woken by an open (which may fail and leave it hibernated)
        _S.HIBERNATED: frozenset({_S.CREATING}),
        _S.CLOSED: frozenset(),
        _S.FAILED: frozenset(),
    }
)

#: the states of a live session (``Runtime.sessions``): started, not leaving
LIVE_STATES: Final = frozenset({_S.LIVE, _S.PARKED, _S.RUNNING})
# states that hold nothing but the id
_AT_REST: Final = frozenset({_S.HIBERNATED, _S.CLOSED, _S.FAILED})


class IllegalTransition(RuntimeError):
    """A session's slot was asked to move where ``TRANSITIONS`` does not allow."""

    def __init__(self, session_id: str, from_state: SlotState, to_state: SlotState) -> None:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[from_state])) or "none"
        super().__init__(
            f"session {session_id}: illegal state transition {from_state.value} -> "
            f"{to_state.value} (allowed from {from_state.value}: {allowed})"
        )
        self.session_id = session_id
        self.from_state = from_state
        self.to_state = to_state


@dataclass(slots=True, eq=False)
class SessionSlot:
    """Everything a runtime knows about one session id; only ``move`` changes ``state``. Leaving
    ``CREATING`` wakes whoever waits in ``wait_opened``."""

    id: str
    state: SlotState = SlotState.CREATING
    #: the handle its users hold (from ``LIVE`` until at rest)
    session: Session | None = None
    #: what it runs with: its identity merged with the runtime's overrides
    settings: Settings | None = None
    #: its writer lease, held from the open until given back on the way out
    lease: WriterLease | None = None
    #: cancels its actors at once (lease lost, or the runtime interrupted); only while a
    #: supervisor task runs (a parked session has none)
    stop: anyio.CancelScope | None = None
    #: starts its supervisor again when it is parked, or rings the running one
    wake: Callable[[], None] | None = None
    #: why it was stopped at once, when its lease was found lost
    lost: SessionLeaseLost | None = None
    #: this open wakes a hibernated session: if it fails, the session stays hibernated
    from_hibernation: bool = False
    #: the runtime is hibernating it: once stopped it rests hibernated (unless it failed)
    hibernating: bool = False
    #: seconds it had been idle when its hibernation began
    idle: float = 0.0
    _opened: anyio.Event | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.state is SlotState.CREATING:
            self._opened = anyio.Event()

    @property
    def live(self) -> bool:
        """Started and not leaving: what ``Runtime.sessions`` lists."""
        return self.state in LIVE_STATES

    def move(self, to: SlotState) -> None:
        """Move to state ``to``; raises ``IllegalTransition`` (nothing changed) when
        ``TRANSITIONS`` does not allow it."""
        left = self.state
        if to not in TRANSITIONS[left]:
            raise IllegalTransition(self.id, left, to)
        self.state = to
        if left is SlotState.CREATING and self._opened is not None:
            self._opened.set()
            self._opened = None
        if to is SlotState.CREATING:
            self._opened = anyio.Event()
        elif to in _AT_REST:
            self.session = self.settings = self.lease = self.stop = self.lost = self.wake = None
            self.from_hibernation = self.hibernating = False
            self.idle = 0.0

    async def wait_opened(self) -> None:
        """Wait until the open under way (``CREATING``) ends, started or not."""
        if self._opened is not None:
            await self._opened.wait()
