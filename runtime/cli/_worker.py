"""``stowage worker``, ``send`` and ``workers``: workers sharing a PostgreSQL store, their senders,
and the list of those that are up.

``add_worker_commands(subparsers)`` adds the three to the ``stowage`` parser; each parsed namespace
carries its handler as ``args.handler`` (an async function of the namespace returning the exit
status). ``python -m stowage.cli._worker worker|send ...`` runs them on their own.

``workers`` reads the store alone (``PostgresStore.live_workers``): each worker's own row, which it
rewrites every lease-renew interval with its rounds so far (so an idle worker is listed too,
and rounds/s is the difference of its last two beats), joined to the live leases (sessions
held, oldest grant, newest renewal). A store object holding leases that never beats (a plain
``stowage run``) is listed from its leases, without rounds/s. A worker that stopped deleted its
row; one killed drops off once its row and leases expire (the lease TTL).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._parsing import fill_later, log_options

if TYPE_CHECKING:
    from anyio.abc import TaskStatus
    from stowage.worker import Worker


from datetime import UTC, datetime

__all__ = [
    "add_worker_commands",
    "catch_stop_signals",
    "format_workers",
    "main",
    "postgres_url",
    "send_main",
    "store_options",
    "worker_main",
    "workers_main",
]


class _StopSignals:
    """SIGTERM and SIGINT as ``stowage worker`` counts them before its event loop listens."""

    def __init__(self) -> None:
        self.count = 0

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._count)

    def _count(self, signum: int, frame: object) -> None:
        self.count += 1


_STOP = _StopSignals()


def catch_stop_signals() -> None:
    """Count SIGTERM and SIGINT from now on instead of dying of them (``stowage worker`` calls
    this first thing; ``worker_main`` acts on what was counted)."""
    _STOP.install()


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
        return value

    return parse


def store_options(parser: argparse.ArgumentParser) -> None:
    """``--store`` (a PostgreSQL URL, or $STOWAGE_STORE) and ``--schema``."""
    from_env = os.environ.get("STOWAGE_STORE")
    parser.add_argument(
        "--store",
        default=from_env,
        required=from_env is None,
        help="the shared store: postgresql://user@host:port/db, or $STOWAGE_STORE "
        "(a password is never shown; PGPASSWORD works)",
    )
    parser.add_argument(
        "--schema",
        default=None,
        help="schema of the store's tables (default: the URL's ?schema=NAME, else public)",
    )


def add_worker_commands(subparsers: Any) -> None:
    """Add ``worker``, ``send`` and ``workers`` to the subparsers of ``stowage`` (their options
    are added when they are used, see ``_parsing``)."""
    for name, text, options, handler in (
        (
            "worker",
            "serve the sessions of a PostgreSQL store that have messages queued, until SIGTERM",
            _worker_options,
            worker_main,
        ),
        (
            "send",
            "queue MESSAGE for session ID; --wait prints the answer once committed",
            _send_options,
            send_main,
        ),
        (
            "workers",
            "list the workers of a PostgreSQL store and the sessions they hold",
            _workers_options,
            workers_main,
        ),
    ):
        command = subparsers.add_parser(name, help=text)
        fill_later(command, options)
        command.set_defaults(handler=handler)


def _worker_options(worker: argparse.ArgumentParser) -> None:
    from stowage.core import add_limit_options
    from stowage.facade import GC_YOUNG_THRESHOLD
    from stowage.worker import WORKER_LIMITS, WorkerOptions

    from ._run_options import add_model_options

    store_options(worker)
    log_options("info")(worker)
    # the worker's pacing and the runtime's limits: flags made from their declarations
    add_limit_options(worker, WorkerOptions())
    add_limit_options(worker, WORKER_LIMITS)
    worker.add_argument(
        "--lease-ttl",
        type=_positive(float),
        default=30.0,
        help="seconds a session's lease lasts past its last renewal: how soon another worker "
        "takes over from a dead one (default 30)",
    )
    worker.add_argument(
        "--gc-threshold",
        type=_positive(int),
        default=GC_YOUNG_THRESHOLD,
        help=(
            f"young-generation threshold of Python's cyclic GC (default {GC_YOUNG_THRESHOLD}; "
            "the middle generation is collected 10 times less often than Python's default; "
            "see stowage.tune_gc)"
        ),
    )
    add_model_options(worker, system_help="system message of the sessions a worker creates")


def _send_options(send: argparse.ArgumentParser) -> None:
    send.add_argument("session")
    send.add_argument("message")
    store_options(send)
    log_options("warning")(send)
    send.add_argument(
        "--create", action="store_true", help="a session with no log gets one (worker settings)"
    )
    send.add_argument("--wait", action="store_true", help="print the answer once it is committed")
    send.add_argument(
        "--json",
        action="store_true",
        help="with --wait: the turn as JSON lines on stdout (as 'stowage run --json' writes them)",
    )
    send.add_argument(
        "--timeout",
        type=_positive(float),
        default=None,
        help="with --wait: give up after this many seconds (the message stays queued)",
    )
    send.add_argument(
        "--message-id", default=None, help="the message's id (default: a new uuid); retry with it"
    )
    send.add_argument(
        "--pin", action="store_true", help="keep this message verbatim through compactions"
    )


def postgres_url(url: str) -> str:
    """``url`` when it names a PostgreSQL store; ``ConfigError`` saying so otherwise."""
    from stowage.core import ConfigError, redact_url

    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            f"--store {redact_url(url)!r}: workers share a PostgreSQL store (postgresql://...)"
        )
    return url


async def worker_main(args: argparse.Namespace) -> int:
    """Run a worker until SIGTERM or SIGINT; 0 once it drained and gave every lease back."""
    import anyio
    from stowage.core import RuntimeLimits, limits_from_args
    from stowage.facade import tune_gc
    from stowage.storage import PostgresStore
    from stowage.worker import Worker, WorkerOptions

    from ._run_options import settings_from_options, tools_from_spec

    options = limits_from_args(WorkerOptions, args)
    store = PostgresStore(
        postgres_url(args.store),
        schema=args.schema,
        lease_ttl=args.lease_ttl,
        max_size=max(4, min(args.concurrency, 20)),
    )
    # with many live sessions the cyclic GC is the main cost; see README "Many sessions"
    tune_gc(args.gc_threshold)
    worker = Worker(
        store,
        settings_from_options(args),
        options=options,
        tools=tools_from_spec(args.tools_from) if args.tools_from else None,
        limits=limits_from_args(RuntimeLimits, args),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(_drain_on_signal, worker)
        await worker.run()
        tg.cancel_scope.cancel()
    return 0


async def _drain_on_signal(worker: Worker, *, task_status: TaskStatus[None]) -> None:
    """The first SIGTERM or SIGINT drains the worker; a second one interrupts it at once."""
    import anyio

    signals_seen = 0

    def take(name: str) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            print(f"stowage worker: {name} again: interrupting", file=sys.stderr)
            worker.interrupt()
        else:
            print(f"stowage worker: {name}: draining (again to interrupt)", file=sys.stderr)
            worker.drain()

    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            # the receiver is in place: what came before it is read once, and nothing is lost
            task_status.started()
            early, _STOP.count = _STOP.count, 0
            for _ in range(early):
                take("signal before start-up ended")
            async for signum in signals:
                take(signal.Signals(signum).name)
    finally:
        _STOP.install()  # until the process exits, a late signal is only counted


async def send_main(args: argparse.Namespace) -> int:
    """Queue the message; with ``--wait`` print the answer (``--json``: the turn's lines). 1 when it
    failed or timed out."""
    import anyio
    from stowage.core import ConfigError
    from stowage.worker import Client, MessageFailed

    from ._chat_view import StatusLine

    if args.json and not args.wait:
        raise ConfigError("send --json takes --wait: the lines are those of the answered turn")
    client = Client(postgres_url(args.store), schema=args.schema)
    status = StatusLine()
    if args.wait:
        status.show(f"waiting for a worker to answer in session {args.session}")
    try:
        with anyio.fail_after(args.timeout if args.wait else None):
            sent = await client.send(
                args.session,
                args.message,
                wait=args.wait,
                create=args.create,
                pin=args.pin,
                message_id=args.message_id,
            )
    except MessageFailed as exc:
        status.hide()
        print(f"stowage: {exc}", file=sys.stderr)
        return 1
    except TimeoutError:
        status.hide()
        print(
            f"stowage: no answer within {args.timeout} s; the message stays queued", file=sys.stderr
        )
        return 1
    status.hide()
    if not sent.queued:
        print(f"note: message {sent.message_id} was queued before; not again", file=sys.stderr)
    if args.json:
        await _turn_lines(args, sent.message_id)
    elif args.wait:
        print(f"message: {sent.message_id}", file=sys.stderr)
        sys.stdout.write((sent.answer or "") + "\n")
    else:
        print(sent.message_id)
    return 0


async def _turn_lines(args: argparse.Namespace, message_id: str) -> None:
    """The JSON lines of the turn that answered ``message_id``, read from the session's log."""
    import json

    from stowage.core import lineage_store
    from stowage.storage import PostgresStore

    from ._json_stream import record_lines
    from ._sessions import turn_figures

    store = lineage_store(PostgresStore(postgres_url(args.store), schema=args.schema))
    try:
        records = (await store.read(args.session, repair=False)).records
    finally:
        await store.aclose()
    figures = turn_figures(args.session, records)
    for line in record_lines(args.session, records, message_id, figures):
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stowage.cli._worker worker|send ...``; returns the exit status."""
    import anyio
    from stowage.core import StowageError, configure_logging

    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["worker"]:  # before its options import the runtime
        catch_stop_signals()
    parser = argparse.ArgumentParser(prog="stowage")
    add_worker_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        configure_logging(args.log_format, args.log_level)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        return int(anyio.run(args.handler, args))
    except StowageError as exc:
        print(f"stowage: error: {exc}", file=sys.stderr)
        return 2


def _workers_options(workers: argparse.ArgumentParser) -> None:

    store_options(workers)
    log_options("warning")(workers)
    workers.add_argument("--json", action="store_true", help="one JSON object per worker")


def format_workers(rows: list[dict[str, Any]], *, now: datetime) -> str:
    """The table ``stowage workers`` prints (a header, then one line per worker). Pure."""
    lines = [
        f"{'PID':>8}  {'HOST':<24} {'SESSIONS':>8}  {'ROUNDS/S':>8}  {'RENEWED':>12}  {'SINCE':>14}"
    ]
    for row in rows:
        rate = row.get("rounds_per_s")
        lines.append(
            f"{row['pid'] or '-':>8}  {row['host'] or '-'!s:<24} {row['sessions']:>8}  "
            f"{'-' if rate is None else f'{rate:.1f}':>8}  "
            f"{_ago(row['renewed'], now):>12}  {_ago(row['since'], now):>14}"
        )
    if not rows:
        lines.append("(no worker is up and no session is held)")
    return "\n".join(lines)


def _ago(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    seconds = max(0.0, (now - when).total_seconds())
    return f"{seconds:.1f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


async def workers_main(args: argparse.Namespace) -> int:
    """Print the live workers of ``--store``; 0, or 2 (an error line) when it cannot be read
    or does not exist."""
    import orjson
    from stowage.storage import PostgresStore

    from ._store_admin import refuse_missing

    url = postgres_url(args.store)
    store = PostgresStore(url, schema=args.schema, min_size=1, max_size=1)
    await refuse_missing(store, url, "workers")
    try:
        rows = await store.live_workers()
    finally:
        await store.aclose()
    if args.json:
        for row in rows:
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
    else:
        print(format_workers(rows, now=datetime.now(UTC)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
