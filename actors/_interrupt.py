"""Stopping a running turn from outside: the asker's side of an interrupt.

The sampler is busy serving the turn, so an interrupt cannot be a command in its mailbox. The
asker holds a ``TurnInterrupt`` sent with the turn; the sampler and the tool executor run the
parts of a round that may be abandoned (the model stream, the tools) under ``guard`` scopes,
which the interrupt cancels. Writes to the log are never under a guard: what is written stays
whole, and the sampler closes the round (interrupted outputs) and the turn itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio

__all__ = ["TurnInterrupt"]


@dataclass(eq=False)
class TurnInterrupt:
    """Set once by the asker (``request``); read and obeyed by the session's actors."""

    _requested: bool = False
    _scopes: set[anyio.CancelScope] = field(default_factory=set)

    @property
    def requested(self) -> bool:
        """Whether the asker asked to stop the turn."""
        return self._requested

    def request(self) -> None:
        """Stop the turn: cancel every guarded part now running; idempotent, never waits."""
        self._requested = True
        for scope in tuple(self._scopes):
            scope.cancel()

    @contextmanager
    def guard(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope the interrupt cancels (at once if it was already requested)."""
        with anyio.CancelScope() as scope:
            if self._requested:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)
