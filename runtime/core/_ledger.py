"""What the current turn called, and what its compactions took from it: the loop detector's input.

A turn is in a compaction loop only when the same thing keeps happening: a compaction absorbs
what the turn read, the model (no longer seeing it) asks for exactly that again, and nothing new
happens in between. Anything less is an agent at work, and stopping it would break the runtime's
main promise. The ledger is folded from the log by ``SessionState.apply`` (live and on replay),
so the verdict is a pure function of the records; ``stowage.policy`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._items import FunctionCall, FunctionCallOutput

__all__ = ["CallKey", "Cycle", "TurnLedger"]

#: a call as the model would repeat it: tool name and arguments, verbatim
CallKey = tuple[str, str]


@dataclass(eq=False, slots=True)
class Cycle:
    """What followed one compaction of the turn, until the next: whether the model re-issued
    a call whose output a compaction of this turn absorbed (``reissued``), and whether it made
    a call it had not made before in this turn (``fresh``)."""

    reissued: bool = False
    fresh: bool = False
    #: the re-issued call with the largest output, and that output's size, for the message
    call: CallKey | None = None
    output_chars: int = 0


@dataclass(eq=False, slots=True)
class TurnLedger:
    """Calls of the open turn by key, the outputs they produced, what compactions and stubs
    took out of view, and one ``Cycle`` per compaction of the turn. Emptied when a turn starts
    or finishes, so a session between turns keeps nothing."""

    #: the newest seq of each call key made this turn
    calls: dict[CallKey, int] = field(default_factory=dict)
    #: call id -> key, for the calls of this turn
    keys: dict[str, CallKey] = field(default_factory=dict)
    #: output seq -> (key, output chars), for the outputs of this turn
    outputs: dict[int, tuple[CallKey, int]] = field(default_factory=dict)
    #: keys whose newest output is out of view (absorbed by a compaction or stubbed)
    absorbed: set[CallKey] = field(default_factory=set)
    cycles: list[Cycle] = field(default_factory=list)
    #: full compactions (summaries and digests) of the turn; a cycle also starts at a
    #: microcompaction that stubs one of the turn's own outputs
    compactions: int = 0

    def clear(self) -> None:
        """Forget everything (a turn started or finished)."""
        if self.calls or self.cycles or self.compactions:
            self.calls.clear()
            self.keys.clear()
            self.outputs.clear()
            self.absorbed.clear()
            self.cycles.clear()
            self.compactions = 0

    def call(self, call: FunctionCall, seq: int) -> None:
        """A call of this turn was logged at ``seq``."""
        key = (call.name, call.arguments)
        if self.cycles:
            cycle = self.cycles[-1]
            if key in self.absorbed:
                cycle.reissued = True
                chars = max((c for k, c in self.outputs.values() if k == key), default=0)
                if chars >= cycle.output_chars:
                    cycle.call, cycle.output_chars = key, chars
            elif key not in self.calls:
                cycle.fresh = True
        self.calls[key] = seq
        self.keys[call.call_id] = key
        self.absorbed.discard(key)

    def output(self, output: FunctionCallOutput, seq: int) -> None:
        """An output of a call of this turn was logged at ``seq``."""
        key = self.keys.get(output.call_id)
        if key is not None:
            self.outputs[seq] = (key, len(output.output))

    def compacted(self, covers_through: int, kept: set[int]) -> None:
        """A compaction absorbed this turn's calls up to ``covers_through`` (except those at
        the ``kept`` seqs): a new cycle starts."""
        self.cycles.append(Cycle())
        self.compactions += 1
        for key, seq in self.calls.items():
            if seq <= covers_through and seq not in kept:
                self.absorbed.add(key)

    def stubbed(self, seqs: set[int]) -> None:
        """Outputs at ``seqs`` are stubs now: their calls' outputs are out of view. Stubbing
        one of the turn's own outputs starts a cycle, as a compaction does: a turn whose reads
        cannot all stay in view keeps reading them again just the same."""
        mine = [self.outputs[seq][0] for seq in seqs if seq in self.outputs]
        if mine:
            self.cycles.append(Cycle())
            self.absorbed.update(mine)

    def looping(self, repeats: int) -> tuple[Cycle, ...] | None:
        """The last ``repeats`` cycles when each of them re-issued an absorbed call and made
        no fresh one (a real loop), else None. The newest cycle counts once the model has
        answered after its compaction. Raises nothing."""
        if repeats < 1 or len(self.cycles) < repeats:
            return None
        last = self.cycles[-repeats:]
        if all(c.reissued and not c.fresh for c in last):
            return tuple(last)
        return None
