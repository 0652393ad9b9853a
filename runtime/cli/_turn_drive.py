"""One turn of ``run`` or ``resume``, stoppable with Ctrl-C the way the chat's turns are."""

from __future__ import annotations

import signal
from collections.abc import Callable

import anyio
from stowage.core import Event
from stowage.facade import Session, TurnResult

__all__ = ["drive_turn"]


async def drive_turn(
    session: Session,
    text: str,
    *,
    pin: bool,
    on_event: Callable[[Event], None],
    on_interrupt: Callable[[], None],
) -> TurnResult | None:
    """Run one turn with ``text``, each of its events to ``on_event``; its result, or None when
    Ctrl-C interrupted it (``on_interrupt`` is called when the first one comes). Raises what
    ``Session.stream`` raises, and ``KeyboardInterrupt`` for a second Ctrl-C."""
    result: TurnResult | None = None
    turn = anyio.CancelScope()
    async with anyio.create_task_group() as tg:

        async def watch_ctrl_c() -> None:
            with anyio.open_signal_receiver(signal.SIGINT) as signals:
                async for _ in signals:
                    if turn.cancel_called:
                        raise KeyboardInterrupt
                    on_interrupt()
                    turn.cancel()

        tg.start_soon(watch_ctrl_c)
        with turn:
            # a cancel reaches the stream where it waits, so its own cleanup runs there
            async for event in session.stream(text, pin=pin):
                if isinstance(event, TurnResult):
                    result = event
                else:
                    on_event(event)
        tg.cancel_scope.cancel()
    return None if turn.cancelled_caught else result
