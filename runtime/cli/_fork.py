"""``stowage fork ID`` and ``stowage rewind ID --to ROUND``: new ways to go on from a round.

Neither calls a model nor starts the session: a fork writes one record (where the new log
comes from, see ``core._lineage``), a rewind appends one under the session's writer lease.
``stowage resume`` then continues either, as it continues any session.
"""

from __future__ import annotations

import argparse
import sys

from stowage.core import ForkedFromRecord, SessionNotFound, lineage_store, validate_session_id

from ._store_args import open_cli_store

__all__ = ["fork_main", "rewind_main"]


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
