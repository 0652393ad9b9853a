"""Input on a terminal, on prompt_toolkit: the chat's lines (editing, a history kept across chats,
bracketed paste, Esc Enter for a new line, completion of the slash commands) and the picker of
``stowage resume`` without an id.

Only ``stowage chat`` (and ``resume`` without an id) on a terminal imports this module (and so prompt_toolkit): piped input
and every other command never pay for it. The history is a file of its own, never the session
log: what was typed includes slash commands the model never sees, and the log is what the
model was sent. It lives in ``$XDG_STATE_HOME/stowage/chat_history`` (by default
``~/.local/state/stowage/chat_history``), one for every store, as a shell keeps one history
for every directory; it is created readable by its owner only. A history that cannot be
read or written is skipped, never an error: the chat must not fail on it.

The picker lists the most recently active sessions are listed newest first, numbered, with what ``stowage list``
says of each; the answer is a number or an id (completed as it is typed), on prompt_toolkit.
Ctrl-C, Ctrl-D or an empty answer leave without continuing anything.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from stowage.core import ConfigError

try:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import CompleteEvent, Completer, Completion
    from prompt_toolkit.document import Document
    from prompt_toolkit.history import FileHistory, History, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
except ModuleNotFoundError as exc:  # pragma: no cover - the [cli] extra brings it
    raise ConfigError(
        "stowage chat on a terminal needs prompt_toolkit; install it with: "
        "pip install 'stowage-runtime[cli]' (or pipe the input for the plain line mode)"
    ) from exc

import sys

from stowage.core import LogStore

from ._chat_commands import PromptCancelled, matching
from ._sessions import SessionSummary, recent_sessions

__all__ = [
    "SlashCompleter",
    "TerminalInput",
    "choice_of",
    "history_file",
    "pick_session",
    "picker_lines",
]


def history_file(env: Mapping[str, str] | None = None) -> Path | None:
    """Where the chat keeps what was typed: ``$XDG_STATE_HOME/stowage/chat_history``, else
    ``~/.local/state/stowage/chat_history``; None when there is no home directory either (the
    history is then kept for this chat only). Raises nothing."""
    env = os.environ if env is None else env
    state = env.get("XDG_STATE_HOME") or ""
    if Path(state).is_absolute():  # the XDG rule: a relative path is to be ignored
        return Path(state) / "stowage" / "chat_history"
    try:
        home = Path.home()
    except RuntimeError:
        return None
    return home / ".local" / "state" / "stowage" / "chat_history"


class _QuietFileHistory(FileHistory):
    """A ``FileHistory`` that skips a file it cannot read or write instead of failing."""

    def load_history_strings(self) -> Iterable[str]:
        try:
            return list(super().load_history_strings())
        except OSError:
            return []

    def store_string(self, string: str) -> None:
        with contextlib.suppress(OSError):
            super().store_string(string)


def _open_history(path: Path | None) -> History:
    if path is None:
        return InMemoryHistory()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # made by its owner for its owner: what people type to a model can be private
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    except OSError:
        return InMemoryHistory()
    return _QuietFileHistory(str(path))


class SlashCompleter(Completer):
    """Completes the command word after ``/``, and a call id after ``/approve`` or ``/deny``
    from ``pending`` (the ids of the calls that await approval now)."""

    def __init__(self, pending: Callable[[], Sequence[str]]) -> None:
        self._pending = pending

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        typed = document.text_before_cursor
        for command in matching(typed):
            yield Completion(command.name, start_position=-len(typed), display_meta=command.help)
        for word in ("/approve ", "/deny "):
            rest = typed[len(word) :]
            if typed.startswith(word) and not any(c.isspace() for c in rest):
                for call_id in self._pending():
                    if call_id.startswith(rest):
                        yield Completion(call_id, start_position=-len(rest))


def _bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("escape", "enter")  # Esc then Enter; Alt-Enter sends the same keys
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @bindings.add("c-c")
    def _clear_or_cancel(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=PromptCancelled())

    return bindings


class TerminalInput:
    """Reads the chat's lines and its yes/no answers on the terminal."""

    def __init__(self, *, history: Path | None, pending: Callable[[], Sequence[str]]) -> None:
        """``history``: the history file (None: kept in memory only); ``pending``: the ids of
        the calls that await approval, for completion."""
        bindings = _bindings()
        self._lines: PromptSession[str] = PromptSession(
            history=_open_history(history),
            completer=SlashCompleter(pending),
            complete_while_typing=True,
            key_bindings=bindings,
        )
        self._answers: PromptSession[str] = PromptSession(key_bindings=bindings)

    async def line(self) -> str | None:
        """The next line (None at Ctrl-D on an empty prompt). Raises ``PromptCancelled`` for
        Ctrl-C on an empty prompt (on a line that has text, Ctrl-C clears it)."""
        try:
            # the chat watches SIGINT itself while a turn runs: prompt_toolkit must neither
            # take over nor remove that handler, nor the event loop's exception handler
            return await self._lines.prompt_async(
                "> ", handle_sigint=False, set_exception_handler=False
            )
        except EOFError:
            return None

    async def ask(self, question: str) -> str | None:
        """One answer to ``question``, stripped and lower-cased; None for Ctrl-C or Ctrl-D."""
        try:
            answer = await self._answers.prompt_async(
                question, handle_sigint=False, set_exception_handler=False
            )
        except (EOFError, PromptCancelled):
            return None
        return answer.strip().lower()


#: how many sessions the picker lists
_SHOWN = 15


def picker_lines(rows: Sequence[SessionSummary]) -> list[str]:
    """The numbered list the picker shows. Raises nothing."""
    lines = []
    for number, row in enumerate(rows, 1):
        used = "" if row.percent_of_usable is None else f", {row.percent_of_usable:.0f}% full"
        when = row.last_activity[:16].replace("T", " ")
        turns = f"{row.turns} turn{'s' if row.turns != 1 else ''}"
        lines.append(f"  {number:>2}. {row.id:<28} {when}  {turns}{used}  ({row.model})")
    return lines


def choice_of(answer: str, rows: Sequence[SessionSummary]) -> str | None:
    """The session id ``answer`` picks: a number of the list or an id in it; None for
    anything else. Raises nothing."""
    answer = answer.strip()
    if answer.isdigit() and 1 <= int(answer) <= len(rows):
        return rows[int(answer) - 1].id
    return answer if any(row.id == answer for row in rows) else None


async def pick_session(store: LogStore) -> str | None:
    """Ask on the terminal which of the store's recent sessions to continue (``store`` is closed
    after reading); None when the user leaves without picking. Raises ``SessionNotFound`` when the
    store holds no session."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import WordCompleter
    from stowage.core import SessionNotFound

    rows = (await recent_sessions(store))[:_SHOWN]
    if not rows:
        raise SessionNotFound("no session in this store to resume: start one with 'stowage run'")
    print("recent sessions:", file=sys.stderr)
    for line in picker_lines(rows):
        print(line, file=sys.stderr)
    asking: PromptSession[str] = PromptSession(
        completer=WordCompleter([row.id for row in rows]), complete_while_typing=True
    )
    question = f"resume which? [1-{len(rows)} or an id, Enter to leave] "
    while True:
        try:
            answer = await asking.prompt_async(question)
        except (EOFError, KeyboardInterrupt):
            return None
        if not answer.strip():
            return None
        picked = choice_of(answer, rows)
        if picked is not None:
            return picked
        print(f"  {answer.strip()!r} is not in the list", file=sys.stderr)
