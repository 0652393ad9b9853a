"""``stowage demo``: an offline long session that compacts several times and says so."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from stowage.core import (
    CompactionLanded,
    Event,
    HistoryCompacted,
    Microcompacted,
    RoundCommitted,
    Settings,
    ToolFinished,
    redact_url,
)
from stowage.facade import Runtime
from stowage.policy import check_log
from stowage.storage import open_store

from ._store_args import store_spec

__all__ = ["demo_main", "run_demo"]

_SOURCES = Path(__file__).resolve().parent

_PROMPTS = (
    "Survey this package, starting with _main.py: what are its modules for?",
    "Read _demo.py and tell me what the demo does first.",
    "Find where compaction decisions are made.",
    "Which tests cover the log format?",
    "Look for the word fsync and explain durability.",
    "Summarise what the sampler does in one round.",
    "List the actors and what each receives.",
    "What happens to a tool call that was cut off by a crash?",
    "Search for 'covers_through' and explain it.",
    "Wrap up: what did we learn in this session?",
)


async def demo_main(args: argparse.Namespace) -> int:
    """``stowage demo``: ``run_demo`` with the command's options."""
    return await run_demo(
        store=store_spec(args),
        turns=args.turns,
        threshold=args.compact_threshold,
        context_window=args.context_window,
    )


async def run_demo(
    *, store: str, turns: int, threshold: int | None, context_window: int | None = 6000
) -> int:
    """Run ``turns`` turns of the scripted model over the current directory, in the store
    ``store`` names (a directory or a database URL); print every compaction, then a table of
    figures and the log check. Returns the exit status."""
    console = Console(stderr=False)
    # stowage's own sources: real, read-only, the same size wherever the demo is run from
    workspace = _SOURCES
    # a small window (or a fixed threshold) so that a short demo compacts often
    settings = Settings(
        compact_threshold=threshold, context_window=context_window, workspace=workspace
    )
    if "://" not in store:  # a directory the workspace tools must never show
        settings = settings.with_(store=Path(store))
    shown = (redact_url(store) or "") if "://" in store else store
    counts = {"rounds": 0, "tools": 0, "compactions": 0, "microcompactions": 0}
    # full compactions applied, and how many of them a round waited for
    landed = {"full": 0, "waited": 0}

    def on_event(event: Event) -> None:
        if isinstance(event, RoundCommitted):
            counts["rounds"] += 1
        elif isinstance(event, ToolFinished):
            counts["tools"] += 1
        elif isinstance(event, Microcompacted):
            counts["microcompactions"] += 1
            console.print(
                f"  [magenta]microcompaction[/]: {event.stubbed} old tool outputs stubbed, "
                f"tokens {event.tokens_before} -> {event.tokens_after}"
            )
        elif isinstance(event, HistoryCompacted):
            counts["compactions"] += 1
            console.print(
                f"  [bold magenta]compaction {counts['compactions']}[/] at round {event.round}: "
                f"tokens {event.tokens_before} -> {event.tokens_after}, removed {event.removed}, "
                f"retained {event.retained}\n    reason: {event.reason}"
            )
        elif (
            isinstance(event, CompactionLanded)
            and event.kind == "full"
            and event.fraction is not None
        ):
            landed["full"] += 1
            landed["waited"] += event.waited > 0
            held = f"a request waited {event.waited:.2f}s" if event.waited else "no request waited"
            console.print(
                f"    applied at {event.fraction:.0%} of the usable budget "
                f"(hard mark {event.hard:.0%}), {held}",
                soft_wrap=True,
            )

    async with Runtime(settings, store=open_store(store)) as rt:
        rt.subscribe(on_event)
        session = await rt.create(system="You are a careful assistant exploring a code base.")
        console.print(
            f"[bold]stowage demo[/]: session {session.id}, store {shown}, "
            + (
                f"threshold {threshold} tokens"
                if threshold is not None
                else f"watermarks over a {context_window}-token window"
            )
        )
        for turn in range(turns):
            prompt = _PROMPTS[turn % len(_PROMPTS)]
            console.print(f"[bold cyan]user[/] {prompt}")
            result = await session.send(prompt)
            answer = result.text if len(result.text) < 240 else result.text[:240] + "..."
            console.print(f"[bold green]assistant[/] ({result.rounds} rounds) {answer}")
        session_id = session.id
        history_items = len(session.history)

    disk = open_store(store)
    try:
        full = await disk.read(session_id, repair=False)
        tail = await disk.read_tail(session_id, repair=False)
    finally:
        await disk.aclose()
    report = check_log(session_id, full.records, tail.records)
    table = Table(title="demo figures")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in (
        ("turns", turns),
        ("rounds", counts["rounds"]),
        ("tool calls", counts["tools"]),
        ("microcompactions", counts["microcompactions"]),
        ("compactions", counts["compactions"]),
        ("full ones a round waited for", f"{landed['waited']} of {landed['full']}"),
        ("records in log", len(full.records)),
        ("items in live history", history_items),
        ("resume reads (records)", len(tail.records)),
        ("log check", "ok" if report.ok else "; ".join(report.problems)),
    ):
        table.add_row(name, str(value))
    console.print(table)
    console.print(f"inspect it: {_command()} show {session_id} --store {shown}", soft_wrap=True)
    if not report.ok:
        print(f"demo: the log of {session_id} is not sound; see the table above", file=sys.stderr)
        return 1
    if counts["compactions"] < 2:
        # a short demo is not a failure: it just has not grown enough to compact twice
        console.print(
            f"{turns} turns compacted {counts['compactions']} time(s); "
            f"run '{_command()} demo' (10 turns) to see several compactions"
        )
    return 0


def _command() -> str:
    """The ``stowage`` command as it can be typed here: its name when the one on PATH is this
    one, else the path it was started by (``make demo`` runs ``.venv/bin/stowage``, which is
    not on PATH until the venv is activated)."""
    started = Path(sys.argv[0])
    on_path = shutil.which("stowage")
    if started.name != "stowage" or (on_path and Path(on_path).resolve() == started.resolve()):
        return "stowage"
    return sys.argv[0]
