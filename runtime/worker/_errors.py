"""What a sender of messages can be told beyond the store's errors: the message was given up."""

from __future__ import annotations

from stowage.core import StowageError

__all__ = ["MessageFailed"]


class MessageFailed(StowageError):
    """Raised when a worker gave up on a sent message (its turn hit the round limit, the model
    kept failing it, or it was malformed); ``reason`` is what the worker recorded."""

    def __init__(self, session_id: str, message_id: str, reason: str) -> None:
        super().__init__(f"session {session_id!r}: message {message_id!r} failed: {reason}")
        self.session_id = session_id
        self.message_id = message_id
        self.reason = reason
