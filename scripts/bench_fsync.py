"""What one durable append costs the process that makes it: CPU (user + system, this process
only) and wall time per append of a log-sized line, with and without an ``fdatasync`` after it,
on the filesystem of ``--dir``.

    python scripts/bench_fsync.py                   # a temporary directory
    python scripts/bench_fsync.py --dir .stowage    # the store's own disk

The JSONL store syncs each session's file once per group commit, and a tool round writes two
batches (the calls before the tool runs, then the outputs with the commit): about two syncs per
model call, whatever else stowage does. So this figure times two is CPU that no runtime keeping
a durable log can avoid here, set beside ``bench_overhead.py``'s HTTP floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _run(directory: Path, files: int, appends: int, line: bytes, sync: bool) -> tuple[float, float]:
    """(CPU ms, wall ms) per append, ``appends`` spread round-robin over ``files`` files."""
    fds = [
        os.open(directory / f"s{i}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for i in range(files)
    ]
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for n in range(appends):
            fd = fds[n % files]
            os.write(fd, line)
            if sync:
                os.fdatasync(fd)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        for fd in fds:
            os.close(fd)
    return cpu * 1000 / appends, wall * 1000 / appends


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_fsync.py", description=__doc__)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temp dir)"
    )
    parser.add_argument("--appends", type=int, default=2000, help="appends per measurement")
    parser.add_argument("--files", type=int, default=50, help="files written round-robin")
    parser.add_argument("--line-bytes", type=int, default=700, help="bytes per append")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per mode (median)")
    args = parser.parse_args(argv)
    if args.appends < 1 or args.files < 1 or args.line_bytes < 1 or args.repeat < 1:
        parser.error("--appends, --files, --line-bytes and --repeat must be at least 1")
    if args.dir is not None and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory; create it first or leave --dir out")
    line = b"x" * (args.line_bytes - 1) + b"\n"
    with tempfile.TemporaryDirectory(prefix="stowage-fsync-", dir=args.dir) as tmp:
        figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.repeat):
            for sync in (False, True):  # alternately, so both see the same machine
                figures[sync].append(_run(Path(tmp), args.files, args.appends, line, sync))
    print(f"{args.appends} appends of {args.line_bytes} bytes over {args.files} files, "
          f"median of {args.repeat}:")  # fmt: skip
    for sync in (False, True):
        cpu = statistics.median(c for c, _ in figures[sync])
        wall = statistics.median(w for _, w in figures[sync])
        name = "write + fdatasync" if sync else "write only       "
        print(f"  {name}  {cpu:.4f} ms CPU  {wall:.4f} ms wall per append", flush=True)
    synced = statistics.median(c for c, _ in figures[True])
    print(f"two syncs a model call: {2 * synced:.3f} ms of CPU per call before any other work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
