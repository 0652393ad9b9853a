"""How a turn looks in ``chat``, ``run`` and ``resume``: the answer as it streams, one line for
each tool call that stays on screen after the turn, the status line while the model works, and
the lines that say why a turn stopped.

The answer goes to ``out`` (stdout), everything else to ``err`` (stderr). What keeps the status
line from ever erasing the answer depends on where the two go:

- both on the terminal: each write first takes the status line down and ends an unfinished
  answer line, so the spinner is drawn only at the start of a row of its own and erasing it
  erases nothing else;
- stdout a pipe (``| cat``, ``| less``) and stderr the terminal: what the reader prints shows on
  the same screen whenever it gets to it, so once the answer has started the status line stays
  down for the rest of the turn (stderr's lines are whole lines, and stdout is never given a
  newline for stderr's sake);
- stdout a file: the two never meet.

What stdout holds is the committed answer, once. When stdout is not a terminal (a pipe, a file)
nothing is streamed to it: the answer is written whole when the round that gives it is durable
(the turn's result), so a reader of stdout gets exactly the answer the log holds, and nothing
of an attempt the runtime abandoned (a cut stream, an answer refused as too large, a refusal
as too long). We buffer rather than stream from the attempt that will commit, because which
attempt commits is only known at its end. On a terminal the answer streams as it comes; an
attempt that is abandoned after some of its text was shown is marked on stderr with one line
(``[attempt abandoned: stream cut; retrying]``), and the answer that commits is written whole
after it. At most ``answer_cap`` characters (``max_answer_chars``) are streamed in a turn: an
answer refused as too large does not flood the terminal, and what the cap held back of the
committed answer is written when the turn ends.

``AnswerStream`` is pure state, no I/O: ``TurnView`` asks it what to write. A turn's text streams attempt by
attempt (a round's request may be abandoned and sent again, see ``AttemptAbandoned``); each
delta is shown while the turn's budget lasts, and when the answer commits, ``rest`` says what
of it is still to be written: nothing when its attempt streamed whole, the part the budget
held back, or all of it on a row of its own when what was shown is not its beginning.

The status line (``StatusLine``) is drawn with rich's ``Live`` on the terminal only: when stderr
is not a terminal nothing of it is written; it is one row, cut to the terminal's width.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text
from stowage.core import (
    AssistantDelta,
    AttemptAbandoned,
    CompactionDecided,
    CompactionWaited,
    Event,
    FunctionCall,
    FunctionCallOutput,
    HistoryCompacted,
    Item,
    Microcompacted,
    ModelRetrying,
    RoundCommitted,
    RoundStarted,
    ToolFinished,
    ToolStarted,
)
from stowage.facade import TurnResult

from ._sessions import TurnFigures

__all__ = [
    "AnswerStream",
    "StatusLine",
    "TurnView",
    "abandoned_line",
    "approval_line",
    "call_text",
    "describe",
    "first_line",
    "footer_line",
    "reaches_screen_later",
    "tool_line",
]

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


def approval_line(call: FunctionCall, detail: str | None = None) -> str:
    """The call that waits for a person: id, tool and arguments, then what it will do (the
    diff of an edit, the whole command line), indented."""
    line = f"call {call.call_id} awaits approval: {call_text(call.name, call.arguments, 300)}"
    return line + "".join(f"\n    {row}" for row in (detail or "").splitlines())


#: what follows an abandoned attempt, in the words of its line
_NEXT_WORDS = {"retry": "retrying", "compact": "compacting, then asking again", "none": "giving up"}


def abandoned_line(event: AttemptAbandoned) -> str:
    """The line that marks an attempt whose streamed text is not the answer: why it was
    abandoned and what follows."""
    then = _NEXT_WORDS.get(event.next, event.next)
    return f"[attempt abandoned: {event.reason}; {then}]"


def footer_line(figures: TurnFigures) -> str:
    """The line under a chat's turn: tokens in use against usable, the share of the last
    request the provider served from its cache, and the compactions so far."""
    parts = []
    if figures.tokens is not None:
        parts.append(f"{'~' if figures.estimated else ''}{figures.tokens:,} tokens")
        if figures.usable and figures.percent_of_usable is not None:
            parts.append(f"{figures.percent_of_usable:.0f}% of {figures.usable:,} usable")
    if figures.cached_share is not None:
        parts.append(f"last request {figures.cached_share:.0%} cached")
    count = figures.compactions
    parts.append(f"{count} compaction{'' if count == 1 else 's'}")
    return "  ─ " + " · ".join(parts)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


def reaches_screen_later(stream: TextIO) -> bool:
    """Whether what is written to ``stream`` may show on the terminal later, through a reader
    this process does not see: a pipe or a socket (``| cat``), not a terminal, a file or
    ``/dev/null``. Raises nothing."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (AttributeError, ValueError, OSError):  # a stream without a descriptor (a test's)
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@dataclass(eq=False)
class TurnView:
    """Draws one session's turns; ``history`` is the session's live history, read for the arguments
    and results of the calls that ``ToolFinished`` names."""

    out: TextIO
    err: TextIO
    status: StatusLine
    history: Callable[[], Sequence[Item]]
    tool_lines: bool = True
    answer_cap: int | None = None
    _at_line_start: bool = True
    #: the status line stays down until the next turn: the answer went to a pipe's reader
    _held: bool = False
    _finished: list[ToolFinished] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._shared = self.out is self.err or (_isatty(self.out) and _isatty(self.err))
        self._races = reaches_screen_later(self.out)
        # a pipe or a file gets the committed answer only, written when the turn ends
        self._live = _isatty(self.out)
        self._answer = AnswerStream(self.answer_cap)

    def begin(self, doing: str = "calling the model") -> None:
        """A turn (or a command) starts: the status line says ``doing``."""
        self._answer.begin()
        self._held = False
        self._finished.clear()
        self._before_err()
        self.status.show(doing)

    def write(self, chunk: str) -> None:
        """Answer text, on ``out``."""
        self.status.hide()
        self.out.write(chunk)
        self.out.flush()
        if chunk:
            self._at_line_start = chunk.endswith("\n")
            self._held = self._held or self._races

    def end_line(self) -> None:
        """End an unfinished answer line, so what follows starts a line of its own."""
        if not self._at_line_start:
            self.write("\n")

    def _before_err(self) -> None:
        """What goes to ``err`` next starts a row of its own: an unfinished answer line on the
        same screen is ended first (never when stdout goes elsewhere: it is not ours to
        change for stderr's sake)."""
        if self._shared:
            self.end_line()

    def say(self, line: str, *, on_out: bool = False) -> None:
        """One line on ``err`` (or ``out``), after the status line is down."""
        self.status.hide()
        if on_out:
            self.end_line()
        else:
            self._before_err()
        stream = self.out if on_out else self.err
        stream.write(line + "\n")
        stream.flush()

    def show_status(self, text: str) -> None:
        """Put ``text`` on the status line, where it cannot cover the answer."""
        if self._held or not self.status.enabled:
            return
        if self._shared and self._answer.showing and not self._at_line_start:
            return  # the answer streaming is the progress: its row is not broken for a status
        self._before_err()  # the status line must not start after answer text
        self.status.show(text)

    def on_event(self, event: Event) -> None:
        """A subscriber for the turn's events."""
        if isinstance(event, AssistantDelta):
            shown = self._answer.take(event.text) if self._live else ""
            if shown:  # on a terminal, as much as the turn's cap leaves
                self.write(shown)
            return
        if isinstance(event, RoundStarted):
            self._answer.new_attempt()
        elif isinstance(event, AttemptAbandoned):
            if self._answer.showing:
                self.end_line()  # the answer that commits starts a row of its own
                self.say(abandoned_line(event))
            self._answer.new_attempt()
        elif isinstance(event, ToolFinished):
            if self.tool_lines:
                self._finished.append(event)
        elif isinstance(event, RoundCommitted) and self._finished:
            self._tool_lines()
        text = describe(event)
        if text is not None:
            self.show_status(text)

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
        """The turn's result: its text unless it streamed (the answer's line ended), and why
        it stopped if it did not answer."""
        self.status.hide()
        if self._finished:
            self._tool_lines()
        rest, own_row = self._answer.rest(result.text)
        if own_row:
            self.end_line()
        if rest:
            self.write(rest)
        self.end_line()
        if result.stopped != "answered":
            self.say(f"[turn stopped: {result.stopped} after {result.rounds} rounds]")

    def interrupted(self, *, on_out: bool = True) -> None:
        """Ctrl-C stopped the turn: ``[interrupted]`` on a line of its own (on ``out`` in the
        chat, where it stands in the transcript; on ``err`` for ``run``)."""
        self.status.hide()
        self._finished.clear()
        if on_out:
            self.end_line()
            self.write("[interrupted]\n")
        else:
            self.say("[interrupted]")


