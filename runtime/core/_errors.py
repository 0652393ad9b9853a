"""The one exception tree of stowage.

Exceptions from openai, httpx, aiofiles and database drivers are mapped at the boundary
(``raise ... from exc``) so that callers only ever catch these::

    StowageError
    ├── ConfigError                  bad settings or input from the user
    │   └── InvalidSessionId
    ├── StoreError
    │   ├── SessionNotFound
    │   ├── SessionExists
    │   ├── CorruptLogError          a bad record in the middle of a log (file and line named)
    │   ├── FencingError             a write from a worker whose lease is gone
    │   └── SessionBusy              another writer holds the session's lease (holder named)
    ├── ModelError
    │   ├── ModelConnectionError     transient: network, timeout, 5xx
    │   ├── RateLimitError           transient: 429, carries ``retry_after``
    │   ├── ContextLengthExceeded
    │   ├── ModelAuthError
    │   └── ModelResponseError       the provider answered something we cannot use
    ├── CompactionError
    │   └── ProtectedStateViolation  a plan would lose a protected entry
    └── SessionError
        ├── SessionClosed
        └── SessionFailed            the session's actors stopped on an error
"""

from __future__ import annotations

from ._store import LeaseHolder

__all__ = [
    "CompactionError",
    "ConfigError",
    "ContextLengthExceeded",
    "CorruptLogError",
    "FencingError",
    "InvalidSessionId",
    "ModelAuthError",
    "ModelConnectionError",
    "ModelError",
    "ModelResponseError",
    "ProtectedStateViolation",
    "RateLimitError",
    "SessionBusy",
    "SessionClosed",
    "SessionError",
    "SessionExists",
    "SessionFailed",
    "SessionNotFound",
    "StoreError",
    "StowageError",
]


class StowageError(Exception):
    """Raised for every failure stowage reports; the base of the tree above."""


class ConfigError(StowageError):
    """Raised when a setting or an argument is invalid; the message names it and the fix."""


class InvalidSessionId(ConfigError):
    """Raised when a session id has characters other than letters, digits, ``-`` and ``_``."""


class StoreError(StowageError):
    """Raised when a log store cannot read or write."""


class SessionNotFound(StoreError):
    """Raised when a session id has no log in the store."""


class SessionExists(StoreError):
    """Raised when creating a session whose log already exists."""


class CorruptLogError(StoreError):
    """Raised when a record that is not the last one cannot be decoded."""

    def __init__(self, message: str, *, path: str, line: int) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line


class FencingError(StoreError):
    """Raised when a write or renewal comes under a lease that was released or lost."""


class SessionBusy(StoreError):
    """Raised when another writer holds the session's lease; ``holder`` names it if known."""

    def __init__(self, session_id: str, holder: LeaseHolder | None, *, where: str = "") -> None:
        if holder is None:
            who = "another writer (its lock names no holder yet)"
        else:
            since = holder.since.isoformat(timespec="seconds")
            who = f"pid {holder.pid} on host {holder.host} since {since} ({holder.owner})"
        place = f" in {where}" if where else ""
        super().__init__(f"session {session_id!r}{place} is being written by {who}")
        self.session_id = session_id
        self.holder = holder


class ModelError(StowageError):
    """Raised when a model call fails."""

    transient: bool = False


class ModelConnectionError(ModelError):
    """Raised on a network failure, a timeout or a 5xx answer; worth retrying."""

    transient = True


class RateLimitError(ModelError):
    """Raised on a 429; ``retry_after`` is the server's hint in seconds, if it gave one."""

    transient = True

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ContextLengthExceeded(ModelError):
    """Raised when the provider says the request does not fit the model's context window."""


class ModelAuthError(ModelError):
    """Raised on a 401 or 403: the key is missing, wrong or not allowed this model."""


class ModelResponseError(ModelError):
    """Raised when a response cannot be used (bad request, malformed body, refused input)."""


class CompactionError(StowageError):
    """Raised when a compaction cannot be planned or applied."""


class ProtectedStateViolation(CompactionError):
    """Raised when a compaction plan would drop or alter a protected entry."""


class SessionError(StowageError):
    """Raised when a session cannot take the request."""


class SessionClosed(SessionError):
    """Raised when sending to a session that has been closed."""


class SessionFailed(SessionError):
    """Raised when a session's actors stopped on an error; ``__cause__`` holds it."""
