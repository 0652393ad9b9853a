"""The actors of a session: sampler, tool executor, compactor, and the shared persistence actor.

Private to the wheel: the facade wires them up; nothing here is public API. They talk only
through the typed messages of ``_messages``, over mailboxes and coalescing slots.
"""

from ._context import SessionContext
from ._interrupt import TurnInterrupt
from ._mailbox import Doorbell, Latch, Reply, Slot, mailbox
from ._messages import (
    Append,
    CommittedSnapshot,
    CompactNow,
    ContinueTurn,
    Decide,
    PlanOutcome,
    Protect,
    RunTools,
    SamplerCommand,
    TurnResult,
    UserTurn,
)
from .compactor import CompactorKept, run_compactor
from .persistence import run_persistence
from .sampler import Sampler
from .tool_executor import run_tool_executor

__all__ = [
    "Append",
    "CommittedSnapshot",
    "CompactNow",
    "CompactorKept",
    "ContinueTurn",
    "Decide",
    "Doorbell",
    "Latch",
    "PlanOutcome",
    "Protect",
    "Reply",
    "RunTools",
    "Sampler",
    "SamplerCommand",
    "SessionContext",
    "Slot",
    "TurnInterrupt",
    "TurnResult",
    "UserTurn",
    "mailbox",
    "run_compactor",
    "run_persistence",
    "run_tool_executor",
]
