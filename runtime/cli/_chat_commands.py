"""The chat's slash commands: their table, how a typed line is read as one, and what each does on
the live session the chat holds.

The table and the parsing are pure, so the completer, ``/help`` and the loop read one table, and a test needs no terminal. A
line that starts with ``/`` is a command and never goes to the model, even when no command has
that name (a mistyped ``/compat`` must not become a turn); ``//`` sends a line that starts
with a slash.

Each goes through the same public calls as the command of the same name (``stowage context``,
``export``, ``compact``, ``protect``, ``approve``, ``deny``): the session's own methods for
what changes it, and a second, read-only opening of its store for what only reads the log
(``context_main`` and ``export_main`` themselves, so the figures are the ones ``stowage
context`` prints). An answer to an approval continues the turn here, its events drawn like a
turn's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stowage.core import (
    CompactionSkipped,
    ConfigError,
    Event,
    LogStore,
    ModelError,
    ProtectedStateViolation,
    Settings,
    redact_url,
    render,
)
from stowage.facade import Session, TurnResult

from ._chat_view import TurnView, call_text
from ._exits import error_line
from ._export import export_main
from ._sessions import context_main

__all__ = [
    "COMMANDS",
    "ChatHost",
    "Command",
    "Message",
    "PromptCancelled",
    "QUIT",
    "SessionSwitch",
    "Sessions",
    "SlashCommand",
    "Subscribe",
    "Unknown",
    "decide",
    "help_lines",
    "matching",
    "parse_line",
    "run_command",
]


@dataclass(frozen=True, slots=True)
class SlashCommand:
    """One command: what it takes (its name, with the slash, first) and what it does."""

    usage: str
    help: str

    @property
    def name(self) -> str:
        return self.usage.split()[0]


COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("/help", "this list"),
    SlashCommand(
        "/context", "what fills the window: tokens by part, and what compaction does next"
    ),
    SlashCommand("/compact [FOCUS]", "compact now; FOCUS is what the summary must keep in full"),
    SlashCommand("/protect TEXT", "add a constraint that every compaction keeps"),
    SlashCommand(
        "/approve [CALL]",
        "run a call that awaits approval (default: the first) and go on with the turn",
    ),
    SlashCommand(
        "/deny [CALL]",
        "refuse a call that awaits approval (default: the first) and go on with the turn",
    ),
    SlashCommand(
        "/export [PATH]",
        "write the session to PATH (default ID.md; a .jsonl path gets the log records)",
    ),
    SlashCommand(
        "/fork [ROUND]",
        "go on in a copy of this session from ROUND (default: now); this one is kept",
    ),
    SlashCommand(
        "/rewind ROUND",
        "go on from the end of ROUND; later rounds stay in the log as a discarded branch",
    ),
    SlashCommand("/new", "start a new session (this one is kept)"),
    SlashCommand("/model", "the model and endpoint this session uses"),
    SlashCommand("/quit", "leave the chat (so do Ctrl-D, Ctrl-C twice)"),
)

_BY_NAME = {command.name: command for command in COMMANDS}


class PromptCancelled(Exception):
    """Raised by a prompt when Ctrl-C is pressed on an empty line."""


@dataclass(frozen=True, slots=True)
class Message:
    """A line for the model."""

    text: str


@dataclass(frozen=True, slots=True)
class Command:
    """A known command and the text after its name (stripped; empty when none)."""

    name: str
    argument: str


@dataclass(frozen=True, slots=True)
class Unknown:
    """A line that starts with a slash and names no command."""

    name: str


def parse_line(text: str) -> Message | Command | Unknown:
    """What the (stripped, non-empty) line ``text`` asks for. Raises nothing."""
    if text.startswith("//"):
        return Message(text[1:])
    if not text.startswith("/"):
        return Message(text)
    name, _, argument = text.partition(" ")
    if "\n" in name:  # a pasted block that starts with a command word on its own line
        name, _, rest = name.partition("\n")
        argument = f"{rest} {argument}" if argument else rest
    name = name.lower()
    if name not in _BY_NAME:
        return Unknown(name)
    return Command(name, argument.strip())


def matching(typed: str) -> tuple[SlashCommand, ...]:
    """The commands whose names start with ``typed`` (a slash and a word, nothing after it);
    none for anything else. Raises nothing."""
    if not typed.startswith("/") or any(c.isspace() for c in typed):
        return ()
    return tuple(c for c in COMMANDS if c.name.startswith(typed.lower()))


def help_lines() -> list[str]:
    """``/help``: each command with what it does, then the keys."""
    width = max(len(c.usage) for c in COMMANDS)
    lines = [f"  {c.usage:<{width}}  {c.help}" for c in COMMANDS]
    lines += [
        "  Enter sends; Esc Enter (or Alt-Enter) starts a new line; a paste keeps its lines.",
        "  Up and Down walk the history; Ctrl-C stops a turn, clears the line, twice leaves.",
        "  A line starting with // is sent with one slash.",
    ]
    return lines


#: adds a subscriber to the runtime's events; returns the function that removes it
Subscribe = Callable[[Callable[[Event], None]], Callable[[], None]]

#: what ``run_command`` returns for ``/quit``
QUIT = "quit"

#: the errors a command reports in one line and the chat goes on after (a session that
#: failed, closed or lost its lease ends the chat instead)
_REPORTED = (ConfigError, ModelError, ProtectedStateViolation)


class Sessions(Protocol):
    """How the chat moves to another session of its runtime (``/fork``, ``/rewind``,
    ``/new``): each returns the live session the chat goes on with."""

    async def fork(self, session: Session, at_round: int | None) -> Session: ...

    async def rewind(self, session: Session, to_round: int) -> Session: ...

    async def new(self, session: Session) -> Session: ...

    def settings_of(self, session_id: str) -> Settings: ...


@dataclass(frozen=True, slots=True)
class SessionSwitch:
    """What ``run_command`` returns when the chat goes on with another session."""

    session: Session


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatHost:
    """What the commands use besides the session: the settings it runs with (``/model``),
    the runtime's events (an approved turn's progress, a compaction's figures), a way to
    open its store again to read the log (``/context``, ``/export``) and its runtime's other
    sessions (``/fork``, ``/rewind``, ``/new``); each may be missing."""

    session: Session
    settings: Settings | None = None
    subscribe: Subscribe | None = None
    open_store: Callable[[], LogStore] | None = None
    sessions: Sessions | None = None


def _watch(host: ChatHost, subscriber: Callable[[Event], None]) -> Callable[[], None]:
    """``subscriber`` gets the session's events until the returned function is called."""
    if host.subscribe is None:
        return lambda: None
    session_id = host.session.id

    def deliver(event: Event) -> None:
        if getattr(event, "session_id", None) == session_id:
            subscriber(event)

    return host.subscribe(deliver)


