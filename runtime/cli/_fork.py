"""``stowage fork ID`` and ``stowage rewind ID --to ROUND``: new ways to go on from a round."""

from __future__ import annotations

import argparse
import sys

from stowage.core import ForkedFromRecord, SessionNotFound, lineage_store, validate_session_id

from ._store_args import open_cli_store

__all__ = ["add_fork_arguments", "add_rewind_arguments", "fork_main", "rewind_main"]


def _round(text: str) -> int:
    """A round number as argparse takes it: an integer from 1 (argparse says the error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a round number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"rounds count from 1, got {value}")
    return value


def add_fork_arguments(parser: argparse.ArgumentParser) -> None:
    """``stowage fork ID [--at ROUND] [--as NEW_ID]``."""
    parser.add_argument("session", help="the session to fork (it is only read)")
    parser.add_argument(
        "--at",
        type=_round,
        default=None,
        metavar="ROUND",
        help="fork at the end of this committed round (default: the newest)",
    )
    parser.add_argument(
        "--as",
        dest="new_id",
        default=None,
        metavar="NEW_ID",
        help="the new session's id (default: ID-fork-N, the first that is free)",
    )


def add_rewind_arguments(parser: argparse.ArgumentParser) -> None:
    """``stowage rewind ID --to ROUND``."""
    parser.add_argument("session", help="the session to rewind")
    parser.add_argument(
        "--to",
        dest="to_round",
        type=_round,
        required=True,
        metavar="ROUND",
        help="continue from the end of this committed round; what came after stays in the log "
        "as a discarded branch ('stowage show' marks it)",
    )


async def fork_main(args: argparse.Namespace) -> int:
    """Fork ``args.session`` at ``args.at`` as ``args.new_id``; the new id goes to stdout. Raises
    ``InvalidSessionId``, ``SessionNotFound``, ``ConfigError`` for a round the session has not
    committed, ``SessionExists``, ``CorruptLogError``."""
    store = lineage_store(open_cli_store(args))
    parent = validate_session_id(args.session)
    try:
        child = await store.fork(parent, args.new_id, at_round=args.at)
        forked = (await store.inner.read(child, repair=False)).records[0]
    finally:
        await store.aclose()
    assert isinstance(forked, ForkedFromRecord)
    sys.stdout.write(f"{child}\n")
    print(
        f"forked {parent} at the end of round {forked.through_round} as {child}; continue "
        f"it with 'stowage resume {child} MESSAGE' ({parent} is unchanged)",
        file=sys.stderr,
    )
    return 0


async def rewind_main(args: argparse.Namespace) -> int:
    """Rewind ``args.session`` to the end of round ``args.to_round``, under its writer lease. Raises
    ``InvalidSessionId``, ``SessionNotFound``, ``SessionBusy`` naming the writer when the session is
    running elsewhere, ``ConfigError`` for a round it has not committed or already ends at."""
    store = lineage_store(open_cli_store(args))
    session_id = validate_session_id(args.session)
    try:
        if not await store.exists(session_id):  # acquire would say so less plainly
            raise SessionNotFound(f"no session {session_id!r} in this store")
        async with await store.acquire(session_id):
            record = await store.rewind(session_id, args.to_round)
    finally:
        await store.aclose()
    print(
        f"{session_id}: rewound to round {record.to_round}; records #{record.to_seq + 1} to "
        f"#{record.seq - 1} stay in the log as a discarded branch ('stowage show "
        f"{session_id}' marks them); continue with 'stowage resume {session_id} MESSAGE'"
    )
    return 0
