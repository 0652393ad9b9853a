"""The ``stowage`` command line: run, resume, show, check, fork, rewind, protect, compact, demo,
load.

Every command names its store the same way (``--store`` or ``STOWAGE_STORE``: a directory, a
``sqlite:///`` file or a ``postgresql://`` database) through ``stowage.storage.open_store``.
``show`` and ``check`` only read: they create, lock and change nothing (``check --repair`` is the
one exception: it takes the session's writer lease to cut a torn last line). Exit statuses are
in ``_exits``.

Startup is kept short: building the parser imports none of the runtime (a command's options
are added when that command is parsed, see ``_parsing``), and each handler imports what its
command uses, so ``stowage --version`` and ``--help`` load argparse and little else, and
``stowage list`` or ``show`` the store and the records, not the model client or the actors.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._parsing import CommandParser

if TYPE_CHECKING:
    from stowage.core import Event, LogStore, Settings
    from stowage.facade import Runtime

    from ._status import StatusLine

__all__ = ["main"]


STORE_ENV = "STOWAGE_STORE"
_DEFAULT_STORE = ".stowage"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        metavar="DIR|sqlite:///PATH|postgresql://...",
        help=f"where the logs are: a directory (JSONL), a SQLite file or a PostgreSQL database "
        f"(its tables' schema as ?schema=NAME, default public) "
        f"(default ${STORE_ENV}, else ./{_DEFAULT_STORE})",
    )
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument(
        "--log-level", default="warning", help="debug, info, warning (default), error"
    )


def _model_options(parser: argparse.ArgumentParser, *, new: bool = True, pin: bool = True) -> None:
    """The session options; ``new``: the command may start a session (``--system`` is shown),
    ``pin``: it sends a message (``--pin`` applies)."""
    from ._run_options import add_model_options

    add_model_options(parser, system_help="system message for a new session")
    if not new:
        # a continued session keeps the system message it was created with
        _hide(parser, "--system")
    parser.add_argument(
        "--durability",
        choices=["fsync", "syncfs", "none"],
        default=None,
        help="fsync every batch (default); syncfs: one filesystem sync per group commit of "
        "several JSONL logs (Linux 5.8+); none: leave it to the OS",
    )
    if pin:
        parser.add_argument(
            "--pin", action="store_true", help="keep this message verbatim through compactions"
        )


def _hide(parser: argparse.ArgumentParser, option: str) -> None:
    for action in parser._actions:
        if option in action.option_strings:
            action.help = argparse.SUPPRESS


class _Version(argparse.Action):
    """``--version``: reads the installed version only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings,
            dest=dest,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        from stowage._version import DISTRIBUTION, __version__

        sys.stdout.write(f"stowage {__version__} ({DISTRIBUTION})\n")
        parser.exit()


def _run_command(run: argparse.ArgumentParser) -> None:
    from ._mcp_options import add_mcp_options
    from ._protected import add_protect_options

    run.add_argument("message", nargs="?", help="the message ('-' reads it from stdin)")
    _file_option(run)
    run.add_argument(
        "--session",
        default=None,
        help="id for the new session (letters, digits, - and _); an existing one is refused",
    )
    _model_options(run)
    add_protect_options(run)
    add_mcp_options(run)
    _common(run)


def _file_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", default=None, metavar="PATH", help="read the message from this file (UTF-8)"
    )


def message_text(args: argparse.Namespace) -> str:
    """The message a turn sends: MESSAGE, stdin for ``-``, or ``--file PATH``.

    Raises ``ConfigError`` (nothing is opened or written) for both or neither given, an
    unreadable file, or an empty message."""
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


def _resume_command(resume: argparse.ArgumentParser) -> None:
    from ._mcp_options import add_mcp_options
    from ._protected import add_protect_options

    resume.add_argument("session", nargs="?", help="session id (see 'stowage list')")
    resume.add_argument("message", nargs="?", help="the message ('-' reads it from stdin)")
    _file_option(resume)
    resume.add_argument(
        "--last", action="store_true", help="continue the most recently active session"
    )
    _model_options(resume, new=False)
    add_protect_options(resume)
    add_mcp_options(resume)
    _common(resume)


