"""The chat's slash commands: their table, and how a typed line is read as one."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COMMANDS",
    "Command",
    "Message",
    "PromptCancelled",
    "SlashCommand",
    "Unknown",
    "help_lines",
    "matching",
    "parse_line",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SlashCommand:
    """One command: its name (with the slash), what it takes, and what it does."""

    name: str
    usage: str
    help: str


COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand(name="/help", usage="/help", help="this list"),
    SlashCommand(
        name="/context",
        usage="/context",
        help="what fills the window: tokens by part, and what compaction does next",
    ),
    SlashCommand(
        name="/compact",
        usage="/compact [FOCUS]",
        help="compact now; FOCUS is what the summary must keep in full",
    ),
    SlashCommand(
        name="/protect",
        usage="/protect TEXT",
        help="add a constraint that every compaction keeps",
    ),
    SlashCommand(
        name="/approve",
        usage="/approve [CALL]",
        help="run a call that awaits approval (default: the first) and go on with the turn",
    ),
    SlashCommand(
        name="/deny",
        usage="/deny [CALL]",
        help="refuse a call that awaits approval (default: the first) and go on with the turn",
    ),
    SlashCommand(
        name="/export",
        usage="/export [PATH]",
        help="write the session to PATH (default ID.md; a .jsonl path gets the log records)",
    ),
    SlashCommand(
        name="/fork",
        usage="/fork [ROUND]",
        help="go on in a copy of this session from ROUND (default: now); this one is kept",
    ),
    SlashCommand(
        name="/rewind",
        usage="/rewind ROUND",
        help="go on from the end of ROUND; later rounds stay in the log as a discarded branch",
    ),
    SlashCommand(name="/new", usage="/new", help="start a new session (this one is kept)"),
    SlashCommand(name="/model", usage="/model", help="the model and endpoint this session uses"),
    SlashCommand(name="/quit", usage="/quit", help="leave the chat (so do Ctrl-D, Ctrl-C twice)"),
)

_BY_NAME = {command.name: command for command in COMMANDS}


class PromptCancelled(Exception):
    """Raised by a prompt when Ctrl-C is pressed on an empty line."""


@dataclass(frozen=True, slots=True)
class Message:
    """A line for the model."""

    text: str


@dataclass(frozen=True, slots=True)
class Command:
    """A known command and the text after its name (stripped; empty when none)."""

    name: str
    argument: str


@dataclass(frozen=True, slots=True)
class Unknown:
    """A line that starts with a slash and names no command."""

    name: str


def parse_line(text: str) -> Message | Command | Unknown:
    """What the (stripped, non-empty) line ``text`` asks for. Raises nothing."""
    if text.startswith("//"):
        return Message(text[1:])
    if not text.startswith("/"):
        return Message(text)
    name, _, argument = text.partition(" ")
    if "\n" in name:  # a pasted block that starts with a command word on its own line
        name, _, rest = name.partition("\n")
        argument = f"{rest} {argument}" if argument else rest
    name = name.lower()
    if name not in _BY_NAME:
        return Unknown(name)
    return Command(name, argument.strip())


def matching(typed: str) -> tuple[SlashCommand, ...]:
    """The commands whose names start with ``typed`` (a slash and a word, nothing after it);
    none for anything else. Raises nothing."""
    if not typed.startswith("/") or any(c.isspace() for c in typed):
        return ()
    return tuple(c for c in COMMANDS if c.name.startswith(typed.lower()))


def help_lines() -> list[str]:
    """``/help``: each command with what it does, then the keys."""
    width = max(len(c.usage) for c in COMMANDS)
    lines = [f"  {c.usage:<{width}}  {c.help}" for c in COMMANDS]
    lines += [
        "  Enter sends; Esc Enter (or Alt-Enter) starts a new line; a paste keeps its lines.",
        "  Up and Down walk the history; Ctrl-C stops a turn, clears the line, twice leaves.",
        "  A line starting with // is sent with one slash.",
    ]
    return lines
