"""What of a turn's streamed answer a terminal is shown, so that stdout ends with the committed
answer whole and never carries more than ``max_answer_chars`` of streamed text in a turn."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AnswerStream"]


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