def _chat_command(chat: argparse.ArgumentParser) -> None:
    from ._mcp_options import add_mcp_options

    chat.add_argument("session", nargs="?", help="continue this session (default: a new one)")
    chat.add_argument("--last", action="store_true", help="continue the most recent session")
    _model_options(chat, pin=False)
    add_mcp_options(chat)
    _common(chat)


def _list_command(listing: argparse.ArgumentParser) -> None:
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    _common(listing)


def _context_command(context: argparse.ArgumentParser) -> None:
    context.add_argument("session")
    context.add_argument("--json", action="store_true", help="the figures as one JSON object")
    _common(context)


def _export_command(export: argparse.ArgumentParser) -> None:
    from ._sessions import EXPORT_FORMATS

    export.add_argument("session")
    export.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="markdown",
        help="markdown (default); jsonl: the log records; openai-chat / openai-responses: the "
        "history as the next request would send it, in that API's message shape",
    )
    export.add_argument(
        "--current",
        action="store_true",
        help="markdown of what the model sees now (the last summary and what followed) instead "
        "of the whole log with each compaction marked",
    )
    export.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    _common(export)


def _show_command(show: argparse.ArgumentParser) -> None:
    show.add_argument("session")
    show.add_argument("--json", action="store_true", help="the records as JSON lines")
    show.add_argument(
        "--requests",
        action="store_true",
        help="under each round, what its request was built from (sections, seqs, tokens)",
    )
    _common(show)


def _protect_command(protect: argparse.ArgumentParser) -> None:
    from ._mcp_options import add_mcp_options
    from ._protected import add_protect_options

    protect.add_argument("session")
    add_protect_options(protect, drop=True)
    _model_options(protect, new=False, pin=False)
    add_mcp_options(protect)
    _common(protect)


def _compact_command(compact: argparse.ArgumentParser) -> None:
    from ._compact import add_compact_arguments
    from ._mcp_options import add_mcp_options

    add_compact_arguments(compact)
    _model_options(compact, new=False, pin=False)
    add_mcp_options(compact)
    _common(compact)


def _milestone_command(milestone: argparse.ArgumentParser) -> None:
    from ._compact import add_milestone_arguments
    from ._mcp_options import add_mcp_options

    add_milestone_arguments(milestone)
    _model_options(milestone, new=False, pin=False)
    add_mcp_options(milestone)
    _common(milestone)


def _check_command(check: argparse.ArgumentParser) -> None:
    check.add_argument("session")
    check.add_argument(
        "--repair",
        action="store_true",
        help="take the session's writer lease and cut an incomplete last line, then check",
    )
    check.add_argument(
        "--requests",
        action="store_true",
        help="also rebuild from the log the input of every request a round recorded sending, "
        "and compare it with the round's manifest",
    )
    _common(check)


def _fork_command(fork: argparse.ArgumentParser) -> None:
    from ._fork import add_fork_arguments

    add_fork_arguments(fork)
    _common(fork)


def _rewind_command(rewind: argparse.ArgumentParser) -> None:
    from ._fork import add_rewind_arguments

    add_rewind_arguments(rewind)
    _common(rewind)


