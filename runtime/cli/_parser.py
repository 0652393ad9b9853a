"""The ``stowage`` parser: every command, its help line and its options, as one table.

A command's options are listed as data (``_COMMANDS``): an argument of its own, or a group
several commands share. They are added when the command is parsed or its help printed
(``_parsing.CommandParser``), so ``stowage --version`` and ``--help`` load argparse and little
else. The options every session command shares are listed before the command too; what is typed
there is moved after the command word (``_parsing.hoist_globals``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._parsing import Arg, CommandParser, OneLineParser, level_help, log_arguments
from ._store_args import DEFAULT_STORE, STORE_ENV

__all__ = ["build_parser", "parser_and_commands"]


def _arg(*flags: str, **kwargs: Any) -> Arg:
    return flags, kwargs


def _from_one(noun: str, low: str) -> Callable[[str], int]:
    """An integer from 1, as argparse takes it (argparse says the error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{low}, got {value}")
        return value

    return parse


_round = _from_one("a round number", "rounds count from 1")
_LOG = log_arguments("warning")
_COMMON = (
    _arg(
        "--store",
        default=None,
        metavar="DIR|sqlite:///PATH|postgresql://...",
        help="where the logs are: a directory (JSONL), a SQLite file or a PostgreSQL database "
        "(its tables' schema as ?schema=NAME, default public) "
        f"(default ${STORE_ENV}, else ./{DEFAULT_STORE})",
    ),
    *_LOG,
)
_MESSAGE_FILE = _arg(
    "--file", default=None, metavar="PATH", help="read the message from this file (UTF-8)"
)
_JSON_TURN = _arg(
    "--json",
    action="store_true",
    help="the turn as JSON lines on stdout (turn_started, round, tool_call, tool_output, "
    'compaction, answer, turn_ended; each with "v": 1)',
)
_AGENTS = (
    _arg(
        "--agents",
        default=None,
        metavar="FILE",
        help="instructions for a new session, after its system message (default: AGENTS.md "
        "in the current directory, when there is one)",
    ),
    _arg(
        "--no-agents",
        dest="agents",
        action="store_const",
        const="",
        help="read no AGENTS.md into a new session",
    ),
)
_DURABILITY = _arg(
    "--durability",
    choices=["fsync", "syncfs", "none"],
    default=None,
    help="fsync every batch (default); syncfs: one filesystem sync per group commit of "
    "several JSONL logs (Linux 5.8+); none: leave it to the OS",
)
_PIN = _arg("--pin", action="store_true", help="keep this message verbatim through compactions")
_PROTECT = (
    _arg("--objective", default=None, help="the session's objective (protected: never summarized)"),
    _arg(
        "--constraint",
        action="append",
        default=[],
        metavar="TEXT",
        help="a constraint that must hold through every compaction (repeatable)",
    ),
)
_DROP = _arg(
    "--drop-constraint",
    action="append",
    default=[],
    metavar="ENTRY_ID",
    help="drop the constraint with this id, e.g. c2 (repeatable)",
)


def _session_options(system: str) -> Callable[[argparse.ArgumentParser], None]:
    """The model, endpoint, policy and tool options of a session (``_run_options``);
    ``system``: the help of ``--system`` (``argparse.SUPPRESS`` hides it)."""

    def add(parser: argparse.ArgumentParser) -> None:
        from ._run_options import add_model_options

        add_model_options(parser, system_help=system)

    return add


def _mcp(parser: argparse.ArgumentParser) -> None:
    from ._run_options import add_mcp_options

    add_mcp_options(parser)


#: the groups of options several commands share; a continued session keeps its system message
_NEW = _session_options("system message for a new session")
_CONTINUED = _session_options(argparse.SUPPRESS)

#: a command's options, in the order its help lists them: an argument, a tuple of them, or a
#: function that adds some
Part = Arg | tuple[Arg, ...] | Callable[[argparse.ArgumentParser], None]


def _export_format(parser: argparse.ArgumentParser) -> None:
    from ._export import EXPORT_FORMATS

    parser.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="markdown",
        help="markdown (default); jsonl: the log records; openai-chat / openai-responses: the "
        "history as the next request would send it, in that API's message shape (a call "
        "without its output yet, e.g. one awaiting approval, is left out and named on stderr)",
    )