async def decide(host: ChatHost, view: TurnView, call_id: str, *, approve: bool) -> TurnResult:
    """Approve (or deny) call ``call_id`` and draw the rest of the turn; returns its result.
    Raises what ``Session.approve`` raises (``ApprovalError`` for a call that awaits none)."""
    if not approve:  # a denied call never runs, so no tool line would say what became of it
        for call in host.session.pending_approvals:
            if call.call_id == call_id:
                view.say(f"  !! {call_text(call.name, call.arguments)}: denied")
    view.begin("running the approved call" if approve else "going on without the call")
    unsubscribe = _watch(host, view.on_event)
    try:
        if approve:
            result = await host.session.approve(call_id)
        else:
            result = await host.session.deny(call_id)
    finally:
        unsubscribe()
        view.status.hide()
    view.finish(result)
    return result


Outcome = TurnResult | SessionSwitch | str | None


async def run_command(command: Command, host: ChatHost, view: TurnView) -> Outcome:
    """Do ``command``: ``QUIT`` for ``/quit``, the turn's result for an answered approval,
    a ``SessionSwitch`` for ``/fork``, ``/rewind`` and ``/new``, else None. A bad argument
    or a failed model call is one line and the chat goes on; raises what ends the session
    (``SessionFailed``, ``SessionLeaseLost``, ...)."""
    try:
        return await _run(command, host, view)
    except _REPORTED as exc:
        view.say(error_line(exc))
    except OSError as exc:  # /export to a path that cannot be written
        view.say(f"stowage: error: {exc.strerror or exc}: {exc.filename or command.argument}")
    return None


