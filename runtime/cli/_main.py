"""The ``stowage`` command line: run, resume, show, check, protect, demo."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from stowage._version import DISTRIBUTION, __version__
from stowage.core import (
    AssistantDelta,
    ConfigError,
    Event,
    HistoryCompacted,
    LogRepaired,
    Microcompacted,
    Settings,
    StowageError,
    configure_logging,
    validate_session_id,
)
from stowage.facade import Runtime
from stowage.load import add_load_arguments, main_load
from stowage.policy import check_log
from stowage.storage import encode_record, open_store
from stowage.tools import ToolRegistry

from ._demo import run_demo
from ._policy_options import (
    add_compact_arguments,
    add_policy_options,
    compact_main,
    policy_settings,
)
from ._protected import add_protect_options, protect_main
from ._show import render_transcript

__all__ = ["main"]


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", default=".stowage", help="log store directory (default ./.stowage)"
    )
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument(
        "--log-level", default="warning", help="debug, info, warning (default), error"
    )


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default="scripted", help="'scripted' (offline, default) or a model name"
    )
    parser.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint (else OPENAI_BASE_URL)"
    )
    parser.add_argument(
        "--api-key", default=None, help="API key (else OPENAI_API_KEY); never logged"
    )
    parser.add_argument("--wire-api", choices=["chat", "responses"], default="chat")
    add_policy_options(parser)
    parser.add_argument("--no-auto-compact", action="store_true", help="never compact on its own")
    parser.add_argument("--system", default=None, help="system message for a new session")
    parser.add_argument(
        "--tools",
        choices=["workspace", "none"],
        default="workspace",
        help="read-only tools over the current directory (default) or none",
    )
    parser.add_argument(
        "--tools-from",
        default=None,
        metavar="MODULE:NAME",
        help="your own tools: a ToolRegistry (or a function returning one) importable as MODULE:NAME",
    )
    parser.add_argument(
        "--durability",
        choices=["fsync", "none"],
        default="fsync",
        help="fsync every batch (default) or leave it to the OS",
    )
    parser.add_argument("--no-stream", action="store_true", help="ask for whole responses")
    parser.add_argument(
        "--pin", action="store_true", help="keep this message verbatim through compactions"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stowage``."""
    parser = argparse.ArgumentParser(
        prog="stowage", description="A runtime for long-running LLM agents."
    )
    parser.add_argument(
        "--version", action="version", version=f"stowage {__version__} ({DISTRIBUTION})"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start a session (or continue --session) with MESSAGE")
    run.add_argument("message")
    run.add_argument("--session", default=None, help="session id (letters, digits, - and _)")
    _model_options(run)
    add_protect_options(run)
    _common(run)

    resume = sub.add_parser("resume", help="continue session ID with MESSAGE")
    resume.add_argument("session")
    resume.add_argument("message")
    _model_options(resume)
    add_protect_options(resume)
    _common(resume)

    show = sub.add_parser("show", help="print the transcript and every compaction of session ID")
    show.add_argument("session")
    show.add_argument("--json", action="store_true", help="the records as JSON lines")
    _common(show)

    protect = sub.add_parser(
        "protect", help="change the objective or constraints of session ID and print its state"
    )
    protect.add_argument("session")
    add_protect_options(protect, drop=True)
    _common(protect)

    compact = sub.add_parser("compact", help="compact session ID now, optionally with --focus")
    add_compact_arguments(compact)
    _model_options(compact)
    _common(compact)

    check = sub.add_parser("check", help="verify the log of session ID; exit 1 if it is not sound")
    check.add_argument("session")
    _common(check)

    demo = sub.add_parser("demo", help="an offline long session that compacts several times")
    demo.add_argument("--turns", type=int, default=10)
    demo.add_argument("--compact-threshold", type=int, default=None, help="the seed's rule instead")
    demo.add_argument("--context-window", type=int, default=6000)
    _common(demo)

    load = sub.add_parser(
        "load", help="many sessions x turns with compaction, then verify every log; exit 1 if not"
    )
    add_load_arguments(load)
    load.add_argument("--log-format", choices=["console", "json"], default="console")
    load.add_argument("--log-level", default="warning", help="debug, info, warning, error")
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from parsed options. Raises ``ConfigError`` for bad values."""
    return Settings(
        model=args.model,
        base_url=args.base_url or os.environ.get("OPENAI_BASE_URL"),
        api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
        wire_api=args.wire_api,
        store=Path(args.store),
        durability=args.durability,
        system=args.system,
        tools=args.tools,
        workspace=Path.cwd(),
        **policy_settings(args),
        auto_compact=not args.no_auto_compact,
        stream=not args.no_stream,
    )


def _printer(stream_answer: bool) -> Any:
    def on_event(event: Event) -> None:
        if isinstance(event, AssistantDelta) and stream_answer:
            sys.stdout.write(event.text)
            sys.stdout.flush()
        elif isinstance(event, HistoryCompacted):
            print(
                f"\n[compacted ({event.kind}) at round {event.round}: tokens {event.tokens_before} -> "
                f"{event.tokens_after}{' (estimated)' if event.estimated else ''}, removed {event.removed}, "
                f"retained {event.retained}; {event.reason}]",
                file=sys.stderr,
            )
        elif isinstance(event, Microcompacted):
            print(
                f"\n[microcompacted {event.stubbed} tool outputs: {event.reason}]", file=sys.stderr
            )
        elif isinstance(event, LogRepaired):
            print(
                f"[log repaired: cut a torn last line ({event.bytes_removed} bytes) at {event.path}:{event.line}]",
                file=sys.stderr,
            )

    return on_event


def tools_from_spec(spec: str) -> ToolRegistry:
    """Import ``MODULE:NAME``: a ``ToolRegistry`` or a function returning one.

    Raises ``ConfigError`` naming the spec when it cannot be imported or is not a registry.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--tools-from {spec!r}: expected MODULE:NAME, e.g. mytools:registry")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--tools-from {spec!r}: cannot import it: {exc}") from exc
    registry = target() if callable(target) and not isinstance(target, ToolRegistry) else target
    if not isinstance(registry, ToolRegistry):
        raise ConfigError(
            f"--tools-from {spec!r}: expected a ToolRegistry, got {type(registry).__name__}"
        )
    return registry


