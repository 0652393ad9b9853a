"""``stowage chat``: an interactive loop over one session.

On a terminal (stdin and stdout both) the input is prompt_toolkit's (``_chat_prompt``): line
editing, a history kept across chats, paste, completion of the slash commands; a turn that
stops for an approval asks "approve? [y/n]" inline and goes on. Otherwise (piped input, a
script) lines are read as they come, with no UI, and the slash commands work the same; a call
that awaits approval is then answered with ``/approve`` or ``/deny``.

Ctrl-C while a turn runs interrupts that turn the way ``Session.stream`` does when its reader
stops: the model stream is dropped, running tools get an "interrupted" output, the turn is
logged as interrupted and the session stays usable; ``[interrupted]`` is printed on its own
line. A slash command, and the rest of a turn after an approval (``Session.approve`` takes no
interrupt), run to their end: a Ctrl-C then only says so. At the prompt Ctrl-C clears the line; on an empty line it says how to leave, and a second
one (or the first right after an interrupted turn), or Ctrl-D, ends the chat with status 0.
Input is read from the event loop (never from a thread), so a Ctrl-C is seen at once and
nothing is left blocked at exit.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import termios
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Protocol, TextIO

import anyio
from stowage.core import Event, LogStore, ModelError, ProtectedStateViolation, Settings
from stowage.facade import Session, TurnResult

from ._chat_commands import (
    QUIT,
    ChatHost,
    Command,
    Outcome,
    PromptCancelled,
    Sessions,
    SessionSwitch,
    Subscribe,
    Unknown,
    parse_line,
    run_command,
)
from ._chat_view import StatusLine, TurnView, approval_line, footer_line
from ._exits import error_line
from ._sessions import read_turn_figures

__all__ = ["chat_loop", "confirm_new"]

_HINT = "(Ctrl-C again or Ctrl-D to leave)"
_APPROVE = "approve? [y/n] "


class _Input(Protocol):
    """Where the chat's lines come from: the terminal UI, or ``_PlainInput``."""

    async def line(self) -> str | None: ...

    async def ask(self, question: str) -> str | None: ...


