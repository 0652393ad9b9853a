"""The ``stowage`` parser: every command, its help line and its options."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._parsing import CommandParser, OneLineParser
from ._store_args import DEFAULT_STORE, STORE_ENV

__all__ = ["build_parser", "parser_and_commands"]


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        metavar="DIR|sqlite:///PATH|postgresql://...",
        help=f"where the logs are: a directory (JSONL), a SQLite file or a PostgreSQL database "
        f"(its tables' schema as ?schema=NAME, default public) "
        f"(default ${STORE_ENV}, else ./{DEFAULT_STORE})",
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
    from ._compact import add_protect_options
    from ._run_options import add_mcp_options

    run.add_argument("message", nargs="?", help="the message ('-' reads it from stdin)")
    _file_option(run)
    run.add_argument(
        "--session",
        default=None,
        help="id for the new session (letters, digits, - and _); an existing one is refused",
    )
    _model_options(run)
    _json_option(run)
    _agents_options(run)
    add_protect_options(run)
    add_mcp_options(run)
    _common(run)


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="the turn as JSON lines on stdout (turn_started, round, tool_call, tool_output, "
        'compaction, answer, turn_ended; each with "v": 1)',
    )


def _agents_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents",
        default=None,
        metavar="FILE",
        help="instructions for a new session, after its system message (default: AGENTS.md "
        "in the current directory, when there is one)",
    )
    parser.add_argument(
        "--no-agents",
        dest="agents",
        action="store_const",
        const="",
        help="read no AGENTS.md into a new session",
    )


def _file_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", default=None, metavar="PATH", help="read the message from this file (UTF-8)"
    )


def _resume_command(resume: argparse.ArgumentParser) -> None:
    from ._compact import add_protect_options
    from ._run_options import add_mcp_options

    resume.add_argument(
        "session",
        nargs="?",
        help="session id (see 'stowage list'); on a terminal, left out: pick one from a list",
    )
    resume.add_argument(
        "message",
        nargs="?",
        help="the message ('-' reads it from stdin); on a terminal, left out: go on in the chat",
    )
    _file_option(resume)
    resume.add_argument(
        "--last", action="store_true", help="continue the most recently active session"
    )
    _model_options(resume, new=False)
    _json_option(resume)
    add_protect_options(resume)
    add_mcp_options(resume)
    _common(resume)


def _chat_command(chat: argparse.ArgumentParser) -> None:
    from ._run_options import add_mcp_options

    chat.add_argument(
        "session",
        nargs="?",
        help="continue this session, or start it when it has no log (asked first on a terminal)",
    )
    chat.add_argument(
        "--session",
        dest="name",
        default=None,
        metavar="ID",
        help="continue session ID, or start a new session with that id",
    )
    chat.add_argument("--last", action="store_true", help="continue the most recent session")
    _model_options(chat, pin=False)
    _agents_options(chat)
    add_mcp_options(chat)
    _common(chat)


def _list_command(listing: argparse.ArgumentParser) -> None:
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.add_argument(
        "--cost", action="store_true", help="what each session cost, as 'stowage cost' says"
    )
    _common(listing)


def _context_command(context: argparse.ArgumentParser) -> None:
    context.add_argument("session")
    context.add_argument("--json", action="store_true", help="the figures as one JSON object")
    _common(context)


def _export_command(export: argparse.ArgumentParser) -> None:
    from ._export import EXPORT_FORMATS

    export.add_argument("session")
    export.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="markdown",
        help="markdown (default); jsonl: the log records; openai-chat / openai-responses: the "
        "history as the next request would send it, in that API's message shape (a call "
        "without its output yet, e.g. one awaiting approval, is left out and named on stderr)",
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


def _cost_command(cost: argparse.ArgumentParser) -> None:
    from ._cost import add_cost_arguments

    add_cost_arguments(cost)
    _common(cost)


def _protect_command(protect: argparse.ArgumentParser) -> None:
    from ._compact import add_protect_options
    from ._run_options import add_mcp_options

    protect.add_argument("session")
    add_protect_options(protect, drop=True)
    _model_options(protect, new=False, pin=False)
    add_mcp_options(protect)
    _common(protect)


def _compact_command(compact: argparse.ArgumentParser) -> None:
    from ._compact import add_compact_arguments
    from ._run_options import add_mcp_options

    add_compact_arguments(compact)
    _model_options(compact, new=False, pin=False)
    add_mcp_options(compact)
    _common(compact)


def _milestone_command(milestone: argparse.ArgumentParser) -> None:
    from ._compact import add_milestone_arguments
    from ._run_options import add_mcp_options

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
    demo.add_argument("--turns", type=_positive_int, default=10, help="turns to run (default 10)")
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


def _positive_int(text: str) -> int:
    """An integer from 1, as argparse takes it (argparse says the error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number from 1, got {value}")
    return value


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
    ("resume", "continue session ID (or --last) with MESSAGE, as it was created", _resume_command),
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
    ("cost", "what session ID cost: money, cache, each compaction and resume", _cost_command),
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


def _global_options(parser: argparse.ArgumentParser) -> None:
    """The shared options as ``stowage --help`` shows them before the command; what is typed
    there is moved after the command word (``hoist_globals``), so the command reads it."""
    group = parser.add_argument_group(
        "options every session command takes, before or after the command"
    )
    # SUPPRESS: never in the namespace; the command's own option carries the value
    group.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        metavar="DIR|sqlite:///PATH|postgresql://...",
        help=f"where the logs are (default ${STORE_ENV}, else ./{DEFAULT_STORE})",
    )
    group.add_argument(
        "--log-format",
        default=argparse.SUPPRESS,
        choices=["console", "json"],
        help="console or json",
    )
    group.add_argument(
        "--log-level", default=argparse.SUPPRESS, help="debug, info, warning (default), error"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stowage`` (see ``parser_and_commands``)."""
    return parser_and_commands()[0]


def parser_and_commands() -> tuple[argparse.ArgumentParser, tuple[str, ...]]:
    """The argument parser of ``stowage`` and the names of its commands."""
    from ._approve import add_approval_commands
    from ._console import add_console_command
    from ._exits import EXIT_STATUSES
    from ._store_admin import add_store_admin_commands
    from ._worker import add_worker_commands, add_workers_command

    parser = OneLineParser(
        prog="stowage",
        description="A runtime for long-running LLM agents.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    _global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for name, text, options in _COMMANDS:
        command = sub.add_parser(name, help=text)
        command.later(options)
    add_worker_commands(sub)
    add_workers_command(sub)
    add_console_command(sub)
    add_approval_commands(sub, _common)
    add_store_admin_commands(sub)
    return parser, tuple(sub.choices)
