"""The actors of a session: sampler, tool executor, compactor, and the shared persistence actor.

Private to the wheel: the facade wires them up; nothing here is public API. They talk only
through the typed messages of ``_messages``, over mailboxes and coalescing slots.
"""

from ._context import SessionContext
from ._inbox import CompactorInbox
from ._interrupt import TurnInterrupt
from ._mailbox import Doorbell, Latch, Reply, Slot, mailbox
from ._messages import (
    Append,
    CompactNow,
    ContinueTurn,
    Decide,
    Milestone,
    Protect,
    RunTools,
    SamplerCommand,
    TurnResult,
    UserTurn,
    Verdict,
)
from ._queue import MailboxReceive, MailboxSend, open_mailbox
from .compactor import CompactorKept, run_compactor
from .persistence import run_persistence
from .sampler import Sampler
from .tool_executor import ExecutorInbox, run_tool_executor

__all__ = [
    "SessionContext",
    "CompactorInbox",
    "TurnInterrupt",
    "Doorbell", "Latch", "Reply", "Slot", "mailbox",
    "Append", "CompactNow", "ContinueTurn", "Decide", "Milestone", "Protect", "RunTools",
    "SamplerCommand", "TurnResult", "UserTurn", "Verdict",
    "MailboxReceive", "MailboxSend", "open_mailbox",
    "CompactorKept", "run_compactor",
    "run_persistence",
    "Sampler",
    "ExecutorInbox", "run_tool_executor",
]  # fmt: skip
