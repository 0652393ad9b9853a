"""``stowage run``, ``resume`` and ``chat``: the commands that run turns.

``run`` always starts a session, ``resume`` continues one (its recorded model, endpoint and
tools; typed options override them, recorded), ``chat`` does either and goes on reading lines.
A turn of ``run``/``resume`` is drawn as the chat draws it (``_chat_view.TurnView``: the answer
on stdout, the status line and notices on stderr, never over each other; stdout that is not a
terminal gets the committed answer once, when the turn ends, see there) or, with ``--json``,
written as JSON lines (``_json_stream``); Ctrl-C interrupts it and logs it as interrupted
(``_drive_turn``). ``resume`` without an id asks which session on a terminal
(``_chat_prompt.pick_session``) and is a usage error elsewhere.

A turn of ``run`` or ``resume`` runs through ``Session.stream``. The first SIGINT cancels the scope that reads the
stream, which interrupts the turn as ``Session.stream`` promises: the model stream is dropped,
running tools get an "interrupted" output, and the turn is logged as interrupted, so the next
``resume`` starts a new turn after a closed one instead of finding the old one open. A second
SIGINT while that is written ends the process at once (``KeyboardInterrupt``: the runtime
writes nothing half-done).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ._store_args import open_cli_store, reader_store, settings_from, store_fields, store_label

if TYPE_CHECKING:
    from collections.abc import Callable

    from stowage.core import Event, LogStore, Settings
    from stowage.facade import Runtime, Session, TurnResult

    from ._chat_view import StatusLine, TurnView

__all__ = [
    "chat_main",
    "message_text",
    "notice_line",
    "resume_main",
    "run_main",
    "show_status",
    "take_down_status",
]


def message_text(args: argparse.Namespace) -> str:
    """The message a turn sends: MESSAGE, stdin for ``-``, or ``--file PATH``. Raises
    ``ConfigError`` (nothing is opened or written) for both or neither given, an unreadable file, or
    an empty message."""
    from stowage.core import ConfigError

    message, path = args.message, getattr(args, "file", None)
    if path is not None and message is not None:
        raise ConfigError("give the message as MESSAGE, '-' (stdin) or --file PATH, not two")
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--file {path}: cannot read it: {exc}") from None
    elif message == "-":
        text = sys.stdin.read()
    else:
        text = message or ""
    if not text.strip():
        raise ConfigError(
            "empty message: nothing to send (give MESSAGE, '-' to read stdin, or --file PATH)"
        )
    return text


#: the status line of the command (drawn only when stderr is a terminal) and the view that
#: draws around it; made on first use, since they need rich
_STATUS: StatusLine | None = None
_VIEW: TurnView | None = None


def _status_line() -> StatusLine:
    global _STATUS
    if _STATUS is None:
        from ._chat_view import StatusLine

        _STATUS = StatusLine()
    return _STATUS


def show_status(text: str) -> None:
    """Put ``text`` on the running turn's status line (a retry's wait), where it cannot cover
    the answer; nothing when no turn is drawn."""
    if _VIEW is not None:
        _VIEW.show_status(text)


def take_down_status() -> None:
    """Take the status line down (the command ends)."""
    if _STATUS is not None:
        _STATUS.hide()


def notice_line(event: Event) -> str | None:
    """What a turn says on stderr besides its status line: compactions, repairs, overrides
    (None for any other event)."""
    from stowage.core import HistoryCompacted, LogRepaired, Microcompacted, SettingsChanged

    from ._run_options import repair_notice, settings_notice

    if isinstance(event, HistoryCompacted):
        return (
            f"[compacted ({event.kind}) at round {event.round}: tokens {event.tokens_before} -> "
            f"{event.tokens_after}{' (estimated)' if event.estimated else ''}, removed "
            f"{event.removed}, retained {event.retained}; {event.reason}]"
        )
    if isinstance(event, SettingsChanged):
        return settings_notice(event)
    if isinstance(event, Microcompacted):
        return f"[microcompacted {event.stubbed} tool outputs: {event.reason}]"
    if isinstance(event, LogRepaired):
        return repair_notice(event)
    return None


def _say_notices(event: Event) -> None:
    line = notice_line(event)
    if line is not None:
        take_down_status()
        print(line, file=sys.stderr)


def say_pending(session: Session, store: str) -> None:
    """Each call awaiting approval, with its tool, arguments, what it will do and the exact
    commands."""
    import shlex

    where = f" --store {shlex.quote(store)}"
    session_id = session.id
    for call in session.pending_approvals:
        args = call.arguments if len(call.arguments) <= 300 else call.arguments[:300] + "…"
        print(f"[awaiting approval: call {call.call_id}: {call.name}({args})]", file=sys.stderr)
        for row in (session.approval_detail(call.call_id) or "").splitlines():
            print(f"    {row}", file=sys.stderr)
        print(
            f"  stowage approve {session_id} {call.call_id}{where}\n"
            f"  stowage deny {session_id} {call.call_id}{where} --reason '…'",
            file=sys.stderr,
        )


async def runtime_for(args: argparse.Namespace, store: LogStore, session_id: str | None) -> Runtime:
    """The runtime a command runs a session with: a continued session (``session_id``) with
    its recorded identity and tools (typed options override them, recorded), a new one with
    the options and configuration (its tools source is then recorded). Closes ``store`` and
    raises ``ConfigError`` (and what reading the session raises) when it cannot be built."""
    from stowage.core import validate_session_id
    from stowage.facade import Runtime
    from stowage.model import probe_endpoint

    from ._run_options import runtime_as_the_session, session_tools

    if session_id is not None:
        # the tools it recorded too (--tools-from, --mcp): typed, they are an override
        return await runtime_as_the_session(
            args, store, validate_session_id(session_id), **store_fields(args)
        )
    try:
        settings = settings_from(args)
        if settings.model != "scripted" and (settings.api_key or settings.base_url):
            # a server that is down, refuses the key or is not at this URL: say so before a
            # new session is written for it, so failed attempts leave no logs behind
            await probe_endpoint(settings.base_url, settings.api_key, wire_api=settings.wire_api)
        tools, servers = session_tools(settings)
    except BaseException:
        await store.aclose()
        raise
    return Runtime(settings, store=store, tools=tools, mcp=servers)


async def _new_session(rt: Runtime, args: argparse.Namespace, session_id: str | None) -> Session:
    """A new session with the options' objective and constraints, and the instructions of
    AGENTS.md (or ``--agents FILE``) after its system message."""
    from ._agents import system_with_agents

    system = system_with_agents(rt.settings.system, getattr(args, "agents", None))
    return await rt.create(
        session_id,
        system=system,
        objective=getattr(args, "objective", None),
        constraints=getattr(args, "constraint", None) or (),
    )


def turn_exit(stopped: str) -> int:
    """The exit status of ``run``/``resume`` for a turn that ended ``stopped``: 6 when it
    stopped without an answer, 130 when Ctrl-C interrupted it, else 0."""
    from ._exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_STOPPED

    if stopped == "round_limit":
        return EXIT_STOPPED
    if stopped == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK


async def run_main(args: argparse.Namespace) -> int:
    """``run``: always a new session; an id that exists is refused (``resume`` continues it)."""
    from stowage.core import SessionExists, validate_session_id

    if args.session is not None:
        session_id = validate_session_id(args.session)
        store = open_cli_store(args)  # a new store is fine: run creates it
        try:
            exists = await store.exists(session_id)
        finally:
            await store.aclose()
        if exists:
            raise SessionExists(
                f"session {session_id} already exists; continue it with "
                f"'stowage resume {session_id} MESSAGE' (or pick a new id)"
            )
    return await _run(args, resume=False)


async def _last_session(args: argparse.Namespace) -> str:
    from ._sessions import last_active_session

    store = reader_store(args)
    try:
        return await last_active_session(store)
    finally:
        await store.aclose()


def _on_terminal() -> bool:
    return os.isatty(0) and os.isatty(1)


async def resume_main(args: argparse.Namespace) -> int:
    """``resume ID MESSAGE`` or ``resume --last MESSAGE``; without MESSAGE on a terminal the
    session goes on in the chat, and without ID too a picker asks which one first."""
    from stowage.core import ConfigError

    if args.last:
        if args.message is not None:
            raise ConfigError("resume --last takes MESSAGE only (not an ID too)")
        args.message, args.session = args.session, await _last_session(args)
        print(f"session: {args.session}", file=sys.stderr)
    needs_message = args.message is None and getattr(args, "file", None) is None
    if args.session is None or needs_message:
        if not _on_terminal():
            raise ConfigError(
                "resume takes ID MESSAGE, or --last MESSAGE (or --file PATH for MESSAGE); "
                "'stowage list' shows the sessions of this store"
            )
        if args.session is None:
            from ._chat_prompt import pick_session

            picked = await pick_session(reader_store(args))
            if picked is None:
                return 0
            args.session = picked
        args.last = False
        return await chat_main(args, continuing=True)
    return await _run(args, resume=True)


async def _holds(store: LogStore, session_id: str | None) -> bool:
    """Whether ``store`` holds session ``session_id``; the store is closed when that fails."""
    from stowage.core import validate_session_id

    try:
        return session_id is not None and await store.exists(validate_session_id(session_id))
    except BaseException:
        await store.aclose()
        raise


async def _run(args: argparse.Namespace, *, resume: bool) -> int:

    from ._run_options import refuse_oversized, trace_if_configured

    _status_line()  # rich: a missing [cli] extra is said before anything is opened
    args.message = message_text(args)  # refused before anything is opened
    store = open_cli_store(args)
    # continuing runs with the session's recorded identity; typed options override it
    continuing = resume or await _holds(store, args.session)
    async with await runtime_for(args, store, args.session if continuing else None) as rt:
        settings = rt.settings
        unsubscribe = rt.subscribe(_say_notices)  # what opening says: repairs, overrides
        trace_if_configured(rt, settings)
        if not continuing:
            # a message that cannot fit is refused before a new session's log exists
            refuse_oversized(args.message, settings, rt.tools.specs())
        if continuing:
            session = await rt.resume(args.session)
        else:
            session = await _new_session(rt, args, args.session)
            if args.session is None:  # the id was made here: say it, and where the log is
                print(f"session: {session.id}", file=sys.stderr)
                print(f"store: {store_label(args)}", file=sys.stderr)
        unsubscribe()
        # with the window the session runs with (recorded, or found when it was made)
        refuse_oversized(args.message, rt.settings_of(session.id), rt.tools.specs())
        if resume or args.session is not None:
            # the user's word, logged before the turn; repeating an existing entry is a no-op
            await session.protect(objective=args.objective, add_constraints=args.constraint)
        if getattr(args, "json", False):
            return await _json_turn(args, session)
        runs_with = rt.settings_of(session.id)
        result = await _drawn_turn(
            args, session, stream=runs_with.stream, answer_cap=runs_with.max_answer_chars
        )
        if result is None:
            return turn_exit("interrupted")
        if result.stopped == "pending_approval":
            say_pending(session, store_label(args))
    return turn_exit(result.stopped)


class _Gone:
    """Where the answer goes once stdout's reader left (``| head -1``): the turn goes on."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False


