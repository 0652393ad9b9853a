"""Subcommand parsers whose options are added when they are needed.

``stowage --version`` and ``stowage --help`` build the whole parser; the options of ``run`` come
from the settings, those of ``load`` from the load engine, those of ``worker`` from the worker's
defaults. A ``CommandParser`` adds them only when its command is parsed or its help printed,
so the top-level parser imports none of the runtime. A command's options may come anywhere
among its positionals (``stowage resume ID --store S "go on"``), as people type them. This
module imports only argparse.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

__all__ = ["CommandParser", "OneLineParser", "fill_later"]

Fill = Callable[[argparse.ArgumentParser], None]


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
