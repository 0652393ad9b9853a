"""The command-line options of a session's settings, made from their declarations.

Every setting that declares a flag (``setting(..., cli="--flag")`` in ``core._settings``)
becomes one option here: its type, its choices (a ``Literal``), its bounds and its help come
from the declaration, so the command line cannot disagree with the settings. Each defaults to
None ("not typed"): the value then comes from the configuration, or from the session's
identity when it continues. A flag that takes no value sets the value it declares
(``--no-stream``: ``stream = False``).
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stowage.core import SettingInfo, setting_infos

__all__ = ["add_setting_options", "option_help", "settings_table", "typed_settings"]

_NONE = "\N{EN DASH}"  # an empty cell of the README's table
_BOUND_WORDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def _readable_file(text: str) -> Path:
    """A prompt file must be readable and hold something when it is given."""
    path = Path(text).expanduser()
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {exc}") from None
    if not content.strip():
        raise argparse.ArgumentTypeError(f"{text} is empty: write the compaction prompt in it")
    return path.resolve()


# what a flag's text must also be, beyond its declared type and bounds
_EXTRA_CHECKS: dict[str, Callable[[str], Any]] = {"compact_prompt_file": _readable_file}


def _bounds_text(info: SettingInfo) -> str:
    return " and ".join(f"{_BOUND_WORDS[k]} {v:g}" for k, v in info.bounds.items())


def _parser(info: SettingInfo) -> Callable[[str], Any]:
    """The argparse ``type`` of a setting: its declared type, then its bounds."""
    extra = _EXTRA_CHECKS.get(info.name)
    if extra is not None:
        return extra
    kind = info.annotation
    if kind not in (int, float):
        return str

    def parse(text: str) -> Any:
        noun = "a whole number" if kind is int else "a number"
        bounds = _bounds_text(info)
        expected = f"{noun} {bounds}".strip()
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}") from None
        for key, limit in info.bounds.items():
            ok = {
                "gt": value > limit,
                "ge": value >= limit,
                "lt": value < limit,
                "le": value <= limit,
            }[key]
            if not ok:
                raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


def option_help(info: SettingInfo) -> str:
    """The declaration's help, with its default when the default says something."""
    default = info.default
    if info.cli_value is not None or default is None or isinstance(default, bool):
        return info.help
    shown = f"{default:,}" if isinstance(default, int) and default >= 10_000 else repr(default)
    return f"{info.help} (default {shown})"


def add_setting_options(
    parser: argparse.ArgumentParser, *, help_overrides: dict[str, str] | None = None
) -> None:
    """One option per setting that declares a flag, in declaration order; ``help_overrides``
    replaces a setting's help (``argparse.SUPPRESS`` hides it)."""
    overrides = help_overrides or {}
    for info in setting_infos():
        if info.cli is None:
            continue
        help_text = overrides.get(info.name, option_help(info))
        if info.cli_value is not None:
            parser.add_argument(
                info.cli,
                dest=info.name,
                action="store_const",
                const=info.cli_value,
                default=None,
                help=help_text,
            )
            continue
        if typing.get_origin(info.annotation) is typing.Literal:
            parser.add_argument(
                info.cli,
                dest=info.name,
                default=None,
                choices=list(typing.get_args(info.annotation)),
                help=help_text,
            )
            continue
        if typing.get_origin(info.annotation) is tuple:
            parser.add_argument(
                info.cli,
                dest=info.name,
                default=None,
                action="append",
                metavar=info.metavar,
                help=f"{help_text} (repeat it for more)",
            )
            continue
        parser.add_argument(
            info.cli,
            dest=info.name,
            default=None,
            type=_parser(info),
            metavar=info.metavar,
            help=help_text,
        )


def typed_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the user typed as options (None: not typed), by name."""
    typed = {
        info.name: getattr(args, info.name)
        for info in setting_infos()
        if info.cli is not None and getattr(args, info.name, None) is not None
    }
    # a repeated option gives a list: the setting holds a tuple
    return {k: tuple(v) if isinstance(v, list) else v for k, v in typed.items()}


def settings_table() -> str:
    """The README's table of settings, made from their declarations: config key (``*``: a
    ``[models.NAME]`` profile may set it too), flag, variable, default, bounds, what it does."""
    rows = [
        "| setting | flag | variable | default | bounds | what it does |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for info in setting_infos():
        if not info.config and info.cli is None:
            continue
        name = f"`{info.name}`" + (" *" if info.profile else "")
        flag = f"`{info.cli}`" if info.cli else _NONE
        env = f"`{info.env}`" if info.env else _NONE
        default = _NONE if info.default in (None, (), "") else f"`{info.default!s}`"
        bounds = _bounds_text(info) or _NONE
        if typing.get_origin(info.annotation) is typing.Literal:
            bounds = " / ".join(f"`{v}`" for v in typing.get_args(info.annotation))
        text = info.help.replace("|", "\\|")
        rows.append(f"| {name} | {flag} | {env} | {default} | {bounds} | {text} |")
    return "\n".join(rows) + "\n"