@dataclass(eq=False)
class AnswerStream:
    """A turn's streamed text against ``cap`` characters (None: no cap)."""

    cap: int | None = None
    #: characters the turn may still show (``cap`` when it begins)
    _left: int | None = None
    #: the newest attempt's text as shown, and whether the budget held some of it back
    _shown: list[str] = field(default_factory=list)
    _clipped: bool = False

    def begin(self) -> None:
        """A turn starts: the whole budget again."""
        self._left = self.cap
        self.new_attempt()

    def new_attempt(self) -> None:
        """A round's (next) request starts: what the last one showed is not the answer."""
        self._shown.clear()
        self._clipped = False

    @property
    def showing(self) -> bool:
        """Whether the newest attempt has put text on the terminal."""
        return bool(self._shown)

    def take(self, text: str) -> str:
        """What of the delta ``text`` to show: as much as the turn's budget leaves."""
        shown = text if self._left is None else text[: self._left]
        if self._left is not None:
            self._left -= len(shown)
        self._clipped = self._clipped or len(shown) < len(text)
        if shown:
            self._shown.append(shown)
        return shown

    def rest(self, answer: str) -> tuple[str, bool]:
        """What of the committed ``answer`` is still to be written, and whether it starts a
        row of its own (what was shown of the attempt is not its beginning)."""
        if self._shown and not self._clipped:
            return "", False  # streamed whole
        shown = "".join(self._shown)
        if answer.startswith(shown):
            return answer[len(shown) :], False
        return answer, True


