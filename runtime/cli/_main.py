"""The ``stowage`` command line: ``main`` parses the words, runs the command's handler and turns
what it raised into one line and an exit status (``_exits``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._parser import build_parser, parser_and_commands
from ._parsing import hoist_globals, unknown_command
from ._store_args import open_cli_store, reader_store, settings_from, store_dir, store_spec

__all__ = ["build_parser", "configure_logging", "main", "settings_from"]


async def _show(args: argparse.Namespace) -> int:
    from ._inspect import show_main

    return await show_main(args)


async def _cost(args: argparse.Namespace) -> int:
    from ._cost import cost_main

    return await cost_main(args)


async def _check(args: argparse.Namespace) -> int:
    from ._inspect import check_main

    return await check_main(args)


async def _fork(args: argparse.Namespace) -> int:
    from ._fork import fork_main

    return await fork_main(args, open_cli_store(args))


async def _rewind(args: argparse.Namespace) -> int:
    from ._fork import rewind_main

    return await rewind_main(args, open_cli_store(args))


async def _run(args: argparse.Namespace) -> int:
    from ._turns import run_main

    return await run_main(args)


async def _resume(args: argparse.Namespace) -> int:
    from ._turns import resume_main

    return await resume_main(args)


async def _chat(args: argparse.Namespace) -> int:
    from ._turns import chat_main

    return await chat_main(args)


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

    store = reader_store(args)
    spec = store_spec(args)
    if spec.startswith(("postgresql://", "postgres://")):  # the driver only for its URL
        from stowage.storage import PostgresStore

        from ._store_admin import refuse_missing

        inner = getattr(store, "inner", store)  # a PostgreSQL schema, as a directory, must exist
        if isinstance(inner, PostgresStore):
            await refuse_missing(inner, spec, "list")
    return await list_main(args, store)


async def _context(args: argparse.Namespace) -> int:
    from ._sessions import context_main

    return await context_main(args, reader_store(args))


async def _export(args: argparse.Namespace) -> int:
    from ._sessions import export_main

    return await export_main(args, reader_store(args))


async def _compact(args: argparse.Namespace) -> int:
    from ._compact import compact_main

    return await compact_main(
        args,
        open_cli_store(args),
        store_dir=store_dir(store_spec(args)),
        durability=getattr(args, "durability", None),
    )


async def _milestone(args: argparse.Namespace) -> int:
    from ._compact import milestone_main

    return await milestone_main(
        args,
        open_cli_store(args),
        store_dir=store_dir(store_spec(args)),
        durability=getattr(args, "durability", None),
    )


async def _protect(args: argparse.Namespace) -> int:
    from ._protected import protect_main

    return await protect_main(
        args,
        open_cli_store(args),
        store_dir=store_dir(store_spec(args)),
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
    "run": _run,
    "resume": _resume,
    "chat": _chat,
    "list": _list,
    "context": _context,
    "export": _export,
    "show": _show,
    "cost": _cost,
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
    handler = _HANDLERS[args.command]
    if args.command in ("run", "resume", "chat", "worker") and args.tools_from:
        sys.path.insert(0, os.getcwd())  # like "python -m": the user's own modules are importable
    return _run_handler(handler, args)


def _run_handler(handler: Callable[[argparse.Namespace], Awaitable[int]], args: Any) -> int:
    """Run ``handler`` on ``args``; what it raises becomes one line and an exit status."""
    from ._exits import EXIT_STORE

    status = _run_command(handler, args)
    if status != EXIT_STORE:
        _said_after.say()
    return status


def _run_command(handler: Callable[[argparse.Namespace], Awaitable[int]], args: Any) -> int:
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
            return int(anyio.run(handler, args))
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
