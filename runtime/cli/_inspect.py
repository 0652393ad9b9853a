"""``stowage show`` and ``stowage check``: a session's log read back, for people and for a verdict."""

from __future__ import annotations

import argparse
import sys

from ._store_args import reader_store

__all__ = ["check_main", "show_main"]


async def show_main(args: argparse.Namespace) -> int:
    from stowage.core import lineage_store, validate_session_id

    store = lineage_store(reader_store(args))
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


async def check_main(args: argparse.Namespace) -> int:
    from stowage.core import CorruptLogError, validate_session_id
    from stowage.policy import check_log

    from ._exits import EXIT_CHECK_FAILED, EXIT_OK

    session_id = validate_session_id(args.session)
    store = reader_store(args)
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
