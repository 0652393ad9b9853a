"""One session, every view, one set of figures.

A session made through the real command with the offline model on a small window compacts a
few times; then the run's own lines, ``show``, ``context --json``, ``list --json``, the
console's view and the log itself must say the same thing: each compaction applied at the
tokens and share of usable its record carries (never recomputed), the same tool schemas
everywhere (the manifest's figure), the same tokens in use in ``list`` and ``context``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import anyio
from stowage.console import session_view
from stowage.core import CompactionRecord, RoundCommittedRecord, SessionRecord
from stowage.storage import JsonlStore

Cli = Callable[..., CompletedProcess[str]]


def _files(root: Path) -> None:
    for n in range(6):
        (root / f"notes{n}.txt").write_text(f"notes {n}: " + "a line of findings\n" * 160)


async def _records(store: Path, session: str) -> list[Any]:
    reader = JsonlStore(store)
    try:
        return list((await reader.read(session, repair=False)).records)
    finally:
        await reader.aclose()


def test_every_view_reads_the_figures_the_log_records(tmp_path: Path, cli: Cli) -> None:
    _files(tmp_path)
    store = tmp_path / "store"
    common = ["--store", str(store)]
    made = cli(
        "run", "--session", "f1", "--model", "scripted", "--context-window", "3000",
        "--max-output-tokens", "300", "read notes0.txt and notes1.txt", *common, cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    said = [made.stderr]
    for n in range(2, 6):
        step = cli("resume", "f1", f"read notes{n}.txt", *common, cwd=tmp_path)
        assert step.returncode == 0, step.stderr
        said.append(step.stderr)
    records = anyio.run(_records, store, "f1")
    compactions = [r for r in records if isinstance(r, CompactionRecord)]
    assert compactions, "the small window made no compaction"
    for record in compactions:
        assert record.figures is not None and record.figures.usable
    # the run's own lines: each compaction's figures as its record carries them
    printed = re.findall(
        r"compacted \((?:full|fallback)\) at round \d+: tokens (\d+) -> (\d+)", "".join(said)
    )
    assert [(int(a), int(b)) for a, b in printed] == [
        (r.tokens_before, r.tokens_after) for r in compactions
    ]
    # show: "applied at N tokens in use (...), P% of usable (U tokens)" from the same record
    shown = cli("show", "f1", *common, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    applied = re.findall(
        r"applied at ([\d,]+) tokens in use \((\w+)\), (\d+)% of usable \(([\d,]+) tokens\)",
        shown.stdout,
    )
    assert len(applied) >= len(compactions)
    by_tokens = {
        int(t.replace(",", "")): (how, int(p), int(u.replace(",", ""))) for t, how, p, u in applied
    }
    for record in compactions:
        assert record.figures is not None and record.tokens_before is not None
        how, percent, usable = by_tokens[record.tokens_before]
        assert usable == record.figures.usable
        assert percent == round(100 * record.tokens_before / record.figures.usable)
        assert how == ("estimated" if record.estimated else "reported")
    # the console: its cards are the records' figures
    view = session_view("f1", records)
    cards = [c for c in view.cards if c.in_use is not None]
    assert [c.in_use for c in cards] == [r.tokens_before for r in compactions]
    # the tool schemas: one figure, the manifest's, in context, list and the console
    manifests = [r.manifest for r in records if isinstance(r, RoundCommittedRecord) and r.manifest]
    schemas = next(s.tokens for s in manifests[-1].sections if s.name == "tools")
    first = records[0]
    assert isinstance(first, SessionRecord) and first.settings["tool_tokens"] > 0
    context = json.loads(cli("context", "f1", "--json", *common, cwd=tmp_path).stdout)
    lines = cli("list", "--json", *common, cwd=tmp_path).stdout.splitlines()
    [row] = [r for r in map(json.loads, lines) if r["id"] == "f1"]
    assert context["tool_schemas"] == row["tool_schemas"] == schemas == view.row.tool_schemas
    # tokens in use: the same in list, context and the console's row
    assert context["tokens"] == row["tokens"] == view.row.tokens
    assert context["usable"] == row["usable"] == view.row.usable
    assert view.row.percent is not None and row["percent_of_usable"] == round(view.row.percent, 1)