async def chat_loop(
    session: Session,
    *,
    settings: Settings | None = None,
    subscribe: Subscribe | None = None,
    open_store: Callable[[], LogStore] | None = None,
    notices: Callable[[Event], str | None] | None = None,
    sessions: Sessions | None = None,
    stdin_fd: int = 0,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Read a line, run it as a turn (streamed to ``out``) or as a slash command, until EOF,
    ``/quit`` or a second Ctrl-C. Returns the exit status; raises what ends the session
    (``SessionFailed``, ...) and ``ConfigError`` when the terminal UI cannot be loaded."""
    out = out or sys.stdout
    err = err or sys.stderr
    interactive = os.isatty(stdin_fd)
    host = ChatHost(
        session=session,
        settings=settings,
        subscribe=subscribe,
        open_store=open_store,
        sessions=sessions,
    )
    current = [host]  # the chat's host, replaced when /fork, /rewind or /new move it
    view = TurnView(
        out=out,
        err=err,
        status=StatusLine(),
        history=lambda: current[0].session.history,
        answer_cap=settings.max_answer_chars if settings is not None else None,
    )
    if notices is not None and subscribe is not None:
        said = notices

        def notice(event: Event) -> None:
            line = said(event)
            if line is not None:
                view.say(line)  # a notice never prints over the spinner

        subscribe(notice)
    reader: _Input
    terminal = interactive and out.isatty()
    if terminal:
        # the terminal UI, only here: piped input never loads prompt_toolkit
        from ._chat_prompt import TerminalInput, history_file

        reader = TerminalInput(history=history_file(), pending=lambda: _waiting(current[0].session))
    else:
        reader = _PlainInput(stdin_fd, err, prompt=interactive)
    print(
        f"session {session.id}; Ctrl-C stops a turn, Ctrl-D leaves, /help lists commands", file=err
    )
    chat = _Chat(host, view, reader, terminal=terminal, current=current)
    with _quiet_terminal(stdin_fd if interactive else None, echo=not terminal):
        return await chat.run()


async def confirm_new(session_id: str) -> bool:
    """On a terminal: whether to start session ``session_id``, which has no log (Enter: yes).
    Raises ``ConfigError`` when the terminal UI cannot be loaded."""
    from ._chat_prompt import TerminalInput

    answer = await TerminalInput(history=None, pending=tuple).ask(
        f"no session {session_id} in this store; start it? [Y/n] "
    )
    return answer is not None and answer in ("", "y", "yes")


def _waiting(session: Session) -> Sequence[str]:
    return [call.call_id for call in session.pending_approvals]


class _PlainInput:
    """Lines from a file descriptor as they come, read without blocking the event loop (None at
    EOF); "> " on ``err`` first when stdin is a terminal."""

    def __init__(self, fd: int, err: TextIO, *, prompt: bool) -> None:
        self.fd = fd
        self._err = err
        self._prompt = prompt
        self._buffer = b""
        self._eof = False
        # a regular file is always readable and cannot be polled: read it straight away
        self._plain_file = stat.S_ISREG(os.fstat(fd).st_mode)

    async def line(self) -> str | None:
        if self._prompt:
            self._err.write("> ")
            self._err.flush()
        line = await self._readline()
        if line is None and self._prompt:
            self._err.write("\n")
        return line

    async def ask(self, question: str) -> str | None:
        return None  # never asked: a script's next line is not an answer

    async def _readline(self) -> str | None:
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


class _Chat:
    """The loop's state: the scope Ctrl-C cancels (the turn, or the plain prompt's read) and
    how many Ctrl-C came since the last line was entered."""

    def __init__(
        self,
        host: ChatHost,
        view: TurnView,
        reader: _Input,
        *,
        terminal: bool,
        current: list[ChatHost] | None = None,
    ) -> None:
        self._current = current if current is not None else [host]
        self._current[0] = host
        self.view = view
        self.reader = reader
        self.terminal = terminal
        self.scope: anyio.CancelScope | None = None
        self.pressed = 0
        self.in_command = False  # a command runs: it cannot be interrupted

    @property
    def host(self) -> ChatHost:
        return self._current[0]

    def _move_to(self, session: Session) -> None:
        """Go on with ``session`` (``/fork``, ``/rewind``, ``/new``)."""
        host = self.host
        settings = host.sessions.settings_of(session.id) if host.sessions else host.settings
        self._current[0] = replace(host, session=session, settings=settings)

    async def run(self) -> int:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_ctrl_c)
            try:
                if self.host.session.pending_approvals:
                    # a continued session whose turn stopped for a person: ask before anything
                    await self._approvals()
                while True:
                    try:
                        line = await self._read()
                    except PromptCancelled:
                        # the second in a row, or the first right after an interrupted turn
                        if self.pressed >= 2:
                            return 0
                        self.view.say(_HINT)
                        continue
                    if line is None:  # Ctrl-D, or the end of piped input
                        return 0
                    text = line.strip()
                    if text:
                        self.pressed = 0
                        if await self._enter(text) == QUIT:
                            return 0
            finally:
                self.view.status.hide()
                tg.cancel_scope.cancel()
        return 0  # the loop only ends by returning; this satisfies the task group's exit

    async def _watch_ctrl_c(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                self.pressed += 1
                if self.scope is not None:
                    self.scope.cancel()
                elif self.in_command:  # a command, or the rest of an approved turn
                    self.view.say("[Ctrl-C: this cannot be stopped part way; it goes on]")

    async def _read(self) -> str | None:
        """The next line. Raises ``PromptCancelled`` for Ctrl-C at the prompt."""
        if self.terminal:
            try:
                return await self.reader.line()
            except PromptCancelled:
                self.pressed += 1  # a key, not a signal, while the terminal UI reads
                raise
        self.scope = reading = anyio.CancelScope()
        with reading:
            line = await self.reader.line()
        self.scope = None
        if reading.cancel_called:
            self.view.end_line()
            raise PromptCancelled
        return line

    async def _enter(self, text: str) -> str | None:
        parsed = parse_line(text)
        result: Outcome
        if isinstance(parsed, Unknown):
            self.view.say(f"unknown command {parsed.name}: /help lists the commands")
            return None
        if isinstance(parsed, Command):
            result = await self._command(parsed)
        else:
            result = await self._turn(parsed.text)
        if isinstance(result, SessionSwitch):
            self._move_to(result.session)
        if isinstance(result, TurnResult) and result.stopped == "pending_approval":
            await self._approvals()
        return result if result == QUIT else None

    async def _command(self, command: Command) -> Outcome:
        self.in_command = True
        try:
            return await run_command(command, self.host, self.view)
        finally:
            self.in_command = False
            self.pressed = 0  # a Ctrl-C during a command was spent on it

    async def _turn(self, text: str) -> TurnResult | None:
        """One turn, its answer streamed; Ctrl-C (the scope cancelled) interrupts it."""
        view = self.view
        result: TurnResult | None = None
        self.scope = turn = anyio.CancelScope()
        view.begin()
        try:
            with turn:
                async for event in self.host.session.stream(text):
                    if isinstance(event, TurnResult):
                        result = event
                    else:
                        view.on_event(event)
        except (ModelError, ProtectedStateViolation) as exc:
            # the model failed this turn; nothing of it was written and the session goes on
            view.say(error_line(exc))
            return None
        finally:
            self.scope = None
            view.status.hide()
        if turn.cancelled_caught:
            view.interrupted()
            return None
        if result is not None:
            view.finish(result)
            await self._footer()
        return result

    async def _footer(self) -> None:
        """How full the session is now, in one line, from its log (``stowage context``'s
        figures)."""
        if self.host.open_store is None:
            return
        figures = await read_turn_figures(self.host.open_store(), self.host.session.id)
        if figures is not None:
            self.view.say(footer_line(figures))

    async def _approvals(self) -> None:
        """Ask about each call that awaits approval, inline, and go on with the turn; without
        the terminal UI, say how to answer instead."""
        session, view = self.host.session, self.view
        if not self.terminal:
            for call in session.pending_approvals:
                view.say(approval_line(call, session.approval_detail(call.call_id)))
                view.say(f"  answer with: /approve {call.call_id}  or  /deny {call.call_id}")
            return
        while session.pending_approvals:
            call = session.pending_approvals[0]
            view.say(approval_line(call, session.approval_detail(call.call_id)))
            answer = await self.reader.ask(_APPROVE)
            while answer is not None and answer not in ("y", "yes", "n", "no"):
                answer = await self.reader.ask("please answer y or n: " + _APPROVE)
            if answer is None:
                view.say(f"left waiting: /approve {call.call_id} or /deny {call.call_id} later")
                return
            approve = answer.startswith("y")
            result = await self._command(Command("/approve" if approve else "/deny", call.call_id))
            if not isinstance(result, TurnResult):
                return  # it failed, and said why


@contextmanager
def _quiet_terminal(fd: int | None, *, echo: bool) -> Iterator[None]:
    """The terminal does not echo ``^C`` (it would glue itself to the answer) and, under the
    terminal UI, nothing typed while a turn runs (the prompt shows it when it comes back);
    restored after."""
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
    if not echo:
        quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
