"""The watermark policy, pure: from a token count to an action, and what each action touches.

| fraction of usable | action |
| ≥ soft (0.70)      | microcompact: old tool outputs become stubs in the projection   |
| ≥ compact (0.85)   | full compaction, planned in the background                      |
| ≥ hard (0.95)      | block: no request is sent until compaction brought it down      |

The seed's fixed threshold is not here: it stays ``runtime._compaction.decide_compaction``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from stowage.core import (
    CompactionError,
    HistoryEntry,
    Settings,
    apply_compaction,
    entry_chars,
    history_chars,
)

from ._round_index import RoundIndex
from ._tokens import TokenStatus

__all__ = [
    "MIN_STUB_CHARS", "Action", "PolicyDecision", "Watermarks", "compaction_cut", "decide",
    "microcompact_batch", "microcompact_candidates", "round_groups", "drop_oldest_rounds",
    "rounds_to_hard_mark", "tokens_after_compaction", "turn_round_cuts", "turn_rounds",
]  # fmt: skip

Action: TypeAlias = Literal["none", "microcompact", "compact", "block"]

#: outputs shorter than this are not worth a stub (a stub is ~150 characters itself)
MIN_STUB_CHARS = 600


@dataclass(frozen=True, slots=True, kw_only=True)
class Watermarks:
    """Fractions of the usable budget, and how many recent rounds microcompaction spares."""

    soft: float = 0.70
    compact: float = 0.85
    hard: float = 0.95
    target: float = 0.50
    keep_rounds: int = 3

    @classmethod
    def from_settings(cls, settings: Settings) -> Watermarks:
        """The watermarks ``settings`` configure. Raises nothing (settings are validated)."""
        return cls(
            soft=settings.soft_mark,
            compact=settings.compact_mark,
            hard=settings.hard_mark,
            target=settings.target_after,
            keep_rounds=settings.keep_rounds,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyDecision:
    """What to do, the watermark crossed (``soft``/``compact``/``hard``), and the figures."""

    action: Action
    watermark: str | None
    tokens: int | None
    estimated: bool
    usable: int
    fraction: float | None
    reason: str


def decide(status: TokenStatus, usable: int, marks: Watermarks) -> PolicyDecision:
    """The action for ``status`` against ``usable`` tokens. Raises nothing."""
    fraction = status.fraction(usable)
    tokens = status.tokens
    figure = "estimated" if status.estimated else "reported+estimated"

    def made(action: Action, watermark: str | None, reason: str) -> PolicyDecision:
        return PolicyDecision(
            action=action,
            watermark=watermark,
            tokens=tokens,
            estimated=status.estimated,
            usable=usable,
            fraction=fraction,
            reason=reason,
        )

    if tokens is None or fraction is None:
        return made("none", None, "no usage reported and reported usage is required")
    for action, watermark, mark in (
        ("block", "hard", marks.hard),
        ("compact", "compact", marks.compact),
        ("microcompact", "soft", marks.soft),
    ):
        if fraction >= mark:
            reason = (
                f"{tokens} tokens ({figure}) are {fraction:.0%} of the usable {usable}, "
                f"at or above the {watermark} mark {mark:.0%}"
            )
            return made(action, watermark, reason)  # type: ignore[arg-type]
    return made("none", None, f"{tokens} tokens ({figure}) are {fraction:.0%} of {usable}")


def rounds_to_hard_mark(
    *,
    tokens: int,
    floor: int,
    steps: Sequence[int],
    floor_step: float,
    usable: int,
    marks: Watermarks,
    micro_min_free: float,
    armed: bool,
) -> int | None:
    """The first of the next ``len(steps)`` rounds after which the next request would be at
    or above the hard mark, when round k adds ``steps[k]`` tokens and microcompaction acts as
    the policy does: after a round, once per crossing of the soft mark (``armed``; re-armed
    below it), when the next round may reach the compaction mark and its batch frees at least
    ``micro_min_free`` of ``usable`` (every round past the soft mark, any stub, with
    ``micro_min_free`` 0), bringing the context down to the floor.
    ``floor`` is what stubbing every old output would leave now; a round's growth cannot be
    stubbed while it is among the newest ``marks.keep_rounds``, and ``floor_step`` of it
    never can. None when no such round comes. Raises nothing."""
    hard, compact, soft = (usable * m for m in (marks.hard, marks.compact, marks.soft))
    min_free = max(1.0, micro_min_free * usable)
    largest = max(steps, default=0)
    level, settled = float(tokens), float(floor)
    for index, step in enumerate(steps):
        level += step
        recent = steps[max(0, index + 1 - marks.keep_rounds) : index + 1]
        if index >= marks.keep_rounds:  # a round leaves the newest: all but its floor frees
            settled += min(steps[index - marks.keep_rounds], floor_step)
        lowest = min(level, settled + sum(recent))
        due = not micro_min_free or (armed and level + largest >= compact)
        if due and level >= soft and level - lowest >= min_free:
            level, armed = lowest, False
        if level >= hard:
            return index + 1
        if level < soft:
            armed = True
    return None


def round_groups(history: Sequence[HistoryEntry]) -> list[list[int]]:
    """Indexes of ``history`` grouped by tool round: each group is the assistant text and
    calls of one round and the outputs that follow them. Raises nothing."""
    return [list(range(start, stop)) for start, stop in RoundIndex.of(history).rounds()]


def microcompact_candidates(
    history: Sequence[HistoryEntry],
    stubbed: Collection[int],
    keep_rounds: int,
    *,
    min_chars: int = MIN_STUB_CHARS,
    rounds: RoundIndex | None = None,
) -> tuple[int, ...]:
    """Seqs of tool outputs worth stubbing: not stubbed yet, at least ``min_chars`` long, and
    older than the newest ``keep_rounds`` tool rounds (``rounds``: an index the caller keeps
    of ``history`` or of a prefix of it). Raises nothing."""
    index = RoundIndex.of(history) if rounds is None else rounds.extended(history)
    return index.old_outputs(stubbed, keep_rounds, min_chars)


def microcompact_batch(
    history: Sequence[HistoryEntry],
    stubbed: Collection[int],
    keep_rounds: int,
    *,
    min_free_chars: int,
    min_chars: int = MIN_STUB_CHARS,
    rounds: RoundIndex | None = None,
) -> tuple[int, ...]:
    """Every ``microcompact_candidate`` when together they free at least ``min_free_chars``
    (what their stubs save), else none: a stub changes the start of the request, so the
    prompt cache is broken only for a big gain, and then for all it can free at once (the
    longer the next break is put off). Raises nothing."""
    seqs = microcompact_candidates(
        history, stubbed, keep_rounds, min_chars=min_chars, rounds=rounds
    )
    if not seqs:
        return ()
    wanted = set(seqs)
    freed = sum(entry_chars(e) - entry_chars(e, (e.seq,)) for e in history if e.seq in wanted)
    return seqs if freed >= min_free_chars else ()


def drop_oldest_rounds(
    history: Sequence[HistoryEntry], rounds: int
) -> tuple[tuple[HistoryEntry, ...], int]:
    """``history`` without its ``rounds`` oldest whole tool rounds (a call never loses its
    output); returns the rest and how many rounds were dropped. Raises nothing."""
    groups = round_groups(history)[: max(0, rounds)]
    dropped = {index for group in groups for index in group}
    kept = tuple(entry for index, entry in enumerate(history) if index not in dropped)
    return kept, len(groups)


def tokens_after_compaction(
    history: Sequence[HistoryEntry],
    *,
    stubbed: Collection[int],
    covers_through: int,
    user_budget_chars: int,
    summary_chars: int,
    chars_per_token: float,
    fixed_tokens: int = 0,
) -> int:
    """Estimated tokens of the history a compaction through ``covers_through`` would leave,
    with a summary of ``summary_chars``. ``fixed_tokens`` (tool schemas, protected state) are
    added as is. Raises ``CompactionError`` as ``apply_compaction`` does."""
    result = apply_compaction(
        history,
        summary="",
        summary_seq=covers_through + 1,
        covers_through=covers_through,
        user_budget_chars=user_budget_chars,
    )
    chars = history_chars(result.history, stubbed) + summary_chars
    return fixed_tokens + math.ceil(chars / chars_per_token)


def turn_rounds(history: Sequence[HistoryEntry]) -> int:
    """How many tool rounds the current turn has in ``history`` (those after the newest user
    message; 0 when there is none). Raises nothing."""
    return len(RoundIndex.of(history).turn_rounds())


def turn_round_cuts(history: Sequence[HistoryEntry]) -> list[int]:
    """Where a compaction may end to keep the current turn's newest whole tool rounds (those
    after the newest user message) verbatim: element k-1 is the ``covers_through`` that keeps
    the newest k. Stops at a round no ``covers_through`` can keep (an older summary's seq
    after it). Raises nothing."""
    cuts: list[int] = []
    for index, _ in reversed(RoundIndex.of(history).turn_rounds()):
        before = max(e.seq for e in history[:index])
        if before >= min(e.seq for e in history[index:]):
            break
        cuts.append(before)
    return cuts


def compaction_cut(
    history: Sequence[HistoryEntry],
    *,
    last_seq: int,
    target_tokens: int,
    stubbed: Collection[int],
    user_budget_chars: int,
    summary_chars: int,
    chars_per_token: float,
    fixed_tokens: int = 0,
    keep_at_most: int | None = None,
) -> int:
    """The ``covers_through`` of a compaction that keeps the most of the current turn's newest
    whole tool rounds verbatim (at most ``keep_at_most``) while what it leaves stays within
    ``target_tokens``; ``last_seq`` (everything) when not even the newest round fits, or the
    turn has none. A summary of ``summary_chars`` is assumed. Raises nothing."""
    cut = last_seq
    for kept, candidate in enumerate(turn_round_cuts(history), start=1):
        if keep_at_most is not None and kept > keep_at_most:
            break
        try:
            tokens = tokens_after_compaction(
                history,
                stubbed=stubbed,
                covers_through=candidate,
                user_budget_chars=user_budget_chars,
                summary_chars=summary_chars,
                chars_per_token=chars_per_token,
                fixed_tokens=fixed_tokens,
            )
        except CompactionError:
            break
        if tokens > target_tokens:
            break
        cut = candidate
    return cut
