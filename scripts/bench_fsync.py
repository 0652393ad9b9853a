"""What one durable append costs the process that makes it: CPU (user + system, this process
only) and wall time per append of a log-sized line, with and without an ``fdatasync`` after it,
and with one ``syncfs`` per ``--group`` appends (``durability=syncfs``), on the filesystem of
``--dir``.

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

from stowage.core import ConfigError
from stowage.storage import load_syncfs

#: how an append is made durable: not at all, an fdatasync of its file, or one syncfs of the
#: filesystem per group of appends (as ``durability=syncfs`` does per group commit)
Mode = str
MODES: tuple[Mode, ...] = ("write only", "write + fdatasync", "group + one syncfs")


def _run(
    directory: Path, files: int, appends: int, line: bytes, mode: Mode, group: int
) -> tuple[float, float]:
    """(CPU ms, wall ms) per append, ``appends`` spread round-robin over ``files`` files."""
    fds = [
        os.open(directory / f"s{i}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for i in range(files)
    ]
    syncfs = load_syncfs() if mode == MODES[2] else None
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for n in range(appends):
            fd = fds[n % files]
            os.write(fd, line)
            if mode == MODES[1]:
                os.fdatasync(fd)
            elif syncfs is not None and (n % group == group - 1 or n == appends - 1):
                syncfs(fd)
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
    parser.add_argument(
        "--group",
        type=int,
        default=6,
        help="appends per syncfs (the sessions in one group commit; Linux 5.8+ only)",
    )
    args = parser.parse_args(argv)
    if min(args.appends, args.files, args.line_bytes, args.repeat, args.group) < 1:
        parser.error("--appends, --files, --line-bytes, --repeat and --group must be at least 1")
    modes = MODES
    try:
        load_syncfs()
    except ConfigError as exc:  # no syncfs here: the other two are still worth measuring
        print(f"not measured: {exc}", file=sys.stderr)
        modes = MODES[:2]
    if args.dir is not None and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory; create it first or leave --dir out")
    line = b"x" * (args.line_bytes - 1) + b"\n"
    with tempfile.TemporaryDirectory(prefix="stowage-fsync-", dir=args.dir) as tmp:
        figures: dict[Mode, list[tuple[float, float]]] = {mode: [] for mode in modes}
        for _ in range(args.repeat):
            for mode in modes:  # alternately, so all see the same machine
                figures[mode].append(
                    _run(Path(tmp), args.files, args.appends, line, mode, args.group)
                )
    print(f"{args.appends} appends of {args.line_bytes} bytes over {args.files} files, "
          f"median of {args.repeat}:")  # fmt: skip
    for mode in modes:
        cpu = statistics.median(c for c, _ in figures[mode])
        wall = statistics.median(w for _, w in figures[mode])
        name = f"{mode} of {args.group}" if mode == MODES[2] else mode
        print(f"  {name:<26} {cpu:.4f} ms CPU  {wall:.4f} ms wall per append", flush=True)
    synced = statistics.median(c for c, _ in figures[MODES[1]])
    print(f"two syncs a model call: {2 * synced:.3f} ms of CPU per call before any other work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
