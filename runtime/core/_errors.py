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
    │   ├── ContextLengthExceeded    carries the figures the provider stated, if any
    │   │   └── CompactionLoop       a turn re-reads what its compactions absorbed
    │   ├── ModelAuthError
    │   └── ModelResponseError       the provider answered something we cannot use
    │       ├── IncompleteResponse   transient: no finish marker, no choices, a cut body
    │       └── ResponseTooLarge     transient: an answer past ``max_answer_chars``
    ├── CompactionError
    │   └── ProtectedStateViolation  a plan would lose a protected entry
    └── SessionError
        ├── SessionClosed
        ├── SessionFailed            the session's actors stopped on an error
        ├── SessionLeaseLost         the session lost its writer lease and stopped writing
        └── DescriptorLimitReached   a session not started: open descriptors near RLIMIT_NOFILE
"""

from __future__ import annotations

from ._store import LeaseHolder

__all__ = [
    "CompactionError", "DescriptorLimitReached", "CompactionLoop", "ConfigError",
    "ContextLengthExceeded", "CorruptLogError", "FencingError", "IncompleteResponse",
    "InvalidSessionId", "ModelAuthError", "ModelConnectionError", "ModelError",
    "ModelResponseError", "ProtectedStateViolation", "RateLimitError", "ResponseTooLarge",
    "SessionBusy", "SessionClosed", "SessionError", "SessionExists", "SessionFailed",
    "SessionLeaseLost", "SessionNotFound", "StoreError", "StowageError",
]  # fmt: skip


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
    #: seconds the server asked us to wait before trying again (429s, some 5xx), if it did
    retry_after: float | None = None


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
    """Raised when the provider says the request does not fit the model's context window.

    ``tokens`` is the input count the provider stated for the refused request and ``limit``
    the window it stated, when its message gave them (None otherwise).
    """

    def __init__(
        self, message: str, *, tokens: int | None = None, limit: int | None = None
    ) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


class CompactionLoop(ContextLengthExceeded):
    """Raised when a turn keeps re-issuing tool calls whose outputs its compactions absorbed:
    the window is too small for what the turn reads, so the turn stops."""


class ModelAuthError(ModelError):
    """Raised on a 401 or 403: the key is missing, wrong or not allowed this model."""


class ModelResponseError(ModelError):
    """Raised when a response cannot be used (bad request, malformed body, refused input)."""


class IncompleteResponse(ModelResponseError):
    """Raised when a response ended before it said it was done (no finish marker, no choices,
    a cut or unreadable body); nothing of it is used, and it is retried like a 5xx."""

    transient = True


class ResponseTooLarge(ModelResponseError):
    """Raised when an answer's text and call arguments pass ``max_answer_chars``."""

    # nothing of it was written, and a model that ran away once may not the next time
    transient = True


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


class SessionLeaseLost(SessionError):
    """Raised when a session's writer lease was lost (taken over by another writer, or a
    renewal or an append was fenced): that session stopped without writing anything more."""

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(
            f"session {session_id!r} lost its writer lease and stopped, writing nothing more: "
            f"{reason}"
        )
        self.session_id = session_id
        self.reason = reason


class DescriptorLimitReached(SessionError):
    """Raised when a session would start while the process's open descriptors are within
    ``reserve`` of its limit (``RLIMIT_NOFILE``): nothing was started or written."""

    def __init__(self, session_id: str, *, in_use: int, limit: int, reserve: int) -> None:
        super().__init__(
            f"session {session_id!r} was not started: this process has {in_use} file "
            f"descriptors open and its limit (RLIMIT_NOFILE) is {limit}, of which {reserve} are "
            "kept for the sessions already live; raise the limit (`ulimit -n`, LimitNOFILE= in "
            "a systemd unit) or let idle sessions hibernate (idle_timeout), then try again"
        )
        self.session_id = session_id
        self.in_use = in_use
        self.limit = limit
        self.reserve = reserve
