"""``stowage chat``: an interactive loop over one session.

Ctrl-C while a turn runs interrupts that turn the way ``Session.stream`` does when its reader
stops: the model stream is dropped, running tools get an "interrupted" output, the turn is
logged as interrupted and the session stays usable; ``[interrupted]`` is printed on its own
line. Ctrl-C at the prompt right after that (or twice at the prompt), or Ctrl-D, ends the
chat with status 0. Input is read from the event loop (never from a thread), so a Ctrl-C at
the prompt is seen at once and nothing is left blocked at exit.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import termios
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import anyio
from stowage.core import AssistantDelta, ModelError, ProtectedStateViolation
from stowage.facade import Session, TurnResult

from ._exits import error_line
from ._status import StatusLine, describe

__all__ = ["LineReader", "chat_loop"]

_HINT = "(Ctrl-C again or Ctrl-D to leave)"


class LineReader:
    """Lines from a file descriptor, read without blocking the event loop; None at EOF."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""
        self._eof = False
        # a regular file is always readable and cannot be polled: read it straight away
        self._plain_file = stat.S_ISREG(os.fstat(fd).st_mode)

    async def readline(self) -> str | None:
        while b"\n" not in self._buffer and not self._eof:
            if not self._plain_file:
                await anyio.wait_readable(self.fd)
            chunk = os.read(self.fd, 65536)
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        if not self._buffer:
            return None
        line, _, rest = self._buffer.partition(b"\n")
        self._buffer = rest
        return line.decode("utf-8", errors="replace")


async def chat_loop(
    session: Session,
    *,
    stdin_fd: int = 0,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Read a line, run it as a turn (streamed to ``out``), until EOF or a second Ctrl-C.
    Returns the exit status; raises what ends the session (``SessionFailed``, ...)."""
    out = out or sys.stdout
    err = err or sys.stderr
    interactive = os.isatty(stdin_fd)
    reader = LineReader(stdin_fd)
    status = StatusLine()
    print(f"session {session.id}; Ctrl-C stops a turn, Ctrl-D leaves", file=err)
    with _no_echoed_ctrl_c(stdin_fd if interactive else None):
        return await _loop(session, reader, status, interactive, out, err)


async def _loop(
    session: Session,
    reader: LineReader,
    status: StatusLine,
    interactive: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    scope: anyio.CancelScope | None = None
    pressed = 0  # Ctrl-C presses since the last line was entered

    async def watch() -> None:
        nonlocal pressed
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                pressed += 1
                if scope is not None:
                    scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        try:
            while True:
                if interactive:
                    err.write("> ")
                    err.flush()
                scope = reading = anyio.CancelScope()
                with reading:
                    line = await reader.readline()
                scope = None
                if reading.cancel_called:
                    # Ctrl-C at the prompt: the second in a row, or the first right after an
                    # interrupted turn, leaves
                    if pressed >= 2:
                        err.write("\n")
                        return 0
                    err.write(f"\n{_HINT}\n")
                    continue
                if line is None:  # Ctrl-D, or the end of piped input
                    if interactive:
                        err.write("\n")
                    return 0
                text = line.strip()
                if not text:
                    continue
                pressed = 0
                scope = turn = anyio.CancelScope()
                await _turn(session, text, turn, out, err, status)
                scope = None
        finally:
            status.hide()
            tg.cancel_scope.cancel()
    return 0  # the loop only ends by returning; this satisfies the task group's exit


@contextmanager
def _no_echoed_ctrl_c(fd: int | None) -> Iterator[None]:
    """The terminal does not echo ``^C`` (it would glue itself to the answer); restored after."""
    if fd is None:
        yield
        return
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHOCTL
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


async def _turn(
    session: Session,
    text: str,
    scope: anyio.CancelScope,
    out: TextIO,
    err: TextIO,
    status: StatusLine,
) -> None:
    """One turn, its answer streamed to ``out``; Ctrl-C (``scope`` cancelled) interrupts it."""
    at_line_start = True
    streamed = False

    def write(chunk: str) -> None:
        nonlocal at_line_start
        status.hide()
        out.write(chunk)
        out.flush()
        if chunk:
            at_line_start = chunk.endswith("\n")

    def end_line() -> None:
        if not at_line_start:
            write("\n")

    status.show("calling the model")
    try:
        with scope:
            async for event in session.stream(text):
                if isinstance(event, AssistantDelta):
                    streamed = True
                    write(event.text)
                elif isinstance(event, TurnResult):
                    if event.text and not streamed:
                        write(event.text)
                    if event.stopped != "answered":
                        end_line()
                        print(
                            f"[turn stopped: {event.stopped} after {event.rounds} rounds]", file=err
                        )
                else:
                    if describe(event) is not None and status.enabled:
                        end_line()  # the status line must not start after answer text
                    status.on_event(event)
    except (ModelError, ProtectedStateViolation) as exc:
        # the model failed this turn; nothing of it was written and the session goes on
        end_line()
        print(error_line(exc), file=err)
        return
    finally:
        status.hide()
    end_line()
    if scope.cancelled_caught:
        write("[interrupted]\n")
