"""The ``stowage`` command line: ``main`` parses the words, runs the command's handler and turns
what it raised into one line and an exit status (``_exits``).

Every command names its store the same way (``_store_args``); the parser and each command's
options are in ``_parser``; the commands that run turns in ``_turns``, those that read a log
back in ``_show`` and ``_sessions``, and each other command in a module of its own. Each
handler (``_HANDLERS``) is imported when its command runs, so ``stowage --version`` and ``--help``
load argparse and little else, and ``stowage list`` or ``show`` the store and the records, not
the model client or the actors.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._parser import build_parser, parser_and_commands
from ._parsing import hoist_globals, unknown_command
from ._store_args import settings_from

__all__ = ["build_parser", "configure_logging", "main", "settings_from"]


async def _fake_server(args: argparse.Namespace) -> int:
    from stowage.testing.fake_server import serve

    return await serve(args)


#: each command's handler as ``module:function``, imported when the command runs
_HANDLERS = {
    "run": "._turns:run_main",
    "resume": "._turns:resume_main",
    "chat": "._turns:chat_main",
    "list": "._sessions:list_main",
    "context": "._sessions:context_main",
    "export": "._export:export_main",
    "show": "._show:show_main",
    "cost": "._cost:cost_main",
    "check": "._show:check_main",
    "fork": "._fork:fork_main",
    "rewind": "._fork:rewind_main",
    "compact": "._compact:compact_main",
    "milestone": "._compact:milestone_main",
    "protect": "._compact:protect_main",
    "demo": "._demo:demo_main",
    "load": "stowage.load:main_load",
    "worker": "._worker:worker_main",
    "workers": "._worker:workers_main",
    "send": "._worker:send_main",
    "console": "._console:console_main",
    "approve": "._approve:approval_main",
    "deny": "._approve:approval_main",
    "archive": "._store_admin:archive_main",
    "migrate": "._store_admin:migrate_main",
}


def _handler(command: str) -> Callable[[argparse.Namespace], Awaitable[int]]:
    if command == "fake-server":
        return _fake_server
    module, _, name = _HANDLERS[command].partition(":")
    handler: Callable[[argparse.Namespace], Awaitable[int]]
    handler = getattr(importlib.import_module(module, __package__), name)
    return handler


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
        # a store that refuses a whole batch (SQLite, PostgreSQL: one transaction) fails it
        # with the error the command's line names
        "append_failed",
    }
)


# a torn last line cut on open: these commands say so in a line of their own, so the store's
# log line would say it twice; any other command (a worker's operator) keeps the log line
_REPAIR_SAID = frozenset({"log_torn_tail_repaired"})
_SAY_REPAIRS = frozenset(
    {"run", "resume", "chat", "compact", "milestone", "protect", "approve", "deny", "check"}
)


@dataclass(eq=False)
class _SaidAfter:
    """Warnings held back until the command ends: said then, unless the command's own error
    line names the store failure they come from (a full disk fails the append, then the
    lease's release: one failure, one line)."""

    names: frozenset[str] = frozenset({"lease_release_failed"})
    #: the warnings are held back (quiet as log lines) for this command
    held: bool = False
    lines: list[str] = field(default_factory=list)

    def hear(self, name: str, fields: Mapping[str, Any]) -> None:
        if self.held and name in self.names:
            self.lines.append(
                f"stowage: warning: session {fields.get('session')}: its writer lease was not "
                f"given back ({fields.get('error')}); it lapses when its time runs out"
            )

    def say(self) -> None:
        for line in self.lines:
            print(line, file=sys.stderr)
        self.lines.clear()


_said_after = _SaidAfter()


def _status_tap(name: str, fields: Mapping[str, Any]) -> None:
    """Retries show on the status line (a terminal only): what failed and how long we wait."""
    _said_after.hear(name, fields)
    if name == "model_call_retry":
        delay = fields.get("delay")
        wait = f"{float(delay):.1f} s" if isinstance(delay, int | float) else "a moment"
        from ._turns import show_status

        show_status(
            f"waiting {wait} to retry (attempt {fields.get('attempt')}: {fields.get('error')})"
        )


#: the commands that read a store and most often log nothing: structlog is imported, and set up,
#: at their first log line (every logger they use is a ``stowage.core.get_logger`` one)
_LOG_LAZILY = frozenset({"list", "show", "context"})


def configure_logging(log_format: str, level: str, *, lazily: bool = False, **kwargs: Any) -> None:
    """``stowage.core.configure_logging``, imported when a command runs."""
    if not lazily:
        _import_structlog_without_rich()
    from stowage.core import configure_logging as configure

    configure(log_format, level, lazily=lazily, **kwargs)  # type: ignore[arg-type]


def _import_structlog_without_rich() -> None:
    """Import structlog with rich hidden from it. structlog's package imports its ``dev`` and
    ``tracebacks`` modules, and they import rich (as long to load as the rest of ``stowage list``)
    whenever it is installed, for pretty exceptions; the command's log lines never use them
    (``format_exc_info`` makes each exception text before the renderer sees it)."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # ``import rich`` raises ImportError
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stowage`` console script; returns the exit status."""
    words = hoist_globals(sys.argv[1:] if argv is None else list(argv))
    if words[:1] == ["worker"]:  # before its options import the runtime: a stop signal drains it
        from ._worker import catch_stop_signals

        catch_stop_signals()
    parser, commands = parser_and_commands()
    wrong = unknown_command(words, commands)
    if wrong is not None:
        print(f"stowage: error: {wrong}", file=sys.stderr)
        return 2
    args, extra = parser.parse_known_args(words)
    if extra:  # the command's own line: its name, and where its options are listed
        command = f"stowage {args.command}"
        print(
            f"{command}: error: unrecognized arguments: {' '.join(extra)} "
            f"('{command} --help' lists the options)",
            file=sys.stderr,
        )
        return 2
    try:
        quiet = _REPORTED_ONCE if args.log_level.lower() in ("warning", "error") else frozenset()
        if quiet and args.command in _SAY_REPAIRS:
            quiet = quiet | _REPAIR_SAID
        _said_after.held, _said_after.lines = bool(quiet), []
        quiet = quiet | _said_after.names if quiet else quiet
        configure_logging(
            args.log_format,
            args.log_level,
            quiet=quiet,
            tap=_status_tap,
            lazily=args.command in _LOG_LAZILY,
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.command in ("run", "resume", "chat", "worker") and args.tools_from:
        sys.path.insert(0, os.getcwd())  # like "python -m": the user's own modules are importable
    from ._exits import EXIT_STORE

    status = _run_command(args)
    if status != EXIT_STORE:
        _said_after.say()
    return status


def _run_command(args: argparse.Namespace) -> int:
    """Run the command's handler; what it raises becomes one line and an exit status."""
    import anyio

    from ._exits import (
        EXIT_INTERRUPTED,
        EXIT_OK,
        EXIT_USAGE,
        error_line,
        exit_status,
        os_error_line,
        stowage_error,
    )
    from ._turns import take_down_status

    try:
        try:
            return int(anyio.run(_handler(args.command), args))
        finally:
            take_down_status()
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
        if error is not None:
            print(error_line(error), file=sys.stderr)
            return exit_status(error)
        line = os_error_line(exc)
        if line is None:
            raise  # a bug: its traceback is worth having
        print(line, file=sys.stderr)
        return EXIT_USAGE


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
