"""Where a history's tool rounds are, kept across boundaries so each one scans only what is new.

A committed boundary mostly extends the history the previous one saw by a few items; a
compaction replaces it. ``RoundIndex.extended`` scans only the items past the prefix it has
already seen (the whole history again when the prefix differs), so the compaction machine,
which asks on every boundary how many rounds the turn has and which outputs are old, no
longer walks the whole history each time. The index is a plain frozen value: the machine
keeps it in its state and stays pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from stowage.core import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    UserMessage,
)

__all__ = ["RoundIndex"]


@dataclass(frozen=True, slots=True)
class RoundIndex:
    """The tool rounds of ``history`` as ``round_groups`` makes them: a round is a contiguous
    run of one round's assistant text, calls and the outputs that follow them, with a call.
    ``closed`` holds the start and stop of each round no later item can grow, flat (every
    live session keeps an index: two ints a round, not a tuple each); the last group may
    still grow: ``tail`` is its start (-1: none), ``tail_call`` whether it has a call and
    ``after_output`` whether an output ended it so far. ``last_user`` is the index of the
    newest user message (-1: none)."""

    history: tuple[HistoryEntry, ...] = ()
    closed: tuple[int, ...] = ()
    tail: int = -1
    tail_call: bool = False
    after_output: bool = False
    last_user: int = -1

    @classmethod
    def of(cls, history: Sequence[HistoryEntry]) -> RoundIndex:
        """The index of ``history``, scanned from its start. Raises nothing."""
        return _EMPTY.extended(history)

    def extended(self, history: Sequence[HistoryEntry]) -> RoundIndex:
        """The index of ``history``: this one extended by the items past the prefix it has
        already seen, or scanned anew when ``history`` does not start with it. Raises
        nothing."""
        history = history if isinstance(history, tuple) else tuple(history)
        seen = self.history
        if history is seen:
            return self
        start = len(seen)
        if start and (start > len(history) or history[:start] != seen):
            return _EMPTY.extended(history)
        closed, tail, tail_call = self.closed, self.tail, self.tail_call
        after_output, last_user = self.after_output, self.last_user
        for index in range(start, len(history)):
            item = history[index].item
            if isinstance(item, AssistantMessage | FunctionCall):
                if tail < 0 or after_output:  # a new group starts here
                    if tail_call:
                        closed += (tail, index)
                    tail, tail_call, after_output = index, False, False
                tail_call = tail_call or isinstance(item, FunctionCall)
            elif isinstance(item, FunctionCallOutput) and tail >= 0:
                after_output = True
            else:  # anything else ends the group
                if tail_call:
                    closed += (tail, index)
                tail, tail_call, after_output = -1, False, False
                if isinstance(item, UserMessage):
                    last_user = index
        return RoundIndex(history, closed, tail, tail_call, after_output, last_user)

    def rounds(self) -> list[tuple[int, int]]:
        """``(start, stop)`` of each tool round, oldest first."""
        closed = self.closed
        rounds = list(zip(closed[::2], closed[1::2], strict=True))
        if self.tail_call:  # the open group ends with the history
            rounds.append((self.tail, len(self.history)))
        return rounds

    def turn_rounds(self) -> list[tuple[int, int]]:
        """The tool rounds of the current turn: those after the newest user message (none
        when there is no user message)."""
        if self.last_user < 0:
            return []
        return [(start, stop) for start, stop in self.rounds() if start > self.last_user]

    def old_outputs(
        self, stubbed: Collection[int], keep_rounds: int, min_chars: int
    ) -> tuple[int, ...]:
        """Seqs of the outputs older than the newest ``keep_rounds`` tool rounds, not in
        ``stubbed`` and at least ``min_chars`` long."""
        rounds = self.rounds()
        history = self.history
        seqs = []
        for start, stop in rounds[: max(0, len(rounds) - keep_rounds)]:
            for index in range(start, stop):
                entry = history[index]
                item = entry.item
                if (
                    isinstance(item, FunctionCallOutput)
                    and entry.seq not in stubbed
                    and len(item.output) >= min_chars
                ):
                    seqs.append(entry.seq)
        return tuple(seqs)


_EMPTY = RoundIndex()
