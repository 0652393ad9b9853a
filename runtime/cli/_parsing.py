"""Subcommand parsers whose options are added when they are needed.

``stowage --version`` and ``stowage --help`` build the whole parser; the options of ``run`` come
from the settings, those of ``load`` from the load engine, those of ``worker`` from the worker's
defaults. A ``CommandParser`` adds them only when its command is parsed or its help printed,
so the top-level parser imports none of the runtime. A command's options may come anywhere
among its positionals (``stowage resume ID --store S "go on"``), as people type them. This
module imports only the standard library.

People type the options every session command shares (``--store``, ``--log-format``,
``--log-level``) before the command as often as after it (``stowage --store S list``):
``hoist_globals`` moves them after the command word, where the command's own parser reads them.
A command word that names no command is one line with the nearest one (``unknown_command``).
``--log-format`` and ``--log-level`` are declared here once (``log_arguments``): the table of
``_parser`` lists them, and the worker commands, which ``_worker`` also runs on their own, add
them from here.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

__all__ = [
    "Arg",
    "CommandParser",
    "OneLineParser",
    "command_word",
    "fill_later",
    "hoist_globals",
    "level_help",
    "log_arguments",
    "log_options",
    "unknown_command",
]

Fill = Callable[[argparse.ArgumentParser], None]
#: one argument: its flags (or name) and ``add_argument``'s keyword arguments
Arg = tuple[tuple[str, ...], dict[str, Any]]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, with where to read the options,
    instead of the whole usage (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ('{self.prog} --help' lists the options)\n")


class CommandParser(OneLineParser):
    """An ``ArgumentParser`` that runs its pending ``fill`` functions (each adds options) before
    it parses or formats anything: pass it as ``parser_class`` of ``add_subparsers``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: list[Fill] = []
        self._intermixing = False

    def later(self, fill: Fill) -> None:
        """Run ``fill(self)`` when this parser is first used."""
        self._pending.append(fill)

    def _fill(self) -> None:
        while self._pending:
            self._pending.pop(0)(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Options anywhere among the positionals (``resume ID --store S MESSAGE``):
        argparse's intermixed parsing, which itself parses twice through this method."""
        self._fill()
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return super().parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def format_usage(self) -> str:
        self._fill()
        return super().format_usage()

    def format_help(self) -> str:
        self._fill()
        return super().format_help()


def fill_later(parser: argparse.ArgumentParser, fill: Fill) -> None:
    """Add ``fill``'s options to ``parser`` when it is used (a ``CommandParser``), else now."""
    if isinstance(parser, CommandParser):
        parser.later(fill)
    else:
        fill(parser)


#: the options every session command shares; each takes a value
_GLOBAL_OPTIONS = ("--store", "--log-format", "--log-level")
#: the levels ``configure_logging`` takes
_LEVELS = ("debug", "info", "warning", "error")


def level_help(default: str) -> str:
    """The help of ``--log-level``: the levels, ``default`` marked."""
    return ", ".join(f"{level} (default)" if level == default else level for level in _LEVELS)


def log_arguments(default: str) -> tuple[Arg, ...]:
    """``--log-format`` and ``--log-level`` (at ``default`` unless told), as every command
    that logs takes them: the parser's table lists them, the worker commands add them
    (``log_options``), and their help says the same."""
    return (
        (("--log-format",), {"choices": ["console", "json"], "default": "console"}),
        (("--log-level",), {"default": default, "help": level_help(default)}),
    )


def log_options(default: str) -> Fill:
    """What adds ``log_arguments(default)`` to a parser."""

    def add(parser: argparse.ArgumentParser) -> None:
        for flags, kwargs in log_arguments(default):
            parser.add_argument(*flags, **kwargs)

    return add


def hoist_globals(words: Sequence[str]) -> list[str]:
    """``words`` with the shared options typed before the command word moved right after it
    (``--store S list`` -> ``list --store S``), every other word in its place. Raises nothing."""
    front: list[str] = []
    moved: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        name = word.split("=", 1)[0]
        if name in _GLOBAL_OPTIONS:
            takes_next = "=" not in word and index + 1 < len(words)
            moved += [word, words[index + 1]] if takes_next else [word]
            index += 2 if takes_next else 1
        elif word.startswith("-") and word != "-":
            front.append(word)
            index += 1
        else:
            return [*front, word, *moved, *words[index + 1 :]]
    return list(words)


def command_word(words: Sequence[str]) -> str | None:
    """The command word of ``words`` (after ``hoist_globals``): the first that is not an
    option; None when there is none. Raises nothing."""
    return next((w for w in words if not w.startswith("-") or w == "-"), None)


def unknown_command(words: Sequence[str], commands: Sequence[str]) -> str | None:
    """The one-line error for a command word that names none of ``commands``, with the
    nearest (``no command 'lst'; did you mean 'list'?``); None when it names one, or when
    there is no command word (argparse then says what is missing). Raises nothing."""
    word = command_word(words)
    if word is None or word in commands:
        return None
    near = difflib.get_close_matches(word, commands, n=1, cutoff=0.6)
    if not near:  # a prefix of one command only: "stowage res" for resume
        near = [c for c in commands if c.startswith(word)][:2]
        near = near if len(near) == 1 else []
    if near:
        return f"no command {word!r}; did you mean {near[0]!r}?"
    return f"no command {word!r}; 'stowage --help' lists the commands"
