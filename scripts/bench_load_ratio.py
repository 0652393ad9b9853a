"""Does ``stowage load`` stay flat from a few sessions to many? Goal 4 of the performance
issue, measured so that the machine's drift does not decide it.

    python scripts/bench_load_ratio.py                       # 100 against 10,000 sessions
    python scripts/bench_load_ratio.py --large 1000 --small-runs 5
    python scripts/bench_load_ratio.py --small 4 --large 8 --turns 1 --small-runs 1  # a check

Each run is ``stowage load`` in a process of its own (fake server in another, the defaults:
watermark policy, background compaction, JSONL store with fsync), as a user runs it. A
100-session run lasts a few seconds, and on a shared machine its rounds/s moves by ±20% from
one minute to the next, so one 100-session figure against one 10,000-session figure measures
the minute as much as the code: the small runs are made right before and right after every
large one, and the large run is compared with their median. Prints one row per run and the
ratio of each large run; ``--json`` writes them. Exit 1 when a run failed its checks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_FIGURES = (
    "throughput_rounds_per_s",
    "cpu_ms_per_round",
    "rounds",
    "wall_seconds",
    "peak_rss_mb",
    "ok",
)


def _load(sessions: int, turns: int, extra: list[str], scratch: Path, n: int) -> dict[str, Any]:
    """One ``stowage load`` run's figures. Raises ``RuntimeError`` when it wrote no report."""
    out = scratch / f"run-{n}-{sessions}.json"
    command = [
        sys.executable, "-m", "stowage.cli", "load",
        "--sessions", str(sessions), "--turns", str(turns),
        "--no-progress", "--json", str(out), *extra,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if not out.exists():
        raise RuntimeError(
            f"stowage load --sessions {sessions} wrote no report (exit {done.returncode}): "
            f"{done.stderr[-2000:]}"
        )
    report = json.loads(out.read_text())
    row = {key: report[key] for key in _FIGURES}
    row["sessions"] = sessions
    row["gc_seconds"] = round(sum(report["gc_seconds"][g] for g in ("gen0", "gen1", "gen2")), 2)
    row["problems"] = report.get("problems", [])
    return row


def _figure(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_row(label: str, row: dict[str, Any]) -> None:
    # a run that failed may have no rounds, and then no rate
    print(
        f"{label:<14} {row['sessions']:>8,} {row['rounds']:>9,} "
        f"{_figure(row['throughput_rounds_per_s'], '>9.1f')} "
        f"{_figure(row['cpu_ms_per_round'], '>8.2f')} "
        f"{row['gc_seconds']:>7.1f} {row['peak_rss_mb']:>8.0f} "
        f"{'ok' if row['ok'] else 'FAILED'}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100, help="sessions of the baseline runs")
    parser.add_argument("--large", type=int, default=10_000, help="sessions of the large runs")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--large-runs", type=int, default=1)
    parser.add_argument(
        "--small-runs", type=int, default=3, help="baseline runs before and after each large one"
    )
    parser.add_argument("--json", type=Path, default=None, dest="json_path")
    parser.add_argument("load_args", nargs="*", help="more `stowage load` options, after `--`")
    args = parser.parse_args(argv)
    if min(args.small, args.large, args.turns, args.large_runs, args.small_runs) < 1:
        parser.error("--small, --large, --turns, --large-runs and --small-runs must be >= 1")

    print(
        f"{'run':<14} {'sessions':>8} {'rounds':>9} {'rounds/s':>9} {'CPU ms':>8} "
        f"{'GC s':>7} {'RSS MB':>8} checks",
        flush=True,
    )
    runs: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stowage-ratio-") as scratch:

        def run(label: str, sessions: int) -> dict[str, Any]:
            row = _load(sessions, args.turns, args.load_args, Path(scratch), len(runs))
            row["run"] = label
            runs.append(row)
            _print_row(label, row)
            return row

        def smalls() -> list[dict[str, Any]]:
            done = sum(r["run"].startswith("small") for r in runs)
            return [run(f"small {done + i + 1}", args.small) for i in range(args.small_runs)]

        before = smalls()
        for n in range(args.large_runs):
            large = run(f"large {n + 1}", args.large)
            after = smalls()
            group = [*before, large, *after]
            before = after
            if not all(r["ok"] and r["throughput_rounds_per_s"] for r in group):
                continue  # no ratio of a failed run: it says so below
            around = [r["throughput_rounds_per_s"] for r in group if r is not large]
            baseline = statistics.median(around)
            ratios.append({
                "run": large["run"],
                "large_rounds_per_s": large["throughput_rounds_per_s"],
                "small_median_rounds_per_s": baseline,
                "small_range_rounds_per_s": [min(around), max(around)],
                "ratio": round(large["throughput_rounds_per_s"] / baseline, 3),
            })  # fmt: skip
    print()
    for ratio in ratios:
        low, high = ratio["small_range_rounds_per_s"]
        print(
            f"{ratio['run']}: {ratio['large_rounds_per_s']:.1f} rounds/s against the median "
            f"{ratio['small_median_rounds_per_s']:.1f} of the {args.small}-session runs around "
            f"it ({low:.1f}-{high:.1f}): {ratio['ratio']:.0%} (goal: at least 90%)"
        )
    failed = [r for r in runs if not r["ok"]]
    for row in failed:
        print(f"{row['run']} ({row['sessions']} sessions) failed: {'; '.join(row['problems'])}")
    print(f"{len(runs)} runs in {time.perf_counter() - started:.0f} s")
    if args.json_path is not None:
        args.json_path.write_text(json.dumps({"runs": runs, "ratios": ratios}, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