def _fake_server(parser: argparse.ArgumentParser) -> None:
    from stowage.testing.fake_server import add_arguments

    add_arguments(parser)


def _load(parser: argparse.ArgumentParser) -> None:
    from stowage.load import add_load_arguments

    add_load_arguments(parser)


_SESSION = _arg("session")
#: the commands whose options ``build_parser`` adds when they are used: name, help, options
_COMMANDS: tuple[tuple[str, str, tuple[Part, ...]], ...] = (
    (
        "run",
        "start a new session with MESSAGE",
        (
            _arg("message", nargs="?", help="the message ('-' reads it from stdin)"),
            _MESSAGE_FILE,
            _arg(
                "--session",
                default=None,
                help="id for the new session (letters, digits, - and _); an existing one is "
                "refused",
            ),
            *(_NEW, _DURABILITY, _PIN, _JSON_TURN, _AGENTS, _PROTECT, _mcp, _COMMON),
        ),
    ),
    (
        "resume",
        "continue session ID (or --last) with MESSAGE, as it was created",
        (
            _arg(
                "session",
                nargs="?",
                help="session id (see 'stowage list'); on a terminal, left out: pick one from a "
                "list",
            ),
            _arg(
                "message",
                nargs="?",
                help="the message ('-' reads it from stdin); on a terminal, left out: go on in "
                "the chat",
            ),
            _MESSAGE_FILE,
            _arg("--last", action="store_true", help="continue the most recently active session"),
            *(_CONTINUED, _DURABILITY, _PIN, _JSON_TURN, _PROTECT, _mcp, _COMMON),
        ),
    ),
    (
        "chat",
        "talk with a new session, or continue ID; Ctrl-C stops a turn, twice (or Ctrl-D) exits",
        (
            _arg(
                "session",
                nargs="?",
                help="continue this session, or start it when it has no log (asked first on a "
                "terminal)",
            ),
            _arg(
                "--session",
                dest="name",
                default=None,
                metavar="ID",
                help="continue session ID, or start a new session with that id",
            ),
            _arg("--last", action="store_true", help="continue the most recent session"),
            *(_NEW, _DURABILITY, _AGENTS, _mcp, _COMMON),
        ),
    ),
    (
        "list",
        "every session of the store: model, turns, tokens, state",
        (
            _arg("--json", action="store_true", help="one JSON object per line"),
            _arg(
                "--cost", action="store_true", help="what each session cost, as 'stowage cost' says"
            ),
            _COMMON,
        ),
    ),
    (
        "context",
        "what fills the window of session ID, and what compaction does next",
        (
            _SESSION,
            _arg("--json", action="store_true", help="the figures as one JSON object"),
            _COMMON,
        ),
    ),
    (
        "export",
        "write session ID as markdown, JSONL or OpenAI input",
        (
            _SESSION,
            _export_format,
            _arg(
                "--current",
                action="store_true",
                help="markdown of what the model sees now (the last summary and what followed) "
                "instead of the whole log with each compaction marked",
            ),
            _arg("-o", "--output", default=None, help="write to FILE instead of stdout"),
            _COMMON,
        ),
    ),
    (
        "show",
        "print the transcript and every compaction of session ID",
        (
            _SESSION,
            _arg("--json", action="store_true", help="the records as JSON lines"),
            _arg(
                "--requests",
                action="store_true",
                help="under each round, what its request was built from (sections, seqs, tokens)",
            ),
            _COMMON,
        ),
    ),
    (
        "cost",
        "what session ID cost: money, cache, each compaction and resume",
        (
            _SESSION,
            _arg(
                "--json",
                action="store_true",
                help="the figures as one JSON object (money as strings)",
            ),
            _COMMON,
        ),
    ),
    (
        "protect",
        "change the objective or constraints of session ID and print its state",
        (_SESSION, _PROTECT, _DROP, _CONTINUED, _DURABILITY, _mcp, _COMMON),
    ),
    (
        "compact",
        "compact session ID now, optionally with --focus",
        (
            _SESSION,
            _arg("--focus", default=None, help="what the summary must cover in full detail"),
            _arg(
                "--reground",
                action="store_true",
                help="make the summary from the log's original records since the last re-grounded "
                "compaction, not from the summary before it",
            ),
            *(_CONTINUED, _DURABILITY, _mcp, _COMMON),
        ),
    ),
    (
        "milestone",
        "record that a phase of session ID's work ended (NAME, --note); it may compact there",
        (
            _SESSION,
            _arg("name", help="the phase of the work that ended"),
            _arg("--note", default=None, help="what it found or left, in a sentence"),
            *(_CONTINUED, _DURABILITY, _mcp, _COMMON),
        ),
    ),
    (
        "check",
        "verify the log of session ID; exit 1 if it is not sound",
        (
            _SESSION,
            _arg(
                "--repair",
                action="store_true",
                help="take the session's writer lease and cut an incomplete last line, then check",
            ),
            _arg(
                "--requests",
                action="store_true",
                help="also rebuild from the log the input of every request a round recorded "
                "sending, and compare it with the round's manifest",
            ),
            _COMMON,
        ),
    ),
    (
        "fork",
        "start a new session from session ID's history at a round (--at; default its newest)",
        (
            _arg("session", help="the session to fork (it is only read)"),
            _arg(
                "--at",
                type=_round,
                default=None,
                metavar="ROUND",
                help="fork at the end of this committed round (default: the newest)",
            ),
            _arg(
                "--as",
                dest="new_id",
                default=None,
                metavar="NEW_ID",
                help="the new session's id (default: ID-fork-N, the first that is free)",
            ),
            _COMMON,
        ),
    ),
    (
        "rewind",
        "make session ID continue from round --to; later records stay as a discarded branch",
        (
            _arg("session", help="the session to rewind"),
            _arg(
                "--to",
                dest="to_round",
                type=_round,
                required=True,
                metavar="ROUND",
                help="continue from the end of this committed round; what came after stays in "
                "the log as a discarded branch ('stowage show' marks it)",
            ),
            _COMMON,
        ),
    ),
    (
        "demo",
        "an offline long session that compacts several times",
        (
            _arg(
                "--turns",
                type=_from_one("a whole number", "expected a number from 1"),
                default=10,
                help="turns to run (default 10)",
            ),
            _arg(
                "--compact-threshold",
                type=int,
                default=None,
                help="compact when reported usage reaches N tokens, instead of the watermarks",
            ),
            _arg(
                "--context-window",
                type=int,
                default=6000,
                help="the model window the demo compacts in (default 6000)",
            ),
            _COMMON,
        ),
    ),
    (
        "load",
        "many sessions x turns with compaction, then verify every log; exit 1 if not",
        (_load, _LOG),
    ),
    (
        "fake-server",
        "a fake OpenAI-compatible endpoint for trying stowage offline (prints its URL)",
        (_fake_server, _LOG),
    ),
)

