"""A live status line on stderr while a turn works: what the session is doing right now."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text
from stowage.core import (
    AssistantDelta,
    CompactionDecided,
    CompactionWaited,
    Event,
    HistoryCompacted,
    Microcompacted,
    ModelRetrying,
    RoundCommitted,
    RoundStarted,
    ToolFinished,
    ToolStarted,
)

__all__ = ["StatusLine", "describe"]


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