async def _run(args: argparse.Namespace, *, resume: bool) -> int:
    settings = settings_from(args)
    tools = tools_from_spec(args.tools_from) if args.tools_from else None
    async with Runtime(settings, tools=tools) as rt:
        rt.subscribe(_printer(stream_answer=settings.stream))
        if resume:
            session = await rt.resume(args.session)
        elif args.session is not None:
            session = await rt.open(args.session)
        else:
            session = await rt.create(objective=args.objective, constraints=args.constraint)
            print(f"session: {session.id}", file=sys.stderr)
        if resume or args.session is not None:
            # the user's word, logged before the turn; repeating an existing entry is a no-op
            await session.protect(objective=args.objective, add_constraints=args.constraint)
        result = await session.send(args.message, pin=args.pin)
        if not settings.stream:
            sys.stdout.write(result.text)
        sys.stdout.write("\n")
        if result.stopped != "answered":
            print(f"[turn stopped: {result.stopped} after {result.rounds} rounds]", file=sys.stderr)
    return 0


async def _show(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    try:
        read = await store.read(validate_session_id(args.session))
    finally:
        await store.aclose()
    if args.json:
        for record in read.records:
            sys.stdout.write(encode_record(record).decode())
    else:
        sys.stdout.write(render_transcript(args.session, read.records))
    return 0


async def _check(args: argparse.Namespace) -> int:
    session_id = validate_session_id(args.session)
    store = open_store(args.store)
    try:
        full = await store.read(session_id)
        tail = await store.read_tail(session_id)
    finally:
        await store.aclose()
    if full.torn_tail is not None:
        print(f"repaired: cut a torn last line at {full.torn_tail.path}:{full.torn_tail.line}")
    report = check_log(session_id, full.records, tail.records)
    print(
        f"{session_id}: {report.records} records, {report.compactions} compactions, "
        f"{report.history_items} items in history"
    )
    for note in report.notes:
        print(f"note: {note}")
    for problem in report.problems:
        print(f"problem: {problem}")
    print("ok" if report.ok else "NOT OK")
    return 0 if report.ok else 1


async def _demo(args: argparse.Namespace) -> int:
    return await run_demo(
        store=Path(args.store),
        turns=args.turns,
        threshold=args.compact_threshold,
        context_window=args.context_window,
    )


async def _load(args: argparse.Namespace) -> int:
    return await main_load(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stowage`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        configure_logging(args.log_format, args.log_level)
    except ValueError as exc:
        parser.error(str(exc))
    handlers = {
        "run": lambda: _run(args, resume=False),
        "resume": lambda: _run(args, resume=True),
        "show": lambda: _show(args),
        "check": lambda: _check(args),
        "compact": lambda: compact_main(args, settings_from(args)),
        "protect": lambda: protect_main(args),
        "demo": lambda: _demo(args),
        "load": lambda: _load(args),
    }
    if args.command in ("run", "resume") and args.tools_from:
        sys.path.insert(0, os.getcwd())  # like "python -m": the user's own modules are importable
    try:
        return int(anyio.run(handlers[args.command]))
    except StowageError as exc:
        print(f"stowage: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stowage: interrupted; committed rounds are in the log", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
