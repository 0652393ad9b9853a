"""What a compaction must leave to the turn in flight, pure.

Three rules keep a turn going through its own compactions:

- a compaction never covers an open call (one waiting for approval, or still running): it ends
  before the round that made the call, so the call stays verbatim with its output to come;
- what the turn most recently read is re-attached after the summary within a budget, so a
  model that decides from each request alone need not read it again;
- the turn stops only on a real loop (``TurnLedger.looping``) or when what it cannot do
  without (system, protected state, its user message, its newest round) does not fit.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from stowage.core import (
    AssistantMessage,
    CallKey,
    Cycle,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    SystemMessage,
    UserMessage,
    entry_chars,
)

from ._watermarks import round_groups

__all__ = ["irreducible_tokens", "loop_message", "reattach_seqs", "safe_cover"]


def safe_cover(history: Sequence[HistoryEntry], last_seq: int, open_calls: Collection[str]) -> int:
    """The newest seq a compaction may cover: ``last_seq``, or, while calls are open (waiting
    for approval or running), the seq just before the round that made them (its assistant
    text and calls stay verbatim with the outputs to come); 0 (nothing) when a summary made
    while they were open sits before them. Raises nothing."""
    if not open_calls:
        return last_seq
    first = next(
        (
            i
            for i, e in enumerate(history)
            if isinstance(e.item, FunctionCall) and e.item.call_id in open_calls
        ),
        None,
    )
    if first is None:
        return last_seq
    # the round's own sampled items just before its first open call belong with it
    while first > 0 and isinstance(history[first - 1].item, AssistantMessage | FunctionCall):
        first -= 1
    # everything before the round, which after a compaction is not in seq order (a summary's
    # seq is newer than the user words retained after it); when an earlier compaction's
    # summary is newer than the round itself, no cover can keep the round: none is allowed
    cover = max((e.seq for e in history[:first]), default=0)
    return cover if cover < history[first].seq else 0


def _turn_start(history: Sequence[HistoryEntry]) -> int | None:
    users = [i for i, e in enumerate(history) if isinstance(e.item, UserMessage)]
    return users[-1] if users else None


def reattach_seqs(
    history: Sequence[HistoryEntry],
    *,
    covers_through: int,
    budget_chars: int,
    stubbed: Collection[int] = (),
) -> tuple[int, ...]:
    """Seqs of the current turn's tool steps a compaction through ``covers_through`` would
    absorb and should keep instead: the newest first, whole steps (a call and its output),
    each call key once (the newest read of it), while their characters (as projected) fit
    ``budget_chars``. Sorted. Raises nothing."""
    start = _turn_start(history)
    if start is None or budget_chars <= 0:
        return ()
    steps: list[tuple[FunctionCall, HistoryEntry, HistoryEntry]] = []
    for group in round_groups(history):
        if group[0] <= start:
            continue
        calls = {
            history[i].item.call_id: history[i]  # type: ignore[union-attr]
            for i in group
            if isinstance(history[i].item, FunctionCall)
        }
        for i in group:
            entry = history[i]
            if isinstance(entry.item, FunctionCallOutput) and entry.item.call_id in calls:
                call = calls[entry.item.call_id]
                if call.seq <= covers_through and entry.seq <= covers_through:
                    steps.append((call.item, call, entry))  # type: ignore[arg-type]
    chosen: list[int] = []
    seen: set[CallKey] = set()
    used = 0
    for item, call, output in reversed(steps):
        key = (item.name, item.arguments)
        if key in seen:
            continue
        seen.add(key)
        chars = entry_chars(call) + entry_chars(output, stubbed)
        if used + chars > budget_chars:
            continue  # a smaller, older read may still fit
        used += chars
        chosen += [call.seq, output.seq]
    return tuple(sorted(chosen))


def irreducible_tokens(
    history: Sequence[HistoryEntry],
    *,
    protected_chars: int,
    chars_per_token: float,
    summary_chars: int = 0,
    stubbed: Collection[int] = (),
) -> int:
    """Tokens a request of the current turn cannot do without: the system messages, protected
    state, the turn's user message, the newest tool round (as projected: an output shown by
    its reference, ``stubbed``, counts as that) and a summary of ``summary_chars``. Raises
    nothing."""
    chars = protected_chars + summary_chars
    chars += sum(len(e.item.text) for e in history if isinstance(e.item, SystemMessage))
    start = _turn_start(history)
    if start is not None:
        chars += entry_chars(history[start])
    groups = round_groups(history)
    if groups and (start is None or groups[-1][0] > start):
        chars += sum(entry_chars(history[i], stubbed) for i in groups[-1])
    return math.ceil(chars / chars_per_token)


def loop_message(
    cycles: Sequence[Cycle],
    *,
    turn: int,
    compactions: int,
    context_window: int | None,
    usable: int | None,
    tool_tokens: int,
    chars_per_token: float,
) -> str:
    """What ``CompactionLoop`` says: the call, the cycle, the figures and the fixes. Raises
    nothing."""
    biggest = max(cycles, key=lambda c: c.output_chars)
    name, arguments = biggest.call or ("?", "")
    if len(arguments) > 120:
        arguments = arguments[:119] + "…"
    output_tokens = round(biggest.output_chars / chars_per_token)
    window = (
        f"the window is {context_window} tokens, {usable} of them usable for history after "
        f"the output reserve and {tool_tokens} tokens of tool schemas"
        if context_window is not None and usable is not None
        else "the window is unknown (threshold mode)"
    )
    return (
        f"turn {turn} stopped in a compaction loop: {len(cycles)} times in a row, compaction "
        f"took what this turn read out of view (a summary or stubs) and the model read it "
        f"again, with nothing new in between ({name}({arguments}), an output of "
        f"{biggest.output_chars} characters, ~{output_tokens} tokens); {compactions} full "
        f"compactions this turn; {window}. Fixes: a "
        "larger window (context_window, or a model with a larger one), a lower cap per tool "
        "output (read_max_bytes, or the tool's own limit), or fewer tools (smaller schemas)."
    )
