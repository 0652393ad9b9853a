"""How a turn looks in the chat: the answer as it streams, one line for each tool call that
stays on screen after the turn, the status line while the model works, and the lines that say
why a turn stopped.

The answer goes to ``out`` (stdout), everything else to ``err``; on a terminal both are the
screen, so each write first takes the status line down and ends an unfinished answer line: the
spinner is never left under text, and no line starts in the middle of another.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from stowage.core import (
    AssistantDelta,
    Event,
    FunctionCall,
    FunctionCallOutput,
    Item,
    RoundCommitted,
    ToolFinished,
)
from stowage.facade import TurnResult

from ._status import StatusLine, describe

__all__ = ["TurnView", "approval_line", "call_text", "first_line", "tool_line"]

_ARGS_CHARS = 60
_RESULT_CHARS = 80


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_text(name: str, arguments: str, limit: int = _ARGS_CHARS) -> str:
    """``name(key=value, ...)`` from a call's JSON arguments, clipped to about ``limit``
    characters of arguments; arguments that are not a JSON object are shown as they are."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        shown = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in parsed.items()
        )
    else:
        shown = " ".join(arguments.split())
    return f"{name}({_clip(shown, limit)})"


def first_line(text: str, limit: int = _RESULT_CHARS) -> str:
    """The first line of ``text`` that is not blank, clipped, with "(+N lines)" when more follow."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "(empty)"
    more = f" (+{len(lines) - 1} line{'s' if len(lines) > 2 else ''})" if len(lines) > 1 else ""
    return _clip(lines[0], limit) + more


def tool_line(
    name: str,
    call: FunctionCall | None,
    output: FunctionCallOutput | None,
    *,
    is_error: bool,
    output_chars: int,
) -> str:
    """One line for a finished call: tool, short arguments, first line of its result or error
    (its size when the output is no longer in history: compacted or stubbed)."""
    what = call_text(name, call.arguments) if call is not None else f"{name}(…)"
    result = first_line(output.output) if output is not None else f"({output_chars:,} chars)"
    return f"  {'!!' if is_error else '->'} {what}: {result}"


def approval_line(call: FunctionCall) -> str:
    """The call that waits for a person: id, tool and arguments."""
    return f"call {call.call_id} awaits approval: {call_text(call.name, call.arguments, 300)}"


@dataclass(eq=False)
class TurnView:
    """Draws one session's turns; ``history`` is the session's live history, read for the
    arguments and results of the calls that ``ToolFinished`` names."""

    out: TextIO
    err: TextIO
    status: StatusLine
    history: Callable[[], Sequence[Item]]
    _at_line_start: bool = True
    _streamed: bool = False
    _finished: list[ToolFinished] = field(default_factory=list)

    def begin(self, doing: str = "calling the model") -> None:
        """A turn (or a command) starts: the status line says ``doing``."""
        self._streamed = False
        self._finished.clear()
        self.end_line()
        self.status.show(doing)

    def write(self, chunk: str) -> None:
        """Answer text, on ``out``."""
        self.status.hide()
        self.out.write(chunk)
        self.out.flush()
        if chunk:
            self._at_line_start = chunk.endswith("\n")

    def end_line(self) -> None:
        """End an unfinished answer line, so what follows starts a line of its own."""
        if not self._at_line_start:
            self.write("\n")

    def say(self, line: str, *, on_out: bool = False) -> None:
        """One line on ``err`` (or ``out``), after the status line is down."""
        self.status.hide()
        self.end_line()
        stream = self.out if on_out else self.err
        stream.write(line + "\n")
        stream.flush()

    def on_event(self, event: Event) -> None:
        """A subscriber for the turn's events."""
        if isinstance(event, AssistantDelta):
            self._streamed = True
            self.write(event.text)
            return
        if isinstance(event, ToolFinished):
            self._finished.append(event)
        elif isinstance(event, RoundCommitted) and self._finished:
            self._tool_lines()
        if describe(event) is not None and self.status.enabled:
            self.end_line()  # the status line must not start after answer text
        self.status.on_event(event)

    def _tool_lines(self) -> None:
        # the round is durable: its calls and outputs are in the live history now
        wanted = {event.call_id for event in self._finished}
        calls: dict[str, FunctionCall] = {}
        outputs: dict[str, FunctionCallOutput] = {}
        for item in reversed(self.history()):
            if isinstance(item, FunctionCall) and item.call_id in wanted:
                calls[item.call_id] = item
            elif isinstance(item, FunctionCallOutput) and item.call_id in wanted:
                outputs[item.call_id] = item
            if len(calls) == len(outputs) == len(wanted):
                break
        # in the order the model called them, not the order they happened to finish in
        called = list(reversed(calls))  # ``calls`` was filled from the newest item back
        self._finished.sort(
            key=lambda e: called.index(e.call_id) if e.call_id in calls else len(called)
        )
        for event in self._finished:
            self.say(
                tool_line(
                    event.name,
                    calls.get(event.call_id),
                    outputs.get(event.call_id),
                    is_error=event.is_error,
                    output_chars=event.output_chars,
                )
            )
        self._finished.clear()

    def finish(self, result: TurnResult) -> None:
        """The turn's result: its text unless it streamed, and why it stopped if it did not
        answer."""
        self.status.hide()
        if self._finished:
            self._tool_lines()
        if result.text and not self._streamed:
            self.write(result.text)
        self.end_line()
        if result.stopped != "answered":
            self.say(f"[turn stopped: {result.stopped} after {result.rounds} rounds]")

    def interrupted(self) -> None:
        """Ctrl-C stopped the turn: ``[interrupted]`` on a line of its own."""
        self.status.hide()
        self._finished.clear()
        self.end_line()
        self.write("[interrupted]\n")
