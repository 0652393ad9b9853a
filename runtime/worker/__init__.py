"""Workers that share one PostgreSQL store across processes and machines, and the client that
sends them messages.

``stowage worker`` runs a ``Worker``; ``stowage send`` (or ``await Client(url).send(id, text,
wait=True)``) queues a message with an id of its own, which the log records with the user item,
so that every message is answered exactly once whichever worker takes it, dies or takes over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from ._client import Client, Sent
    from ._errors import MessageFailed
    from ._messages import InboxMessage, new_message_id
    from ._options import WORKER_LIMITS, WorkerOptions
    from ._worker import Worker

__all__ = [
    "WORKER_LIMITS",
    "Client",
    "InboxMessage",
    "MessageFailed",
    "Sent",
    "Worker",
    "WorkerOptions",
    "new_message_id",
]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "Client": "._client",
    "Sent": "._client",
    "MessageFailed": "._errors",
    "InboxMessage": "._messages",
    "new_message_id": "._messages",
    "WorkerOptions": "._options",
    "WORKER_LIMITS": "._options",
    "Worker": "._worker",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
