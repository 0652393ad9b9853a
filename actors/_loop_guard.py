"""The loop guard: a turn that keeps re-reading what its own compactions took away stops.

At a window too small for what a turn reads, compaction absorbs a tool output, the model
(no longer seeing it) asks for it again, the output fills the window again, and compaction
absorbs it again, until the round limit. The guard remembers the calls of the current turn;
when a response re-issues one (same name, same arguments) whose output is no longer in the
projection verbatim (absorbed by a compaction or stubbed by a microcompaction this turn), that
is a repeat, and at ``limit`` repeats the turn stops with ``CompactionLoop``, naming the
figures and the fixes. Pure bookkeeping: the sampler writes and raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from stowage.core import FunctionCall, FunctionCallOutput, SessionState

__all__ = ["LoopGuard", "Reissue", "loop_message"]

CallKey = tuple[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reissue:
    """A response re-issued calls whose outputs this turn's compactions absorbed."""

    name: str
    arguments: str
    output_chars: int
    repeats: int


@dataclass(eq=False)
class LoopGuard:
    """Calls of the current turn and the repeats seen; ``limit`` repeats stop the turn."""

    limit: int
    _calls: dict[str, CallKey] = field(default_factory=dict)
    _output_chars: dict[CallKey, int] = field(default_factory=dict)
    repeats: int = 0

    def turn_started(self) -> None:
        """Forget the previous turn."""
        self._calls.clear()
        self._output_chars.clear()
        self.repeats = 0

    def written(self, calls: Iterable[FunctionCall], outputs: Iterable[FunctionCallOutput]) -> None:
        """Remember a committed round's calls and the size of their outputs."""
        for call in calls:
            self._calls[call.call_id] = (call.name, call.arguments)
        for output in outputs:
            key = self._calls.get(output.call_id)
            if key is not None:
                self._output_chars[key] = max(self._output_chars.get(key, 0), len(output.output))

    def _absorbed(self, state: SessionState) -> set[CallKey]:
        visible = {e.item.call_id for e in state.history if isinstance(e.item, FunctionCall)}
        stubbed = {
            e.item.call_id
            for e in state.history
            if isinstance(e.item, FunctionCallOutput) and e.seq in state.stubbed
        }
        return {
            key
            for call_id, key in self._calls.items()
            if call_id not in visible or call_id in stubbed
        }

    def check(self, calls: Sequence[FunctionCall], state: SessionState) -> Reissue | None:
        """Count a response that re-issues an absorbed call of this turn; the repeat that
        reaches ``limit`` is returned (the turn must stop), any other gives None."""
        absorbed = self._absorbed(state)
        again = [c for c in calls if (c.name, c.arguments) in absorbed]
        if not again:
            return None
        self.repeats += 1
        if self.repeats < self.limit:
            return None
        biggest = max(again, key=lambda c: self._output_chars.get((c.name, c.arguments), 0))
        key = (biggest.name, biggest.arguments)
        return Reissue(
            name=biggest.name,
            arguments=biggest.arguments,
            output_chars=self._output_chars.get(key, 0),
            repeats=self.repeats,
        )


def loop_message(
    reissue: Reissue,
    *,
    turn: int,
    compactions: int,
    context_window: int | None,
    usable: int | None,
    tool_tokens: int,
    chars_per_token: float,
) -> str:
    """What ``CompactionLoop`` says: the call, the figures, and the fixes. Raises nothing."""
    arguments = reissue.arguments if len(reissue.arguments) <= 120 else reissue.arguments[:119]
    output_tokens = round(reissue.output_chars / chars_per_token)
    window = (
        f"the window is {context_window} tokens, {usable} of them usable for history after "
        f"the output reserve and {tool_tokens} tokens of tool schemas"
        if context_window is not None and usable is not None
        else "the window is unknown (threshold mode)"
    )
    return (
        f"turn {turn} stopped: the model re-issued {reissue.name}({arguments}) "
        f"{reissue.repeats} times after compaction absorbed its output of "
        f"{reissue.output_chars} characters (~{output_tokens} tokens); {compactions} "
        f"compactions this turn. The context window is too small for what this turn reads: "
        f"{window}. Fixes: a larger window (context_window, or a model with a larger one), "
        "a lower cap per tool output (read_max_bytes, or the tool's own limit), or fewer "
        "tools (smaller schemas)."
    )
