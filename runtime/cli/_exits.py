"""What the command line says and returns when a command does not simply succeed.

Exit statuses, one meaning each (``EXIT_STATUSES``, docs/reference/exit-statuses.md), so scripts
can tell a busy session from a broken endpoint.

A user error is one line on stderr, never a traceback. A storage failure has a status of its
own because its fix is on the machine (free space, permissions), not in the command: a script
that retries on 3 or 4 must not retry into a full disk, and one that reports 2 as a typo must
not send the user to the options.
"""

from __future__ import annotations

import errno
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stowage.core import ModelError, SessionBusy, StoreError, StowageError

__all__ = [
    "EXIT_BUSY",
    "EXIT_CHECK_FAILED",
    "EXIT_ENDPOINT",
    "EXIT_INTERRUPTED",
    "EXIT_STOPPED",
    "EXIT_OK",
    "EXIT_STATUSES",
    "EXIT_STORE",
    "EXIT_USAGE",
    "error_line",
    "exit_status",
    "os_error_line",
    "stowage_error",
    "use_wire",
]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_ENDPOINT = 3
EXIT_BUSY = 4
EXIT_STORE = 5
EXIT_STOPPED = 6
EXIT_INTERRUPTED = 130

#: the table ``stowage --help`` ends with
EXIT_STATUSES = """exit statuses:
  0    ok
  1    a check failed (check, load)
  2    usage or configuration error (bad option or store, unknown session, refused input)
  3    the model endpoint failed (connection, 5xx, 429 after retries, auth, bad response)
  4    the session is busy (another process holds its writer lease) or its lease was lost
  5    the store failed (disk full, permissions, I/O error, database gone, a corrupt log)
  6    the turn stopped without an answer (compaction loop, cannot fit, round limit)
  130  interrupted (Ctrl-C); nothing half-done is written

the store: --store DIR | sqlite:///PATH | postgresql://... or $STOWAGE_STORE (default ./.stowage)"""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes, outermost first (a session's failure wraps what ended it)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__
    return seen


def stowage_error(exc: BaseException) -> StowageError | None:
    """The ``StowageError`` ``exc`` is, or the only one inside an exception group."""
    # the errors are imported when one is met: ``stowage --help`` loads none of the runtime
    from stowage.core import StowageError

    if isinstance(exc, StowageError):
        return exc
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return stowage_error(exc.exceptions[0])
    return None


def _store_failure(exc: StowageError) -> StoreError | None:
    """The store's own failure in ``exc``'s chain: a ``StoreError`` that is neither a usage
    error (an unknown or existing session) nor a lease (busy, fenced)."""
    from stowage.core import FencingError, SessionBusy, SessionExists, SessionNotFound, StoreError

    for error in _chain(exc):
        if isinstance(error, StoreError) and not isinstance(
            error, SessionNotFound | SessionExists | SessionBusy | FencingError
        ):
            return error
    return None


def exit_status(exc: StowageError) -> int:
    """The exit status for an error that ended a command (see the module docstring)."""
    from stowage.core import (
        ContextLengthExceeded,
        FencingError,
        ModelError,
        SessionBusy,
        SessionLeaseLost,
    )

    chain = _chain(exc)
    if any(isinstance(e, (SessionBusy, SessionLeaseLost, FencingError)) for e in chain):
        return EXIT_BUSY
    if any(isinstance(e, ContextLengthExceeded) for e in chain):
        return EXIT_STOPPED
    if any(isinstance(e, ModelError) for e in chain):
        return EXIT_ENDPOINT
    if _store_failure(exc) is not None:
        return EXIT_STORE
    return EXIT_USAGE


def error_line(exc: StowageError) -> str:
    """One line for stderr: what happened and, for a busy session, who holds it and what to do."""
    from stowage.core import ModelError, SessionBusy, SessionLeaseLost, SessionNotFound

    for error in _chain(exc):
        if isinstance(error, SessionBusy):
            return _busy_line(error)
        if isinstance(error, SessionLeaseLost):
            return (
                f"stowage: session {error.session_id} stopped: it lost its writer lease "
                f"({error.reason}); nothing more was written; another process may be writing "
                f"it now: run 'stowage check {error.session_id}' once it is free"
            )
        if isinstance(error, ModelError):
            line = _endpoint_line(error)
            if line is not None:
                return line
        if isinstance(error, SessionNotFound):
            return (
                "stowage: error: " + " ".join(str(error).split()) + "; 'stowage list' shows the "
                "sessions of this store (--store or $STOWAGE_STORE names another)"
            )
    failed = _store_failure(exc)
    if failed is not None:
        return _store_line(failed)
    return "stowage: error: " + " ".join(str(exc).split())


#: what to do about a failed write or read, by the operating system's reason
_STORE_FIXES = {
    errno.ENOSPC: "the disk is full: free space there",
    errno.EDQUOT: "the disk quota is used up: free space there",
    errno.EFBIG: "a file-size limit was reached (ulimit -f): raise it",
    errno.EACCES: "permission denied: make the store writable by this user",
    errno.EPERM: "not permitted: make the store writable by this user",
    errno.EROFS: "the file system is read-only: put the store on a writable one",
}


def _store_line(error: StoreError) -> str:
    """A storage failure in one line: what failed, why, and the fix; what was committed
    before it is in the log (a round is written whole or not at all)."""
    import sqlite3  # a failure is the only time its codes are read

    cause = error.__cause__
    fix = "fix the store"
    if isinstance(cause, OSError) and cause.errno in _STORE_FIXES:
        fix = _STORE_FIXES[cause.errno]
    elif isinstance(cause, sqlite3.Error) and cause.sqlite_errorcode == sqlite3.SQLITE_FULL:
        fix = _STORE_FIXES[errno.ENOSPC]  # SQLite says "database or disk is full"
    return (
        f"stowage: error: the session store failed: {' '.join(str(error).split())}; {fix}, "
        "then run the command again ('stowage check ID' shows the log is sound; what was "
        "committed before is in it)"
    )


def _busy_line(error: SessionBusy) -> str:
    holder = error.holder
    if holder is None:
        who = "another process"
    else:
        since = holder.since.isoformat(timespec="seconds")
        who = f"pid {holder.pid} on host {holder.host} (since {since})"
    return (
        f"stowage: session {error.session_id} is busy: {who} is writing it; wait for that "
        "process to finish or stop it, then run the command again"
    )


# the request a gateway error names: "(POST http://host/v1/chat/completions, HTTP 404)"
_REQUEST = re.compile(
    r"\((?P<method>[A-Z]+) (?P<url>\S+), (?:HTTP (?P<status>\d+)|no HTTP status)\)"
)


#: the variables that name the key and the endpoint of the wire the command talks to
_WIRE_VARIABLES = {"anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
_OPENAI_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL")
_wire_variables = _OPENAI_VARIABLES


def use_wire(wire_api: str) -> None:
    """The command talks to an endpoint of ``wire_api``: its errors name that wire's key and
    URL variables (``ANTHROPIC_API_KEY`` on the anthropic wire, ``OPENAI_API_KEY`` else)."""
    global _wire_variables
    _wire_variables = _WIRE_VARIABLES.get(wire_api, _OPENAI_VARIABLES)


def os_error_line(exc: BaseException) -> str | None:
    """One line for a file the user named that cannot be used (a missing folder, no permission, a
    directory where a file was meant): the path and why; None for anything else. Raises nothing."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return os_error_line(exc.exceptions[0])
    if not isinstance(exc, OSError) or exc.filename is None:
        return None
    why = exc.strerror or type(exc).__name__
    return f"stowage: error: {exc.filename}: {why}; name a path that can be used there"


def _endpoint_line(error: ModelError) -> str | None:
    """A line naming the URL (as the gateway redacted it) and the fix, for the failures a
    person can fix: a wrong URL, a server that is down, a refused key."""
    from stowage.core import ModelAuthError, ModelConnectionError

    found = _REQUEST.search(str(error))
    if found is None:
        return None
    url, status = found["url"], found["status"]
    if status == "404":
        return (
            f"stowage: error: the endpoint answered 404 Not Found for {found['method']} {url}: "
            "check --base-url (an OpenAI-compatible base URL usually ends in /v1) and --model"
        )
    if status is None and isinstance(error, ModelConnectionError):
        return (
            f"stowage: error: cannot connect to {url}: is the server running? "
            f"check --base-url (or {_wire_variables[1]})"
        )
    if isinstance(error, ModelAuthError):
        return (
            f"stowage: error: the endpoint refused the API key (HTTP {status}) for {url}: "
            f"check --api-key or {_wire_variables[0]}"
        )
    return None