def _round_number(command: Command, *, required: bool) -> int | None:
    """The ROUND ``command`` names. Raises ``ConfigError`` for a word that is not one."""
    word = command.argument
    if not word and not required:
        return None
    if not word.isdigit() or int(word) < 1:
        raise ConfigError(
            f"{command.name} takes a round number from 1 ('stowage show' numbers the rounds), "
            f"not {word!r}"
            if word
            else f"{command.name} needs a round: {command.name} ROUND"
        )
    return int(word)


async def _switch(command: Command, host: ChatHost, view: TurnView) -> SessionSwitch:
    """``/fork [ROUND]``, ``/rewind ROUND``, ``/new``: the session the chat goes on with."""
    if host.sessions is None:
        raise ConfigError(f"{command.name} needs the chat's runtime, which this chat lacks")
    old = host.session
    view.status.hide()
    if command.name == "/fork":
        new = await host.sessions.fork(old, _round_number(command, required=False))
        view.say(f"forked {old.id} as {new.id}; this chat goes on in {new.id} ({old.id} is kept)")
    elif command.name == "/rewind":
        to_round = _round_number(command, required=True)
        assert to_round is not None
        new = await host.sessions.rewind(old, to_round)
        view.say(
            f"{old.id} goes on from the end of round {to_round}; the rounds after it stay in "
            "the log as a discarded branch ('stowage show' marks them)"
        )
    else:
        new = await host.sessions.new(old)
        view.say(f"new session {new.id} ({old.id} is kept: 'stowage chat {old.id}' goes on)")
    return SessionSwitch(new)


async def _run(command: Command, host: ChatHost, view: TurnView) -> Outcome:
    session, argument = host.session, command.argument
    match command.name:
        case "/quit":
            return QUIT
        case "/fork" | "/rewind" | "/new":
            return await _switch(command, host, view)
        case "/help":
            for line in help_lines():
                view.say(line, on_out=True)
        case "/model":
            view.say(_model_line(host.settings), on_out=True)
        case "/context" | "/export":
            await _read_only(command, host, view)
        case "/compact":
            await _compact(host, view, argument or None)
        case "/protect":
            if not argument:
                raise ConfigError("/protect needs the text of the constraint: /protect TEXT")
            state = await session.protect(add_constraints=[argument])
            view.say(render(state) or "(no protected state)", on_out=True)
        case "/approve" | "/deny":
            waiting = [call.call_id for call in session.pending_approvals]
            if not waiting:
                view.say("no call awaits approval")
                return None
            return await decide(
                host, view, argument or waiting[0], approve=command.name == "/approve"
            )
    return None


def _model_line(settings: Settings | None) -> str:
    if settings is None:
        return "model: not known to this chat"
    if settings.model == "scripted":
        endpoint = "offline (the scripted model)"
    else:
        endpoint = f"{redact_url(settings.base_url) or 'the default OpenAI endpoint'}"
        endpoint += f" ({settings.wire_api} API)"
    window = f"  window {settings.context_window:,}" if settings.context_window else ""
    return f"model {settings.model}  endpoint {endpoint}{window}"


async def _read_only(command: Command, host: ChatHost, view: TurnView) -> None:
    if host.open_store is None:
        raise ConfigError(f"{command.name} needs the session's store, which this chat lacks")
    view.status.hide()
    view.end_line()
    session_id = host.session.id
    if command.name == "/context":
        args = argparse.Namespace(session=session_id, json=False)
        await context_main(args, host.open_store())
    else:
        path = command.argument or f"{session_id}.md"
        fmt = "jsonl" if Path(path).suffix == ".jsonl" else "markdown"
        args = argparse.Namespace(session=session_id, format=fmt, output=path)
        await export_main(args, host.open_store())
    sys.stdout.flush()


async def _compact(host: ChatHost, view: TurnView, focus: str | None) -> None:
    skipped: list[str] = []

    def on_event(event: Event) -> None:
        if isinstance(event, CompactionSkipped):
            skipped.append(event.reason)
        view.on_event(event)

    view.begin("compacting")
    unsubscribe = _watch(host, on_event)
    try:
        done = await host.session.compact(focus)
    finally:
        unsubscribe()
        view.status.hide()
    if not done:
        view.say("nothing compacted" + (f": {skipped[-1]}" if skipped else ""))
    elif host.subscribe is None:  # else the runtime's notice has said it, with its figures
        view.say("compacted")
