"""The site's generated parts, made when the site is built (an MkDocs hook, see ``mkdocs.yml``).

- The command reference: every command of ``stowage``, read from the parser the command itself
  runs (``stowage.cli._main.build_parser``), with its usage, arguments and their help.
- The settings reference: the table made from the one declaration of every setting
  (``stowage.core.setting_infos``, rendered by ``stowage.cli._setting_options.settings_table``,
  the function the command line's own tests hold to the declarations).
- The limits reference: the tables of ``RuntimeLimits`` and ``WorkerOptions``, made from their
  declarations (``stowage.core.limit_infos``), the ones ``stowage worker``'s flags come from.
- A tree shaped like the installed package for the API reference: the repository keeps
  ``stowage`` in three folders (``runtime/``, ``actors/``, ``storage/``), which mkdocstrings
  (griffe) reads from source, so it is given ``build/docs-stage/stowage`` with links to them.

A page asks for a generated part with a marker line, ``<!-- generated: commands -->`` or
``<!-- generated: settings -->``; the marker is replaced in the page as it is built, never in
the file. Nothing here reaches the network.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / "build" / "docs-stage"
#: repository folder -> where it sits in the installed package
FOLDERS = {"actors": "actors", "storage": "storage"}

_USAGE_COLUMNS = "90"  # argparse wraps the usage line at $COLUMNS
_NONE = "\N{EN DASH}"  # an empty cell, as in the settings table


def stage_package(stage: Path = STAGE) -> Path:
    """Make (or bring up to date) ``stage/stowage``: a folder of links to ``runtime/``'s
    entries, with ``actors`` and ``storage`` linked in, the layout of the installed wheel.
    Safe to run while another build runs it too. Returns ``stage``."""
    package = stage / "stowage"
    package.mkdir(parents=True, exist_ok=True)
    wanted = {p.name: p for p in (ROOT / "runtime").iterdir() if p.name != "__pycache__"}
    wanted |= {name: ROOT / folder for folder, name in FOLDERS.items()}
    for link in package.iterdir():
        if link.name not in wanted or not link.is_symlink() or link.resolve() != wanted[link.name]:
            link.unlink(missing_ok=True)
    for name, target in wanted.items():
        # this build, or another one at the same time, may have linked it already
        with contextlib.suppress(FileExistsError):
            (package / name).symlink_to(target, target_is_directory=target.is_dir())
    return stage


def _commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, Any]]:
    """Each command of ``parser``: name, one-line help, its parser, in the order of ``--help``.

    argparse has no public way to list a parser's arguments or its commands' one-line help:
    ``_actions`` and ``_choices_actions`` are what its own help formatter reads (the command
    line's tests read ``_actions`` the same way)."""
    for action in parser._actions:
        if isinstance(action.choices, dict):  # the subcommands: name -> parser
            helps = {a.dest: a.help or "" for a in action._choices_actions}  # type: ignore[attr-defined]
            for name, command in action.choices.items():
                yield name, helps.get(name, ""), command


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _argument_row(action: argparse.Action, settings: dict[str, str]) -> str | None:
    if action.help == argparse.SUPPRESS or action.dest == "help":
        return None
    if action.option_strings:
        name = ", ".join(f"`{o}`" for o in action.option_strings)
        takes = action.nargs != 0
    else:
        name = f"`{action.metavar or action.dest.upper()}`"
        takes = False
    value = ""
    if action.choices is not None and not isinstance(action.choices, dict):
        value = " \\| ".join(f"`{c}`" for c in action.choices)
    elif takes:
        metavar = action.metavar or action.dest.upper()
        value = f"`{_cell(metavar if isinstance(metavar, str) else ' '.join(metavar))}`"
    default = action.default
    shown = "" if default in (None, False, [], (), "") or default == argparse.SUPPRESS else default
    help_text = _cell(action.help or "")
    setting = settings.get(action.option_strings[0]) if action.option_strings else None
    if setting:
        help_text += f" (setting [`{setting}`](settings.md#{setting}))"
    default_cell = f"`{shown}`" if shown != "" else _NONE
    return f"| {name} | {value or _NONE} | {default_cell} | {help_text} |"


def commands_reference() -> str:
    """The markdown of every command: a summary table, then per command its usage and a table
    of its arguments (the ones that set a setting link to it in the settings reference)."""
    from stowage.cli._main import build_parser
    from stowage.core import setting_infos

    settings = {i.cli: i.name for i in setting_infos() if i.cli}
    parser = build_parser()
    commands = list(_commands(parser))
    out = ["| command | what it does |", "| --- | --- |"]
    out += [f"| [`stowage {n}`](#stowage-{n}) | {_cell(h)} |" for n, h, _ in commands]
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _USAGE_COLUMNS
    try:
        for name, text, command in commands:
            usage = command.format_usage().removeprefix("usage: ").rstrip()
            out += ["", f"## stowage {name}", "", _cell(text) + ".", "", "```text", usage, "```"]
            if command.description:
                out += ["", _cell(command.description)]
            rows = [r for a in command._actions if (r := _argument_row(a, settings)) is not None]
            if rows:
                out += ["", "| argument | value | default | what it does |"]
                out += ["| --- | --- | --- | --- |", *rows]
            if command.epilog:
                out += ["", "```text", command.epilog.strip("\n"), "```"]
        out += ["", "## Exit statuses", "", "```text", (parser.epilog or "").strip("\n"), "```"]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(out) + "\n"


def settings_reference() -> str:
    """The table of every setting a file, a variable or a flag may set, with an anchor per
    setting (``settings.md#soft_mark``), made from the declarations."""
    from stowage.cli._setting_options import settings_table
    from stowage.core import setting_infos

    table = settings_table()
    for info in setting_infos():
        # an anchor at each setting's name, for the command reference's links
        table = table.replace(f"| `{info.name}`", f'| <a id="{info.name}"></a>`{info.name}`', 1)
    return table


def limits_reference() -> str:
    """The tables of the runtime's limits (``RuntimeLimits``) and a worker's pacing
    (``WorkerOptions``), made from their declarations (``stowage.core.limit_infos``)."""
    from stowage.core import RuntimeLimits, limit_infos
    from stowage.worker import WORKER_LIMITS, WorkerOptions

    out: list[str] = []
    for title, declared, worker in (
        ("`RuntimeLimits`", RuntimeLimits, WORKER_LIMITS),
        ("`WorkerOptions`", WorkerOptions, WorkerOptions()),
    ):
        out += [
            "",
            f"### {title}",
            "",
            "| limit | flag | default | worker's | range | what it does |",
        ]
        out += ["| --- | --- | --- | --- | --- | --- |"]
        for info in limit_infos(declared):
            default = _NONE if info.default is None else f"`{info.default:g}`"
            value = getattr(worker, info.name)
            worker_default = _NONE if value is None else f"`{value:g}`"
            out.append(
                f'| <a id="{info.name}"></a>`{info.name}` | `{info.flag}` | {default} | '
                f"{worker_default} | {_cell(info.allowed())} | {_cell(info.help)} |"
            )
    return "\n".join(out).lstrip("\n") + "\n"


#: a page's marker line -> what replaces it
MARKERS: dict[str, Callable[[], str]] = {
    "<!-- generated: commands -->": commands_reference,
    "<!-- generated: settings -->": settings_reference,
    "<!-- generated: limits -->": limits_reference,
}


def render(markdown: str) -> str:
    """``markdown`` with each marker line replaced by what it asks for."""
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


# MkDocs events


@event_priority(100)  # before mkdocstrings sets griffe up: it drops a search path not there yet
def on_config(config: Any) -> Any:
    stage_package()
    return config


def on_page_markdown(markdown: str, **_: Any) -> str:
    return render(markdown)


__all__ = [
    "commands_reference",
    "limits_reference",
    "on_config",
    "on_page_markdown",
    "render",
    "settings_reference",
    "stage_package",
]