async def _drawn_turn(
    args: argparse.Namespace, session: Session, *, stream: bool, answer_cap: int
) -> TurnResult | None:
    """One turn drawn on the terminal: the answer on stdout (streamed to a terminal when
    ``stream``, at most ``answer_cap`` characters of it; else written once, when committed),
    the status line, tool lines and notices on stderr. None when Ctrl-C interrupted it."""
    global _VIEW
    from stowage.core import AssistantDelta

    from ._chat_view import TurnView

    status = _status_line()
    view = TurnView(
        out=sys.stdout,
        err=sys.stderr,
        status=status,
        history=lambda: session.history,
        tool_lines=status.enabled,
        answer_cap=answer_cap,
    )
    _VIEW = view

    def on_event(event: Event) -> None:
        if isinstance(event, AssistantDelta) and not stream:
            return
        try:
            line = notice_line(event)
            if line is not None:
                view.say(line)
            view.on_event(event)
        except BrokenPipeError:
            view.out = _Gone()  # type: ignore[assignment]

    view.begin()
    try:
        result = await _drive_turn(
            session,
            args.message,
            pin=args.pin,
            on_event=on_event,
            on_interrupt=lambda: view.say("[interrupting the turn: Ctrl-C again to quit now]"),
        )
    finally:
        _VIEW = None
        status.hide()
    try:
        if result is None:
            view.interrupted(on_out=False)
        else:
            view.finish(result)
    except BrokenPipeError:
        view.out = _Gone()  # type: ignore[assignment]
    return result