#: the commands listed after the workers' (``_worker`` adds those)
_LATER_COMMANDS: tuple[tuple[str, str, tuple[Part, ...]], ...] = (
    (
        "console",
        "a read-only web console over the store, live (127.0.0.1:8377)",
        (
            _arg(
                "--store",
                default=None,
                metavar="DIR|sqlite:///PATH|postgresql://...",
                help=f"where the logs are (default ${STORE_ENV}, else ./{DEFAULT_STORE})",
            ),
            _arg(
                "--schema",
                default=None,
                help="schema of a PostgreSQL store's tables (default: the URL's ?schema=, else "
                "public)",
            ),
            _arg("--port", type=int, default=8377, help="port (default 8377; 0 picks a free one)"),
            _arg("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"),
            _arg(
                "--allow-remote",
                action="store_true",
                help="allow a --host other than loopback (the console has no login)",
            ),
            _arg(
                "--allowed-host",
                action="append",
                default=[],
                metavar="NAME",
                help="a Host name the console answers besides the address it listens on and the "
                "loopback names (repeatable; a remote console reached by its DNS name needs it)",
            ),
            _LOG,
        ),
    ),
    (
        "approve",
        "approve call CALL_ID of session ID: it runs and the turn goes on",
        (
            _arg("session", help="session id (see 'stowage list')"),
            _arg("call_id", help="the call's id (see 'stowage show ID')"),
            *(_CONTINUED, _mcp, _COMMON),
        ),
    ),
    (
        "deny",
        "deny call CALL_ID of session ID: it gets a denied output and the turn goes on",
        (
            _arg("session", help="session id (see 'stowage list')"),
            _arg("call_id", help="the call's id (see 'stowage show ID')"),
            _arg("--reason", default=None, help="why: the model reads it"),
            *(_CONTINUED, _mcp, _COMMON),
        ),
    ),
)