def describe(event: Event) -> str | None:
    """What the status line says after ``event`` (None: leave it as it is). Raises nothing."""
    match event:
        case RoundStarted(round=round_, tokens=tokens):
            size = f", ~{tokens:,} tokens" if tokens is not None else ""
            return f"calling the model (round {round_}{size})"
        case ToolStarted(name=name):
            return f"running {name}"
        case ToolFinished(name=name):
            return f"{name} done"
        case RoundCommitted():
            return "round written"
        case CompactionDecided(action=action, tokens=tokens) if action in ("compact", "block"):
            figure = f"{tokens:,}" if tokens is not None else "?"
            return f"compacting {figure} -> ?"
        case CompactionWaited(seconds=seconds):
            return f"waited {seconds:.1f} s for compaction"
        case HistoryCompacted(tokens_before=before, tokens_after=after):
            if before is None or after is None:
                return "compacted"
            return f"compacted {before:,} -> {after:,}"
        case Microcompacted(stubbed=stubbed):
            return f"stubbed {stubbed} old tool outputs"
        case ModelRetrying(delay=delay, rate_limited=True):
            return f"waiting on rate limit {delay:.0f} s"
        case ModelRetrying(delay=delay, attempt=attempt, error=error):
            return f"{error}: retrying in {delay:.1f} s (attempt {attempt + 1})"
    return None


@dataclass(eq=False)
class StatusLine:
    """A spinner with one line of text on ``console`` (stderr), shown only on a terminal."""

    console: Console = field(default_factory=lambda: Console(stderr=True))
    _live: Live | None = None
    _spinner: Spinner | None = None
    _text: str = "working"

    @property
    def enabled(self) -> bool:
        return self.console.is_terminal

    @property
    def shown(self) -> bool:
        """Whether the line is on the screen now."""
        return self._live is not None

    def show(self, text: str | None = None) -> None:
        """Show (or change) the line; drawn at once, not at the next refresh."""
        if text is not None:
            self._text = text
        if not self.enabled:
            return
        # one row, whatever the width: a wrapped status would leave its first rows behind
        # (the spinner and a space take 2 cells; the last column is left free)
        line = Text(self._text)
        line.truncate(max(1, self.console.width - 3), overflow="ellipsis")
        if self._live is None or self._spinner is None:
            self._spinner = Spinner("dots", text=line, style="green")
            self._live = Live(
                self._spinner,
                console=self.console,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,
            )
            self._live.start(refresh=True)
        else:
            self._spinner.update(text=line)
            self._live.refresh()

    def hide(self) -> None:
        """Take the line down (before anything else is written to the terminal)."""
        if self._live is not None:
            self._live.stop()
            self._live = self._spinner = None

    def on_event(self, event: Event) -> None:
        """A subscriber: hides for streamed text, shows what ``describe`` says otherwise."""
        if isinstance(event, AssistantDelta):
            self.hide()
            return
        text = describe(event)
        if text is not None:
            self.show(text)