async def _json_turn(args: argparse.Namespace, session: Session) -> int:
    """One turn as JSON lines on stdout (``--json``); returns the exit status."""
    from stowage.core import StowageError

    from ._exits import exit_status
    from ._json_stream import JsonTurn, error_text, stopped_reason
    from ._sessions import read_turn_figures

    lines = JsonTurn(out=sys.stdout, session_id=session.id, history=lambda: session.history)
    lines.begin(session.state.turn + 1)
    try:
        result = await _drive_turn(
            session, args.message, pin=args.pin, on_event=lines.on_event, on_interrupt=lambda: None
        )
    except StowageError as exc:
        figures = await read_turn_figures(reader_store(args), session.id)
        reason, status = stopped_reason(exc, None), exit_status(exc)
        lines.finish(stopped=reason, figures=figures, exit_status=status, error=error_text(exc))
        raise
    stopped = "interrupted" if result is None else result.stopped
    status = turn_exit(stopped)
    figures = await read_turn_figures(reader_store(args), session.id)
    text, rounds = (result.text, result.rounds) if result is not None else ("", None)
    lines.finish(text=text, stopped=stopped, rounds=rounds, figures=figures, exit_status=status)
    return status


async def chat_main(args: argparse.Namespace, *, continuing: bool = False) -> int:
    """``chat [ID | --session ID | --last]``: an interactive loop over a new or a continued session;
    an ID with no log is a new session of that id (asked first on a terminal when typed as ``chat
    ID``). Raises ``SessionNotFound`` for a missing one then, and what ``runtime_for`` raises."""
    from stowage.core import ConfigError, SessionNotFound

    from ._chat import chat_loop, confirm_new
    from ._run_options import trace_if_configured

    _status_line()  # rich: a missing [cli] extra is said before anything is opened
    named = getattr(args, "name", None)
    if named is not None and args.session is not None and named != args.session:
        raise ConfigError(f"chat {args.session} --session {named}: name the session once")
    session_id = await _last_session(args) if args.last else (named or args.session)
    store = open_cli_store(args)
    exists = await _holds(store, session_id)
    if session_id is not None and not exists and (continuing or named is None):
        if continuing:
            await store.aclose()
            raise SessionNotFound(f"no session {session_id!r} in this store")
        if _on_terminal() and not await confirm_new(session_id):
            await store.aclose()
            return 0
    async with await runtime_for(args, store, session_id if exists else None) as rt:
        settings = rt.settings
        trace_if_configured(rt, settings)
        # what opening says (a repaired log, an override) before the chat's own status line
        # exists; the chat then says notices itself, with its status line down first
        opening = rt.subscribe(_say_notices)
        try:
            if exists:
                assert session_id is not None
                session = await rt.resume(session_id)
            else:
                session = await _new_session(rt, args, session_id)
        finally:
            opening()
        # /context and /export read the log through a store of their own, as the commands do
        return await chat_loop(
            session,
            settings=rt.settings_of(session.id),
            subscribe=rt.subscribe,
            open_store=lambda: reader_store(args),
            notices=notice_line,
            sessions=_ChatSessions(rt, args),
        )


class _ChatSessions:
    """The chat's ``/fork``, ``/rewind`` and ``/new`` on its runtime: the session it leaves
    is closed (its lease given back), the one it goes on with is live."""

    def __init__(self, rt: Runtime, args: argparse.Namespace) -> None:
        self._rt = rt
        self._args = args

    async def fork(self, session: Session, at_round: int | None) -> Session:
        child = await self._rt.fork(session.id, at_round=at_round)
        await self._rt.close(session.id)
        return child

    async def rewind(self, session: Session, to_round: int) -> Session:
        await self._rt.rewind(session.id, to_round=to_round)  # closes the live session first
        return await self._rt.resume(session.id)

    async def new(self, session: Session) -> Session:
        fresh = await _new_session(self._rt, self._args, None)
        await self._rt.close(session.id)
        return fresh

    def settings_of(self, session_id: str) -> Settings:
        return self._rt.settings_of(session_id)


async def _drive_turn(
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
    import signal

    import anyio
    from stowage.facade import TurnResult

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