_SQL_STORE = (
    _arg(
        "--store",
        default=None,
        metavar="sqlite:///PATH|postgresql://...",
        help=f"the store (default ${STORE_ENV}, else the configuration's store)",
    ),
    _arg(
        "--schema",
        default=None,
        help="PostgreSQL: schema of the store's tables (default: the URL's ?schema=, else public)",
    ),
    *_LOG,
)
#: the commands that keep a SQL store, listed last
_STORE_COMMANDS: tuple[tuple[str, str, tuple[Part, ...]], ...] = (
    (
        "archive",
        "move records covered by old compactions out of the table resume reads "
        "(SQLite, PostgreSQL)",
        (
            _arg(
                "--older-than",
                default=None,
                metavar="DURATION",
                help="archive what compactions older than this cover: 30d, 12h, 90m, or seconds "
                "(default: the archive_after setting)",
            ),
            _arg("--session", default=None, help="only this session (default: all)"),
            _arg(
                "--batch",
                type=int,
                default=5_000,
                metavar="N",
                help="seqs moved a transaction (default 5000): smaller holds each session less",
            ),
            _SQL_STORE,
        ),
    ),
    (
        "migrate",
        "hash-partition a PostgreSQL store's records table by session",
        (
            _arg(
                "--partitions",
                type=int,
                required=True,
                metavar="N",
                help="hash partitions of the records table (by session); a no-op if it has N "
                "already",
            ),
            _SQL_STORE,
        ),
    ),
)


def _options(parts: Sequence[Part]) -> Callable[[argparse.ArgumentParser], None]:
    """The function that adds ``parts`` to a command's parser, in order."""

    def add(parser: argparse.ArgumentParser) -> None:
        for part in parts:
            if callable(part):
                part(parser)
            elif isinstance(part[-1], dict):  # one argument
                flags, kwargs = part
                parser.add_argument(*flags, **kwargs)
            else:
                _options(part)(parser)

    return add


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


def _global_options(parser: argparse.ArgumentParser) -> None:
    """The shared options as ``stowage --help`` shows them before the command (``hoist_globals``
    moves what is typed there after the command word)."""
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
    group.add_argument("--log-level", default=argparse.SUPPRESS, help=level_help("warning"))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stowage`` (see ``parser_and_commands``)."""
    return parser_and_commands()[0]


def parser_and_commands() -> tuple[argparse.ArgumentParser, tuple[str, ...]]:
    """The argument parser of ``stowage`` and the names of its commands."""
    from ._exits import EXIT_STATUSES
    from ._worker import add_worker_commands

    parser = OneLineParser(
        prog="stowage",
        description="A runtime for long-running LLM agents.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    _global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for name, text, parts in _COMMANDS:
        sub.add_parser(name, help=text).later(_options(parts))
    add_worker_commands(sub)
    for name, text, parts in (*_LATER_COMMANDS, *_STORE_COMMANDS):
        sub.add_parser(name, help=text).later(_options(parts))
    return parser, tuple(sub.choices)
