"""What history becomes after a compaction: the one assembly rule live sessions and replay share.

Compaction is full replacement, not trimming: everything the model said and every tool step up
to ``covers_through`` is absorbed into one summary; the leading system message and the user's own
recent words are kept verbatim, because the user's intent must not reach the model only as the
summarizer's paraphrase. Since a tool step is either absorbed whole or kept whole (it lies after
``covers_through``), compaction can never leave a ``function_call`` without its output.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import CompactionError
from ._items import (
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    SystemMessage,
    UserMessage,
)

__all__ = ["CompactionResult", "absorbed", "apply_compaction", "compose_history"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionResult:
    """The new history, the entries kept from the compacted part, and how many were dropped."""

    history: tuple[HistoryEntry, ...]
    retained: tuple[HistoryEntry, ...]
    removed: int


def apply_compaction(
    history: Sequence[HistoryEntry],
    *,
    summary: str,
    summary_seq: int,
    covers_through: int,
    user_budget_chars: int = 20_000,
    reattach: Collection[int] = (),
    provider_item: dict[str, Any] | None = None,
) -> CompactionResult:
    """Replace the entries with ``seq <= covers_through`` by a summary; keep later ones verbatim.

    From the compacted part the leading system message (if ``history[0]`` is one) and the most
    recent user messages within ``user_budget_chars`` (the newest always, pinned ones always)
    are retained; so are the entries at ``reattach`` seqs (whole tool rounds the current turn
    read: a model that still needs them need not read them again); everything else is
    absorbed by the summary. ``provider_item`` (a provider-native compaction's item) rides on
    the summary item, as replay puts it there from the record.

    Raises ``CompactionError`` if ``covers_through`` is negative, if the seqs of the non-summary
    entries are not strictly increasing, if ``covers_through`` falls before an older summary
    that precedes kept entries, if it splits a function call from its output, or if
    ``reattach`` keeps a call without its output or an output without its call.
    """
    compacted, tail = _split(history, covers_through)
    retained = _retain(compacted, history, user_budget_chars, reattach)
    summary_entry = HistoryEntry(
        seq=summary_seq, item=CompactionSummary(text=summary, provider=provider_item)
    )
    return CompactionResult(
        history=compose_history(retained, summary_entry, tail),
        retained=retained,
        removed=len(compacted) - len(retained),
    )


def absorbed(
    history: Sequence[HistoryEntry], *, covers_through: int, user_budget_chars: int
) -> tuple[HistoryEntry, ...]:
    """The entries a compaction covering ``covers_through`` replaces by its summary: covered
    and not retained (see ``apply_compaction``). Raises ``CompactionError`` as it does."""
    compacted, _ = _split(history, covers_through)
    kept = {e.seq for e in _retain(compacted, history, user_budget_chars)}
    return tuple(e for e in compacted if e.seq not in kept)


def compose_history(
    retained: Sequence[HistoryEntry], summary: HistoryEntry, tail: Sequence[HistoryEntry]
) -> tuple[HistoryEntry, ...]:
    """Assemble compacted history: leading system entries, the summary, the other retained entries,
    then the tail. Replay uses this too, so it must stay the only assembly rule."""
    lead = 0
    while lead < len(retained) and isinstance(retained[lead].item, SystemMessage):
        lead += 1
    return (*retained[:lead], summary, *retained[lead:], *tail)


def _split(
    history: Sequence[HistoryEntry], covers_through: int
) -> tuple[tuple[HistoryEntry, ...], tuple[HistoryEntry, ...]]:
    if covers_through < 0:
        raise CompactionError(f"covers_through must be >= 0, got {covers_through}")
    # A summary's seq is its compaction record's, newer than the entries retained after it,
    # so only the other entries must be in seq order.
    previous: int | None = None
    for entry in history:
        if isinstance(entry.item, CompactionSummary):
            continue
        if previous is not None and entry.seq <= previous:
            raise CompactionError(
                f"history seqs must increase: seq {entry.seq} follows seq {previous}"
            )
        previous = entry.seq
    cut = 0
    while cut < len(history) and history[cut].seq <= covers_through:
        cut += 1
    compacted, tail = tuple(history[:cut]), tuple(history[cut:])
    for entry in tail:
        if entry.seq <= covers_through:
            raise CompactionError(
                f"covers_through {covers_through} is older than seq {history[cut].seq}, "
                f"which precedes seq {entry.seq} in history; a compaction must cover a prefix"
            )
    compacted_calls = {e.item.call_id for e in compacted if isinstance(e.item, FunctionCall)}
    for entry in tail:
        if isinstance(entry.item, FunctionCallOutput) and entry.item.call_id in compacted_calls:
            raise CompactionError(
                f"covers_through {covers_through} splits tool call {entry.item.call_id!r} "
                f"from its output at seq {entry.seq}; compact only at a round boundary"
            )
    return compacted, tail


def _retain(
    compacted: Sequence[HistoryEntry],
    history: Sequence[HistoryEntry],
    user_budget_chars: int,
    reattach: Collection[int] = (),
) -> tuple[HistoryEntry, ...]:
    keep: set[int] = set()
    if reattach:
        keep.update(_reattached(compacted, reattach))
    if compacted and isinstance(history[0].item, SystemMessage):
        keep.add(0)
    used = 0
    budget_open = True
    newest = True
    for index in range(len(compacted) - 1, -1, -1):
        item = compacted[index].item
        if not isinstance(item, UserMessage):
            continue
        if item.pinned:
            # Pinned words are the user's "must hold"; they do not spend the recency budget.
            keep.add(index)
        elif newest or (budget_open and used + len(item.text) <= user_budget_chars):
            keep.add(index)
            used += len(item.text)
        else:
            budget_open = False
        newest = False
    return tuple(compacted[i] for i in sorted(keep))


def _reattached(compacted: Sequence[HistoryEntry], reattach: Collection[int]) -> list[int]:
    """Indexes of ``compacted`` at ``reattach`` seqs, checked to be whole tool steps."""
    wanted = set(reattach)
    indexes = [i for i, e in enumerate(compacted) if e.seq in wanted]
    calls = {
        compacted[i].item.call_id  # type: ignore[union-attr]
        for i in indexes
        if isinstance(compacted[i].item, FunctionCall)
    }
    outputs = {
        compacted[i].item.call_id  # type: ignore[union-attr]
        for i in indexes
        if isinstance(compacted[i].item, FunctionCallOutput)
    }
    if calls != outputs:
        odd = sorted(calls ^ outputs)
        raise CompactionError(
            f"reattached entries must be whole tool steps; {', '.join(odd)} lack a call or output"
        )
    return indexes
