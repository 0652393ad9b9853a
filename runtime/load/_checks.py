"""The verdict of a load run on one session, from its log and what the runtime acknowledged."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from stowage.core import (
    CompactionRecord,
    CorruptLogError,
    Item,
    Record,
    RoundCommittedRecord,
    TurnRecord,
    replay,
)

__all__ = ["SessionVerdict", "check_session"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionVerdict:
    """One session's checks (replays, acknowledged rounds and turns); ``problems`` when not ok."""

    session_id: str
    records: int
    compactions: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether every check held."""
        return not self.problems


def check_session(
    session_id: str,
    *,
    records: Sequence[Record],
    tail_records: Sequence[Record],
    live: Sequence[Item],
    acknowledged_rounds: Collection[int],
    acknowledged_turns: int,
) -> SessionVerdict:
    """Check the log and its resume tail against the live history and what was acknowledged."""
    problems: list[str] = []
    live_items = tuple(live)
    for name, source in (("replay of the whole log", records), ("resume replay", tail_records)):
        try:
            items = replay(session_id, source).items
        except CorruptLogError as exc:
            problems.append(f"{name} failed: {exc}")
            continue
        if items != live_items:
            problems.append(
                f"{name} gives {len(items)} items, the live history has {len(live_items)}"
                + (f"; first difference at item {_first_difference(items, live_items)}")
            )
    logged_rounds = {r.round for r in records if isinstance(r, RoundCommittedRecord)}
    missing = sorted(set(acknowledged_rounds) - logged_rounds)
    if missing:
        problems.append(f"acknowledged rounds missing from the log: {missing[:10]}")
    finished = sum(1 for r in records if isinstance(r, TurnRecord) and r.phase == "finished")
    if finished < acknowledged_turns:
        problems.append(
            f"{acknowledged_turns} turns acknowledged, {finished} finished turns in the log"
        )
    return SessionVerdict(
        session_id=session_id,
        records=len(records),
        compactions=sum(1 for r in records if isinstance(r, CompactionRecord)),
        problems=tuple(problems),
    )


def _first_difference(a: Sequence[Item], b: Sequence[Item]) -> int:
    for index, (left, right) in enumerate(zip(a, b, strict=False)):
        if left != right:
            return index
    return min(len(a), len(b))
