"""``stowage resume`` without an id, on a terminal: which session to continue."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from stowage.core import LogStore

from ._sessions import SessionSummary, recent_sessions

__all__ = ["choice_of", "pick_session", "picker_lines"]

#: how many sessions the picker lists
_SHOWN = 15


def picker_lines(rows: Sequence[SessionSummary]) -> list[str]:
    """The numbered list the picker shows. Raises nothing."""
    lines = []
    for number, row in enumerate(rows, 1):
        used = "" if row.percent_of_usable is None else f", {row.percent_of_usable:.0f}% full"
        when = row.last_activity[:16].replace("T", " ")
        turns = f"{row.turns} turn{'s' if row.turns != 1 else ''}"
        lines.append(f"  {number:>2}. {row.id:<28} {when}  {turns}{used}  ({row.model})")
    return lines


def choice_of(answer: str, rows: Sequence[SessionSummary]) -> str | None:
    """The session id ``answer`` picks: a number of the list or an id in it; None for
    anything else. Raises nothing."""
    answer = answer.strip()
    if answer.isdigit() and 1 <= int(answer) <= len(rows):
        return rows[int(answer) - 1].id
    return answer if any(row.id == answer for row in rows) else None


async def pick_session(store: LogStore) -> str | None:
    """Ask on the terminal which of the store's recent sessions to continue (``store`` is closed
    after reading); None when the user leaves without picking. Raises ``SessionNotFound`` when the
    store holds no session."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import WordCompleter
    from stowage.core import SessionNotFound

    rows = (await recent_sessions(store))[:_SHOWN]
    if not rows:
        raise SessionNotFound("no session in this store to resume: start one with 'stowage run'")
    print("recent sessions:", file=sys.stderr)
    for line in picker_lines(rows):
        print(line, file=sys.stderr)
    asking: PromptSession[str] = PromptSession(
        completer=WordCompleter([row.id for row in rows]), complete_while_typing=True
    )
    question = f"resume which? [1-{len(rows)} or an id, Enter to leave] "
    while True:
        try:
            answer = await asking.prompt_async(question)
        except (EOFError, KeyboardInterrupt):
            return None
        if not answer.strip():
            return None
        picked = choice_of(answer, rows)
        if picked is not None:
            return picked
        print(f"  {answer.strip()!r} is not in the list", file=sys.stderr)
