"""The actors of a session and their small base: mailboxes, replies, coalescing slots.

One sampler, one tool executor and one compactor per live session; one persistence actor per
store, shared. They talk only through the typed messages of ``actors._messages``.
"""

from ._context import SessionContext
from ._mailbox import Mailbox, Reply, Slot, mailbox
from ._messages import (
    Append,
    CompactNow,
    Plan,
    PlanFailed,
    PlanOutcome,
    RoundCommitted,
    RunTools,
    SamplerCommand,
    TurnResult,
    UserTurn,
)
from .compactor import decide_for, run_compactor
from .persistence import run_persistence
from .sampler import Sampler, interrupted_output
from .tool_executor import run_tool_executor

__all__ = [
    "Append",
    "CompactNow",
    "Mailbox",
    "Plan",
    "PlanFailed",
    "PlanOutcome",
    "Reply",
    "RoundCommitted",
    "RunTools",
    "Sampler",
    "SamplerCommand",
    "SessionContext",
    "Slot",
    "TurnResult",
    "UserTurn",
    "decide_for",
    "interrupted_output",
    "mailbox",
    "run_compactor",
    "run_persistence",
    "run_tool_executor",
]
