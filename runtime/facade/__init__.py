"""The facade users hold: ``Runtime`` hosts sessions and their actors, ``Session`` is one of them."""

from stowage.actors import TurnResult

from ._identity import session_identity
from ._runtime import Runtime
from ._session import Session

__all__ = [
    "Runtime",
    "Session",
    "TurnResult",
    "session_identity",
]
