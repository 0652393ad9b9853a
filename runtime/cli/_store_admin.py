"""``stowage archive`` and ``stowage migrate``: keeping a long-lived SQL store's hot table small.

``archive`` moves the records that a compaction older than the retention covers into the
archive table, which resume never reads and ``show``/``export``/``fork``/``recall_artifact``
still do (``stowage.storage``'s ``_archive`` says what moves). The retention is
``--older-than`` (``30d``, ``12h``, ``3600``), else the ``archive_after`` setting; neither
given, nothing is archived. ``migrate --partitions N`` hash-partitions PostgreSQL's records
table by session.

A JSONL store is refused: its log is one append-only file per session, which resume already
reads from the newest compaction's byte offset on (the file is not re-read whole), so moving
lines out would buy little and break the one-file-per-log rule every JSONL tool relies on.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stowage.storage import PostgresStore

__all__ = [
    "archive_main",
    "migrate_main",
    "parse_duration",
    "refuse_missing",
]

_STORE_ENV = "STOWAGE_STORE"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

_NOT_SQL = (
    "{command} needs a SQLite (sqlite:///FILE) or PostgreSQL (postgresql://…) store, not the "
    "JSONL directory {spec!r}: a JSONL log is one file per session that resume already reads "
    "from its newest compaction on"
)


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a number of seconds, as a timedelta. Raises
    ``ConfigError`` naming the text and the accepted forms for anything else, and for a duration
    that is not positive."""
    from stowage.core import ConfigError

    cleaned = text.strip().lower()
    unit = cleaned[-1:] if cleaned[-1:] in _UNITS else "s"
    number = cleaned[:-1] if cleaned[-1:] in _UNITS else cleaned
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise ConfigError(
            f"duration {text!r} is not a number of seconds or a number with s, m, h, d or w"
        ) from None
    if not 0 < seconds < float("inf"):
        raise ConfigError(f"duration {text!r} must be positive")
    return timedelta(seconds=seconds)


async def _open_sql_store(args: argparse.Namespace, command: str) -> Any:
    """The SQLite or PostgreSQL store ``--store`` names (PostgreSQL only for ``migrate``);
    ``ConfigError`` for another, and for one that does not exist (see ``refuse_missing``)."""
    import anyio  # the parser imports this module: ``stowage --version`` loads no runtime
    from stowage.core import ConfigError
    from stowage.storage import PostgresStore, SqliteStore

    from ._config import load_config

    spec = args.store or os.environ.get(_STORE_ENV) or load_config().store or ""
    if spec.startswith(("postgresql://", "postgres://")):
        store = PostgresStore(spec, schema=args.schema, min_size=1, max_size=2)
        await refuse_missing(store, spec, command)
        return store
    if command == "migrate":
        raise ConfigError("migrate --partitions needs a PostgreSQL store (postgresql://…)")
    if spec.startswith("sqlite:///") and len(spec) > len("sqlite:///"):
        path = spec.removeprefix("sqlite:///")
        named = await anyio.Path(path).expanduser()
        if not await named.exists():
            where = await named.resolve()
            why = _CREATES.format(command=command)
            raise ConfigError(f"store sqlite:///{where}: no such file; {why}")
        return SqliteStore(path)
    raise ConfigError(_NOT_SQL.format(command=command, spec=spec))


#: what a command that keeps a store says of one that does not exist
_CREATES = (
    "'stowage {command}' creates no store ('stowage run' and 'stowage worker' do): name an "
    "existing one with --store or STOWAGE_STORE"
)


async def refuse_missing(store: PostgresStore, spec: str, command: str) -> None:
    """``ConfigError`` naming ``spec`` (credentials hidden) and what of it is missing when the
    PostgreSQL ``store`` does not exist: a command that keeps a store (``archive``,
    ``migrate``, ``workers``) creates none, so a typo is never a new, empty store. Closes
    ``store`` before raising; raises its ``StoreError`` for any other failure."""
    from urllib.parse import urlsplit

    from stowage.core import ConfigError, redact_url

    try:
        missing = await store.missing()
    except BaseException:
        await store.aclose()
        raise
    if missing is None:
        return
    await store.aclose()
    what = {
        "database": f"no such database {urlsplit(spec).path.lstrip('/') or '(the default)'!r}",
        "schema": f"no such schema {store.schema!r}",
        "tables": f"schema {store.schema!r} holds no stowage store",
    }[missing]
    raise ConfigError(f"store {redact_url(spec)}: {what}; {_CREATES.format(command=command)}")


async def archive_main(args: argparse.Namespace) -> int:
    """Archive the store's covered records; prints one line per session moved and a total.
    Returns 0; raises ``ConfigError`` (exit 2) for no retention, a JSONL store or one that
    does not exist."""
    from stowage.core import ConfigError

    from ._config import load_config

    store = await _open_sql_store(args, "archive")
    try:
        if args.older_than is not None:
            older_than = parse_duration(args.older_than)
        else:
            # a key of the configuration made from the declared settings (no static attribute)
            seconds: float | None = getattr(load_config(), "archive_after", None)
            if seconds is None:
                raise ConfigError(
                    "archiving is off: give --older-than DURATION, or set archive_after "
                    "(seconds) in stowage.toml or STOWAGE_ARCHIVE_AFTER"
                )
            older_than = timedelta(seconds=seconds)
        moved_so_far: dict[str, int] = {}

        def on_batch(session_id: str, moved: int) -> None:
            moved_so_far[session_id] = moved_so_far.get(session_id, 0) + moved
            if sys.stderr.isatty():
                print(
                    f"\r{session_id}: {moved_so_far[session_id]:,} moved", end="", file=sys.stderr
                )

        if args.batch < 1:
            raise ConfigError(f"--batch must be at least 1, got {args.batch}")
        reports = await store.archive(
            older_than=older_than, session_id=args.session, batch=args.batch, on_batch=on_batch
        )
    finally:
        await store.aclose()
    if moved_so_far and sys.stderr.isatty():
        print(file=sys.stderr)
    total = 0
    for report in reports:
        total += report.moved
        if report.moved:
            print(
                f"{report.session_id}: moved {report.moved:,} records "
                f"(archived through seq {report.archived_through:,})"
            )
    sessions = f"{len(reports):,} session{'' if len(reports) == 1 else 's'}"
    print(f"archived {total:,} records of {sessions}")
    return 0


async def migrate_main(args: argparse.Namespace) -> int:
    """Partition a PostgreSQL store's records table; prints what it did. Returns 0; raises
    ``ConfigError`` (exit 2) for a store that is not PostgreSQL or does not exist, or another
    partition count."""
    store = await _open_sql_store(args, "migrate")

    def on_progress(copied: int, total: int) -> None:
        print(f"copied {copied:,} of about {total:,} records", file=sys.stderr)

    try:
        done = await store.migrate_partitions(args.partitions, on_progress=on_progress)
    finally:
        await store.aclose()
    if done:
        print(f"records table partitioned by session into {args.partitions} partitions")
    else:
        print(f"records table has {args.partitions} partitions already: nothing to do")
    return 0
