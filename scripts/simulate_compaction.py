"""Randomized simulation of many sessions against the model zoo, checking the compaction promises.

    python scripts/simulate_compaction.py --sessions 50 --seed 1 [--turns 8] [--window 6000]

One runtime hosts every session at once; each talks to a zoo member drawn from the seed
(``tests.zoo.ZOO_MEMBERS``) and takes random steps: a turn naming files of random sizes,
a manual compaction, an approval or a denial, an interrupt, a close and resume from the log,
a change of how usage is reported. After every step the harness checks what the gateway
received and what the log holds (see ``tests.zoo.ZooHarness``). A progress line is
printed every few seconds, then a table of figures and violations by kind; the exit status is
1 when any promise was broken, 0 otherwise.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import anyio
from stowage import configure_logging

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the zoo lives in tests/zoo
from tests.zoo import (
    USAGE_MODES,
    VIOLATION_KINDS,
    ZOO_MEMBERS,
    ZooHarness,
    write_zoo_file,
    zoo_behaviour,
    zoo_member,
    zoo_settings,
)

_STEPS = ("send", "send", "send", "send", "interrupt", "compact", "decide", "reopen", "usage")
_PROGRESS_EVERY = 3.0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20, help="sessions run at once")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument("--turns", type=int, default=8, help="steps per session")
    parser.add_argument("--window", type=int, default=6000, help="context window in tokens")
    parser.add_argument("--max-output", type=int, default=500, help="output reserve in tokens")
    parser.add_argument(
        "--keep", type=Path, default=None, help="write the store and workspace here and keep them"
    )
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.turns < 1 or args.window < 2000:
        parser.error("--sessions and --turns must be >= 1, --window >= 2000")
    return args


async def _session(
    harness: ZooHarness, workspace: Path, session_id: str, rng: random.Random, steps: int
) -> None:
    """Run ``steps`` random steps of one session, checking after each."""
    member = rng.choice(ZOO_MEMBERS)
    await harness.create(session_id, system="You read files.", behaviour=zoo_behaviour(member))
    window = harness.gateway.window
    for turn in range(steps):
        kind = rng.choice(_STEPS)
        names = []
        for k in range(rng.randint(1, 4)):
            name = f"{session_id}_{turn}_{k}.txt"
            tokens = rng.randint(window // 30, window // 4)
            if member == "huge_output" and k == 0 and rng.random() < 0.4:
                name, tokens = f"huge_{session_id}_{turn}.txt", window * 3 // 2
            write_zoo_file(workspace, name, tokens=tokens, seed=rng.randint(0, 1 << 30))
            names.append(name)
        text = "read " + " ".join(names)
        if member == "approval" and rng.random() < 0.5:
            text += " then call guarded"
        match kind:
            case "send":
                await harness.send(session_id, text)
            case "interrupt":
                await harness.interrupt(session_id, text, after=rng.randint(1, 3))
            case "compact":
                await harness.compact(session_id)
            case "decide":
                await harness.decide(session_id, approve=rng.random() < 0.5)
            case "reopen":
                await harness.reopen(session_id)
            case "usage":
                harness.set_usage(session_id, rng.choice(USAGE_MODES))
        await harness.check(session_id)


async def _progress(harness: ZooHarness, started: float) -> None:
    while True:
        await anyio.sleep(_PROGRESS_EVERY)
        f = harness.figures
        print(
            f"[{time.monotonic() - started:6.1f}s] turns {f.turns} rounds {f.rounds} "
            f"compactions {f.full}/{f.fallback}/{f.micro} requests {harness.gateway.count} "
            f"violations {len(harness.violations)}",
            flush=True,
        )


def _table(harness: ZooHarness, elapsed: float) -> str:
    f = harness.figures
    gateway = harness.gateway
    cached = (
        f"{gateway.cached_tokens / gateway.input_tokens:.1%}" if gateway.input_tokens else "n/a"
    )
    rows = [
        ("sessions", str(f.sessions)),
        ("turns", str(f.turns)),
        ("rounds", str(f.rounds)),
        ("compactions full", str(f.full)),
        ("compactions fallback", str(f.fallback)),
        ("compactions micro", str(f.micro)),
        ("prefix breaks", str(f.prefix_breaks)),
        ("turns stopped as loops", str(f.loops)),
        ("requests", str(gateway.count)),
        ("requests refused", str(gateway.refused)),
        ("cached share", cached),
        ("seconds", f"{elapsed:.1f}"),
    ]
    for kind in VIOLATION_KINDS:
        count = sum(1 for v in harness.violations if v.kind == kind)
        rows.append((f"violations {kind}", str(count)))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value:>10}" for name, value in rows)


async def _main(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        workspace = root / "ws"
        workspace.mkdir(parents=True)
        gateway = zoo_member(
            "rereader", seed=args.seed, window=args.window, max_output_tokens=args.max_output
        )
        settings = zoo_settings(
            root / "store", workspace, window=args.window, max_output_tokens=args.max_output
        )
        async with ZooHarness(gateway, settings) as harness, anyio.create_task_group() as tg:
            tg.start_soon(_progress, harness, started)
            async with anyio.create_task_group() as sessions:
                for n in range(args.sessions):
                    session_rng = random.Random(rng.getrandbits(64))
                    sessions.start_soon(
                        _session, harness, workspace, f"sim{n}", session_rng, args.turns
                    )
            tg.cancel_scope.cancel()
    print(_table(harness, time.monotonic() - started))
    for kind in VIOLATION_KINDS:
        # a few of each kind: enough to start from, not a wall of repeats
        for violation in [v for v in harness.violations if v.kind == kind][:3]:
            print(f"{violation.kind} [{violation.session_id}]: {violation.detail}"[:600])
    return 1 if harness.violations else 0


def main(argv: list[str] | None = None) -> int:
    """Run the simulation; returns the exit status (1 on any violation)."""
    args = _parse(argv)
    # the runtime's warnings (a stopped turn, a refused request) are what the table counts
    configure_logging("console", "critical")
    return anyio.run(_main, args)


if __name__ == "__main__":
    sys.exit(main())
