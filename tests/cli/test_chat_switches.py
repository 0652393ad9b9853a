"""The chat's ``/fork``, ``/rewind N`` and ``/new``, and the footer under each turn, from piped
input (the same commands as on a terminal, without the terminal UI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from stowage.cli._chat_view import footer_line
from stowage.cli._sessions import TurnFigures

STOWAGE = [sys.executable, "-m", "stowage.cli"]


def user_texts(log: Path) -> list[str]:
    texts = []
    for line in log.read_text().splitlines():
        item = json.loads(line).get("item") or {}
        if item.get("type") == "user":
            texts.append(item["text"])
    return texts


def test_the_footer_says_tokens_share_cache_and_compactions() -> None:
    figures = TurnFigures(
        tokens=12345, usable=40000, percent_of_usable=30.9, estimated=False, compactions=2,
        cached_share=0.8,
    )  # fmt: skip
    assert footer_line(figures) == (
        "  ─ 12,345 tokens · 31% of 40,000 usable · last request 80% cached · 2 compactions"
    )
    unknown = TurnFigures(
        tokens=90, usable=None, percent_of_usable=None, estimated=True, compactions=1,
        cached_share=None,
    )  # fmt: skip
    assert footer_line(unknown) == "  ─ ~90 tokens · 1 compaction"


def test_fork_rewind_and_new_move_the_chat_and_keep_what_they_leave(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    script = "hello\n/fork\nsecond\nthird\n/rewind 2\n/rewind x\nafter rewind\n/new\nfresh\n"
    done = subprocess.run(
        [*STOWAGE, "chat", "--session", "c1", "--store", "st", "--tools", "none"], input=script,
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    store = tmp_path / "st"
    assert user_texts(store / "c1.jsonl") == ["hello"]  # the session /fork left is unchanged
    # the fork's own log holds what came after it; a rewind leaves its branch in the log
    fork_log = store / "c1-fork-1.jsonl"
    assert user_texts(fork_log) == ["second", "third", "after rewind"]
    assert '"type":"rewind"' in fork_log.read_text()
    assert "goes on from the end of round 2" in done.stderr
    assert "/rewind takes a round number" in done.stderr  # "/rewind x": one line, goes on
    news = [p for p in store.glob("s-*.jsonl")]
    assert len(news) == 1 and user_texts(news[0]) == ["fresh"]
    # a footer under each of the five turns
    assert done.stderr.count(" compaction") == 5, done.stderr
    shown = subprocess.run(
        [*STOWAGE, "show", "c1-fork-1", "--store", "st"],
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "third" in shown.stdout  # the discarded branch is still shown, marked