def _demo_command(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--turns", type=int, default=10)
    demo.add_argument(
        "--compact-threshold",
        type=int,
        default=None,
        help="compact when reported usage reaches N tokens, instead of the watermarks",
    )
    demo.add_argument(
        "--context-window",
        type=int,
        default=6000,
        help="the model window the demo compacts in (default 6000)",
    )
    _common(demo)


def _fake_server_command(fake: argparse.ArgumentParser) -> None:
    from stowage.testing.fake_server import add_arguments

    add_arguments(fake)
    fake.add_argument("--log-format", choices=["console", "json"], default="console")
    fake.add_argument("--log-level", default="warning", help="debug, info, warning, error")


def _load_command(load: argparse.ArgumentParser) -> None:
    from stowage.load import add_load_arguments

    add_load_arguments(load)
    load.add_argument("--log-format", choices=["console", "json"], default="console")
    load.add_argument("--log-level", default="warning", help="debug, info, warning, error")


#: the commands whose options ``build_parser`` adds when they are used: name, help, options
_COMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None]], ...] = (
    ("run", "start a new session with MESSAGE", _run_command),
    (
        "resume",
        "continue session ID (or --last) with MESSAGE, as it was created",
        _resume_command,
    ),
    (
        "chat",
        "talk with a new session, or continue ID; Ctrl-C stops a turn, twice (or Ctrl-D) exits",
        _chat_command,
    ),
    ("list", "every session of the store: model, turns, tokens, state", _list_command),
    (
        "context",
        "what fills the window of session ID, and what compaction does next",
        _context_command,
    ),
    ("export", "write session ID as markdown, JSONL or OpenAI input", _export_command),
    ("show", "print the transcript and every compaction of session ID", _show_command),
    (
        "protect",
        "change the objective or constraints of session ID and print its state",
        _protect_command,
    ),
    ("compact", "compact session ID now, optionally with --focus", _compact_command),
    (
        "milestone",
        "record that a phase of session ID's work ended (NAME, --note); it may compact there",
        _milestone_command,
    ),
    ("check", "verify the log of session ID; exit 1 if it is not sound", _check_command),
    (
        "fork",
        "start a new session from session ID's history at a round (--at; default its newest)",
        _fork_command,
    ),
    (
        "rewind",
        "make session ID continue from round --to; later records stay as a discarded branch",
        _rewind_command,
    ),
    ("demo", "an offline long session that compacts several times", _demo_command),
    (
        "load",
        "many sessions x turns with compaction, then verify every log; exit 1 if not",
        _load_command,
    ),
    (
        "fake-server",
        "a fake OpenAI-compatible endpoint for trying stowage offline (prints its URL)",
        _fake_server_command,
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stowage``. Each command's options are added when that command
    is parsed or its help printed (``_parsing.CommandParser``): building it imports nothing of
    the runtime."""
    from ._approve import add_approval_commands
    from ._console import add_console_command
    from ._exits import EXIT_STATUSES
    from ._store_admin import add_store_admin_commands
    from ._worker import add_worker_commands
    from ._workers import add_workers_command

    parser = argparse.ArgumentParser(
        prog="stowage",
        description="A runtime for long-running LLM agents.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for name, text, options in _COMMANDS:
        command = sub.add_parser(name, help=text)
        command.later(options)
    add_worker_commands(sub)
    add_workers_command(sub)
    add_console_command(sub)
    add_approval_commands(sub, _common)
    add_store_admin_commands(sub)
    return parser


def store_spec(args: argparse.Namespace) -> str:
    """The store the command names: ``--store``, else ``$STOWAGE_STORE``, else ``store`` in a
    ``stowage.toml`` (the project's over the user's), else ``.stowage``."""
    spec: str | None = args.store or os.environ.get(STORE_ENV)
    if not spec:
        from ._config import load_config  # the configuration (pydantic) only when it is read

        spec = load_config().store
    return spec if spec else _DEFAULT_STORE


def open_cli_store(args: argparse.Namespace) -> LogStore:
    """The store the command names (see ``store_spec``), with ``--durability`` when it has one.

    Raises ``ConfigError`` for a spec that is none of the accepted forms. Creates nothing.
    """
    from stowage.core import lineage_store
    from stowage.storage import open_store

    # forks read their parents' records, rewound logs skip their discarded branches
    return lineage_store(
        open_store(store_spec(args), durability=getattr(args, "durability", None) or "fsync")
    )


def _open_store(args: argparse.Namespace) -> LogStore:
    """The store the command names, as a reader (the store's default durability).

    Raises ``ConfigError`` naming the resolved path when a directory or SQLite store does
    not exist: a reader creates nothing, and "no sessions" would hide a wrong path."""
    from stowage.core import ConfigError, lineage_store
    from stowage.storage import open_store

    spec = store_spec(args)
    local = spec.removeprefix("sqlite:///") if spec.startswith("sqlite:///") else None
    if "://" not in spec:
        local = spec
    if local is not None and not Path(local).exists():
        where = Path(local).expanduser().resolve()
        raise ConfigError(
            f"store {where}: no such {'directory' if '://' not in spec else 'file'}: name "
            "the store with --store or STOWAGE_STORE ('stowage run MESSAGE' starts a session)"
        )
    return lineage_store(open_store(spec))


def _say_pending(session_id: str, calls: Sequence[Any], store: str) -> None:
    """Each call awaiting approval, with its tool, arguments and the exact commands."""
    import shlex

    where = f" --store {shlex.quote(store)}"
    for call in calls:
        args = call.arguments if len(call.arguments) <= 300 else call.arguments[:300] + "…"
        print(f"[awaiting approval: call {call.call_id}: {call.name}({args})]", file=sys.stderr)
        print(
            f"  stowage approve {session_id} {call.call_id}{where}\n"
            f"  stowage deny {session_id} {call.call_id}{where} --reason '…'",
            file=sys.stderr,
        )


def _store_label(args: argparse.Namespace) -> str:
    """The store a command uses, as it may be shown: a resolved directory, or a URL without
    its credentials."""
    from stowage.core import redact_url

    spec = store_spec(args)
    if "://" in spec:
        return redact_url(spec) or spec
    return str(Path(spec).expanduser().resolve())


def _store_dir(spec: str) -> Path:
    # Settings.store is a directory the workspace tools must never show; a database URL is
    # kept out of Settings altogether (its repr may be logged, and a URL may hold a password)
    return Path(_DEFAULT_STORE) if "://" in spec else Path(spec)


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from parsed options. Raises ``ConfigError`` for bad values."""
    from ._run_options import settings_from_options

    return settings_from_options(args, **_store_fields(args))


def _store_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {"store": _store_dir(store_spec(args))}
    if getattr(args, "durability", None) is not None:
        fields["durability"] = args.durability
    return fields


#: the live status line of ``run``/``resume`` (drawn only when stderr is a terminal); made on
#: first use, since it needs rich
_STATUS: StatusLine | None = None


def _status_line() -> StatusLine:
    global _STATUS
    if _STATUS is None:
        from ._status import StatusLine

        _STATUS = StatusLine()
    return _STATUS


def _printer(stream_answer: bool) -> Any:
    from stowage.core import (
        AssistantDelta,
        CompactionDecided,
        HistoryCompacted,
        LogRepaired,
        Microcompacted,
        RoundCommitted,
        RoundStarted,
        SettingsChanged,
        ToolFinished,
        ToolStarted,
        TurnFinished,
    )

    from ._run_options import repair_notice, settings_notice

    status = _status_line()
    reader_gone = False

    def on_event(event: Event) -> None:
        nonlocal reader_gone
        if isinstance(event, TurnFinished | AssistantDelta) or not isinstance(
            event, RoundStarted | ToolStarted | ToolFinished | RoundCommitted | CompactionDecided
        ):
            status.hide()  # before anything is written: the status line never shares a line
        else:
            status.on_event(event)
        if isinstance(event, AssistantDelta) and stream_answer and not reader_gone:
            try:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            except BrokenPipeError:
                reader_gone = True  # the reader left (``| head``): the turn still completes
        elif isinstance(event, HistoryCompacted):
            print(
                f"\n[compacted ({event.kind}) at round {event.round}: tokens {event.tokens_before} -> "
                f"{event.tokens_after}{' (estimated)' if event.estimated else ''}, removed {event.removed}, "
                f"retained {event.retained}; {event.reason}]",
                file=sys.stderr,
            )
        elif isinstance(event, SettingsChanged):
            print(settings_notice(event), file=sys.stderr)
        elif isinstance(event, Microcompacted):
            print(
                f"\n[microcompacted {event.stubbed} tool outputs: {event.reason}]", file=sys.stderr
            )
        elif isinstance(event, LogRepaired):
            print(repair_notice(event), file=sys.stderr)

    return on_event


async def _runtime_for(
    args: argparse.Namespace, store: LogStore, session_id: str | None
) -> Runtime:
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
            args, store, validate_session_id(session_id), **_store_fields(args)
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


async def _run(args: argparse.Namespace, *, resume: bool) -> int:
    from stowage.core import validate_session_id

    from ._run_options import refuse_oversized
    from ._tracing import trace_if_configured

    _status_line()  # rich: a missing [cli] extra is said before anything is opened
    args.message = message_text(args)  # refused before anything is opened
    store = open_cli_store(args)
    try:
        # continuing runs with the session's recorded identity; typed options override it
        continuing = resume or (
            args.session is not None and await store.exists(validate_session_id(args.session))
        )
    except BaseException:
        await store.aclose()
        raise
    async with await _runtime_for(args, store, args.session if continuing else None) as rt:
        settings = rt.settings
        rt.subscribe(_printer(stream_answer=settings.stream))
        trace_if_configured(rt, settings)
        if not continuing:
            # a message that cannot fit is refused before a new session's log exists
            refuse_oversized(args.message, settings, rt.tools.specs())
        if continuing:
            session = await rt.resume(args.session)
        elif args.session is not None:
            session = await rt.open(args.session)
        else:
            session = await rt.create(objective=args.objective, constraints=args.constraint)
            print(f"session: {session.id}", file=sys.stderr)
            print(f"store: {_store_label(args)}", file=sys.stderr)
        # with the window the session runs with (recorded, or found when it was made)
        refuse_oversized(args.message, rt.settings_of(session.id), rt.tools.specs())
        if resume or args.session is not None:
            # the user's word, logged before the turn; repeating an existing entry is a no-op
            await session.protect(objective=args.objective, add_constraints=args.constraint)
        result = await session.send(args.message, pin=args.pin)
        if not settings.stream:
            sys.stdout.write(result.text)
        sys.stdout.write("\n")
        if result.stopped != "answered":
            print(f"[turn stopped: {result.stopped} after {result.rounds} rounds]", file=sys.stderr)
        if result.stopped == "pending_approval":
            _say_pending(session.id, session.pending_approvals, _store_label(args))
    if result.stopped == "round_limit":
        from ._exits import EXIT_STOPPED

        return EXIT_STOPPED
    return 0


async def _show(args: argparse.Namespace) -> int:
    from stowage.core import lineage_store, validate_session_id

    store = lineage_store(_open_store(args))
    try:
        # a reader: no lease, no lock file, a torn last line shown as it is and left alone;
        # a fork is shown with its parents' records, a rewind with the branch it discarded
        lineage = await store.lineage(validate_session_id(args.session))
    finally:
        await store.aclose()
    read = lineage.read
    if read.torn_tail is not None:
        torn = read.torn_tail
        print(
            f"[torn last line: {torn.bytes_removed} bytes at {torn.path}:{torn.line}, not shown; "
            f"'stowage check {args.session} --repair' cuts it]",
            file=sys.stderr,
        )
    if args.json:
        from stowage.storage import encode_record

        for record in read.records:
            sys.stdout.write(encode_record(record).decode())
    else:
        from ._show import render_transcript

        sys.stdout.write(
            render_transcript(
                args.session,
                lineage.records,
                requests=args.requests,
                discarded=lineage.discarded,
            )
        )
    return 0


async def _check(args: argparse.Namespace) -> int:
    from stowage.core import CorruptLogError, validate_session_id
    from stowage.policy import check_log

    from ._exits import EXIT_CHECK_FAILED, EXIT_OK

    session_id = validate_session_id(args.session)
    store = _open_store(args)
    try:
        if args.repair:
            # the writer's lease: only its holder may cut; SessionBusy if another holds it
            async with await store.acquire(session_id) as lease:
                if lease.repaired is not None:
                    cut = lease.repaired
                    print(
                        f"repaired: cut an incomplete last line ({cut.bytes_removed} bytes) "
                        f"at {cut.path}:{cut.line}"
                    )
                else:
                    print("repair: nothing to cut, the last line is whole")
                full = await store.read(session_id, repair=False)
                tail = await store.read_tail(session_id, repair=False)
        else:
            full = await store.read(session_id, repair=False)
            tail = await store.read_tail(session_id, repair=False)
    except CorruptLogError as exc:
        print(f"{session_id}: corrupt log: {exc}")
        print("NOT OK")
        return EXIT_CHECK_FAILED
    finally:
        await store.aclose()
    report = check_log(session_id, full.records, tail.records)
    print(
        f"{session_id}: {report.records} records, {report.compactions} compactions, "
        f"{report.history_items} items in history"
    )
    for note in report.notes:
        print(f"note: {note}")
    problems = list(report.problems)
    if full.torn_tail is not None:
        torn = full.torn_tail
        problems.append(
            f"torn last line: {torn.bytes_removed} bytes at {torn.path}:{torn.line} (a write cut "
            f"short by a crash), left as it is; 'stowage check {session_id} --repair' cuts it"
        )
    if args.requests:
        from stowage.policy import check_requests

        requests = check_requests(session_id, full.records)
        print(
            f"requests: {requests.checked} rebuilt from the log and matched their manifests"
            if requests.ok
            else f"requests: {requests.checked} with manifests, {len(requests.problems)} differ"
        )
        if requests.unrecorded:
            print(
                f"note: {requests.unrecorded} round(s) have no manifest (recovered rounds, "
                "rounds an approval resumed, or rounds logged before manifests)"
            )
        problems += requests.problems
    for problem in problems:
        print(f"problem: {problem}")
    ok = not problems
    print("ok" if ok else "NOT OK")
    return EXIT_OK if ok else EXIT_CHECK_FAILED


async def _fork(args: argparse.Namespace) -> int:
    from ._fork import fork_main

    return await fork_main(args, open_cli_store(args))


async def _rewind(args: argparse.Namespace) -> int:
    from ._fork import rewind_main

    return await rewind_main(args, open_cli_store(args))


async def _run_new(args: argparse.Namespace) -> int:
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

    store = _open_store(args)
    try:
        return await last_active_session(store)
    finally:
        await store.aclose()


async def _resume(args: argparse.Namespace) -> int:
    """``resume ID MESSAGE`` or ``resume --last MESSAGE``."""
    if args.last:
        args.message = args.session
        args.session = await _last_session(args)
        print(f"session: {args.session}", file=sys.stderr)
    return await _run(args, resume=True)


async def _chat(args: argparse.Namespace) -> int:
    """``chat [ID | --last]``: an interactive loop over a new or a continued session."""
    from ._chat import chat_loop
    from ._tracing import trace_if_configured

    _status_line()  # rich: a missing [cli] extra is said before anything is opened
    session_id = await _last_session(args) if args.last else args.session
    async with await _runtime_for(args, open_cli_store(args), session_id) as rt:
        settings = rt.settings
        trace_if_configured(rt, settings)
        # what opening says (a repaired log, an override) before the chat's own status line
        # exists; the chat then says notices itself, with its status line down first
        opening = rt.subscribe(_notices)
        try:
            if session_id is None:
                session = await rt.create()
            else:
                session = await rt.resume(session_id)
        finally:
            opening()
        # /context and /export read the log through a store of their own, as the commands do
        return await chat_loop(
            session,
            settings=rt.settings_of(session.id),
            subscribe=rt.subscribe,
            open_store=lambda: open_cli_store(args),
            notices=_notices,
        )


def _notices(event: Event) -> None:
    """What a chat says on stderr besides its status line: compactions, repairs, overrides."""
    from stowage.core import HistoryCompacted, LogRepaired, Microcompacted, SettingsChanged

    if isinstance(event, (HistoryCompacted, Microcompacted, LogRepaired, SettingsChanged)):
        _printer(stream_answer=False)(event)


async def _demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    return await run_demo(
        store=store_spec(args),
        turns=args.turns,
        threshold=args.compact_threshold,
        context_window=args.context_window,
    )


async def _fake_server(args: argparse.Namespace) -> int:
    from stowage.testing.fake_server import serve

    return await serve(args)


async def _load(args: argparse.Namespace) -> int:
    from stowage.load import main_load

    return await main_load(args)


async def _list(args: argparse.Namespace) -> int:
    from ._sessions import list_main

    return await list_main(args, _open_store(args))


async def _context(args: argparse.Namespace) -> int:
    from ._sessions import context_main

    return await context_main(args, _open_store(args))


async def _export(args: argparse.Namespace) -> int:
    from ._sessions import export_main

    return await export_main(args, _open_store(args))


async def _compact(args: argparse.Namespace) -> int:
    from ._compact import compact_main

    return await compact_main(
        args,
        open_cli_store(args),
        store_dir=_store_dir(store_spec(args)),
        durability=getattr(args, "durability", None),
    )


async def _milestone(args: argparse.Namespace) -> int:
    from ._compact import milestone_main

    return await milestone_main(
        args,
        open_cli_store(args),
        store_dir=_store_dir(store_spec(args)),
        durability=getattr(args, "durability", None),
    )


async def _protect(args: argparse.Namespace) -> int:
    from ._protected import protect_main

    return await protect_main(
        args,
        open_cli_store(args),
        store_dir=_store_dir(store_spec(args)),
        durability=getattr(args, "durability", None),
    )


async def _worker(args: argparse.Namespace) -> int:
    from ._worker import worker_main

    return await worker_main(args)


async def _workers(args: argparse.Namespace) -> int:
    from ._workers import workers_main

    return await workers_main(args)


async def _send(args: argparse.Namespace) -> int:
    from ._worker import send_main

    return await send_main(args)


async def _console(args: argparse.Namespace) -> int:
    from ._console import console_main

    return await console_main(args)


async def _approval(args: argparse.Namespace) -> int:
    from ._approve import approval_main

    return await approval_main(args)


async def _archive(args: argparse.Namespace) -> int:
    from ._store_admin import archive_main

    return await archive_main(args)


async def _migrate(args: argparse.Namespace) -> int:
    from ._store_admin import migrate_main

    return await migrate_main(args)


#: each command's handler: it imports what the command uses when it runs
_HANDLERS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "run": _run_new,
    "resume": _resume,
    "chat": _chat,
    "list": _list,
    "context": _context,
    "export": _export,
    "show": _show,
    "check": _check,
    "fork": _fork,
    "rewind": _rewind,
    "compact": _compact,
    "milestone": _milestone,
    "protect": _protect,
    "demo": _demo,
    "load": _load,
    "fake-server": _fake_server,
    "worker": _worker,
    "workers": _workers,
    "send": _send,
    "console": _console,
    "approve": _approval,
    "deny": _approval,
    "archive": _archive,
    "migrate": _migrate,
}

# events the command's own one-line error (or the status line) already reports: printing them
# too would say one failure two to six times
_REPORTED_ONCE = frozenset(
    {
        "model_call_failed",
        "model_call_retry",
        "turn_failed",
        "session_failed",
        "session_lease_lost",
        "protect_refused",
        "append_refused",
    }
)


# a torn last line cut on open: these commands say so in a line of their own, so the store's
# log line would say it twice; any other command (a worker's operator) keeps the log line
_REPAIR_SAID = frozenset({"log_torn_tail_repaired"})
_SAY_REPAIRS = frozenset(
    {"run", "resume", "chat", "compact", "milestone", "protect", "approve", "deny", "check"}
)


def _status_tap(name: str, fields: Mapping[str, Any]) -> None:
    """Retries show on the status line (a terminal only): what failed and how long we wait."""
    if name == "model_call_retry":
        delay = fields.get("delay")
        wait = f"{float(delay):.1f} s" if isinstance(delay, int | float) else "a moment"
        _status_line().show(
            f"waiting {wait} to retry (attempt {fields.get('attempt')}: {fields.get('error')})"
        )


def configure_logging(log_format: str, level: str, **kwargs: Any) -> None:
    """``stowage.core.configure_logging``, imported when a command runs (structlog loads rich)."""
    from stowage.core import configure_logging as configure

    configure(log_format, level, **kwargs)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stowage`` console script; returns the exit status."""
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["worker"]:  # before its options import the runtime: a stop signal drains it
        from ._worker import catch_stop_signals

        catch_stop_signals()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        quiet = _REPORTED_ONCE if args.log_level.lower() in ("warning", "error") else frozenset()
        if quiet and args.command in _SAY_REPAIRS:
            quiet = quiet | _REPAIR_SAID
        configure_logging(args.log_format, args.log_level, quiet=quiet, tap=_status_tap)
    except ValueError as exc:
        parser.error(str(exc))
    if args.command == "resume":
        given = [word for word in (args.session, args.message) if word is not None]
        needed = (1 if args.last else 2) - (1 if args.file is not None else 0)
        if len(given) != needed:
            parser.error("resume takes ID MESSAGE, or --last MESSAGE (or --file PATH for MESSAGE)")
    handler = _HANDLERS[args.command]
    if args.command in ("run", "resume", "chat", "worker") and args.tools_from:
        sys.path.insert(0, os.getcwd())  # like "python -m": the user's own modules are importable
    import anyio

    from ._exits import EXIT_INTERRUPTED, EXIT_OK, error_line, exit_status, stowage_error

    try:
        try:
            return int(anyio.run(handler, args))
        finally:
            if _STATUS is not None:
                _STATUS.hide()
    except KeyboardInterrupt:
        # SIGINT cancels the command; the runtime stops every session at once, writing nothing
        # half-done (a round is written whole or not at all)
        print("stowage: interrupted; committed rounds are in the log", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of stdout left (``stowage show --json X | head -1``): not an error
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        error = stowage_error(exc)
        if error is None:
            raise  # a bug: its traceback is worth having
        print(error_line(error), file=sys.stderr)
        return exit_status(error)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
