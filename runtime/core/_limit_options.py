"""Command-line flags made from declared limits (``RuntimeLimits``, ``WorkerOptions``).

One flag a limit, ``--idle-timeout`` for ``idle_timeout``, with the declaration's help, its
range and the default of the command (a worker's sessions hibernate after 2 s, a library
runtime's never): ``stowage worker`` and ``stowage load`` cannot drift from the declaration.
A limit that may be None takes the word ``none``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from ._limits import LimitInfo, limit_infos

__all__ = ["add_limit_options", "limits_from_args"]

_Declared = TypeVar("_Declared")


def _parser(info: LimitInfo) -> Callable[[str], Any]:
    """The argparse ``type`` of a limit: a number in its range, or ``none`` when allowed."""

    def parse(text: str) -> Any:
        if info.none is not None and text.strip().lower() == "none":
            return None
        try:
            value = info.kind(text)
        except ValueError:
            value = text
        if value is None or isinstance(value, str) or not info.fits(value):
            raise argparse.ArgumentTypeError(f"expected {info.allowed()}, got {text}")
        return value

    parse.__name__ = info.kind.__name__  # argparse names the type in its own messages
    return parse


def add_limit_options(parser: argparse.ArgumentParser, defaults: object) -> None:
    """One option a limit of ``defaults``' class, defaulting to ``defaults``' value."""
    for info in limit_infos(type(defaults)):
        default = getattr(defaults, info.name)
        shown = "none" if default is None else f"{default:g}"
        parser.add_argument(
            info.flag,
            dest=info.name,
            type=_parser(info),
            default=default,
            metavar="N" if info.kind is int else "S" if info.unit == "seconds" else "X",
            help=f"{info.help}; {info.allowed()} (default {shown})",
        )


def limits_from_args(declared: type[_Declared], args: argparse.Namespace) -> _Declared:
    """``declared`` made from the options ``add_limit_options`` added."""
    return declared(**{info.name: getattr(args, info.name) for info in limit_infos(declared)})
