"""Read-only workspace tools: read a file, list a directory, search text, all inside one root.

Every path a model gives is resolved (symlinks included) and refused unless it stays under the
root, so neither ``..``, an absolute path nor a symlink can reach the rest of the machine. The
file system is touched only in a worker thread, never on the event loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from ._registry import FunctionTool, ToolError, ToolRegistry

__all__ = ["workspace_tools"]

_T = TypeVar("_T")

# Bytes sniffed for a NUL to call a file binary: what git and grep do.
_SNIFF_BYTES = 8192
# A matched line longer than this is cut: minified files would flood the context otherwise.
_MAX_LINE_CHARS = 300
_MAX_DIR_ENTRIES = 1000


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path relative to the workspace root.")
    offset: int = Field(default=0, ge=0, description="Character offset to start reading at.")
    limit: int = Field(
        default=20_000, ge=1, le=200_000, description="Maximum number of characters to return."
    )


class ListDirArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(default=".", description="Directory relative to the workspace root.")


class SearchTextArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(min_length=1, description="Literal text to find (case-sensitive).")
    path: str = Field(
        default=".", description="File or directory to search, relative to the workspace root."
    )
    max_results: int = Field(default=50, ge=1, le=1000, description="Stop after this many lines.")


def workspace_tools(root: Path) -> ToolRegistry:
    """A registry of ``read_file``, ``list_dir`` and ``search_text`` over ``root``.

    Raises ``ToolError`` if ``root`` is not an existing directory (checked here, once, before
    any event loop work).
    """
    base = Path(root).resolve()
    if not base.is_dir():
        raise ToolError(f"workspace root {str(root)!r} is not a directory")

    async def read_file(args: ReadFileArgs) -> str:
        return await _in_thread(lambda: _read_file(base, args))

    async def list_dir(args: ListDirArgs) -> str:
        return await _in_thread(lambda: _list_dir(base, args))

    async def search_text(args: SearchTextArgs) -> str:
        return await _in_thread(lambda: _search_text(base, args))

    return ToolRegistry(
        [
            FunctionTool(
                name="read_file",
                description=(
                    "Read a UTF-8 text file in the workspace. Returns up to `limit` characters "
                    "starting at character `offset`; when the file is longer, the output ends "
                    "with a note giving the offset to continue from. Binary files are refused. "
                    "Paths are relative to the workspace root."
                ),
                args_model=ReadFileArgs,
                fn=read_file,
            ),
            FunctionTool(
                name="list_dir",
                description=(
                    "List the entries of a workspace directory, sorted by name, one per line; "
                    "directories end with '/'. Paths are relative to the workspace root; "
                    "use '.' for the root itself."
                ),
                args_model=ListDirArgs,
                fn=list_dir,
            ),
            FunctionTool(
                name="search_text",
                description=(
                    "Find lines containing a literal, case-sensitive text in the files under a "
                    "workspace path (a file or a directory, searched recursively). Prints "
                    "`file:line: text` per match. Skips binary files and hidden directories "
                    "such as .git and .venv. Not a regular expression."
                ),
                args_model=SearchTextArgs,
                fn=search_text,
            ),
        ]
    )


async def _in_thread(fn: Callable[[], _T]) -> _T:
    # Abandoning on cancel lets a tool timeout return at once; these functions only read.
    return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)


def _resolve(base: Path, path: str) -> Path:
    """Resolve ``path`` under ``base``; raises ``ToolError`` if it escapes the workspace."""
    if os.path.isabs(path) or path.startswith("~"):
        raise ToolError(f"path {path!r} is absolute; give a path relative to the workspace root")
    target = (base / path).resolve()
    if not target.is_relative_to(base):
        raise ToolError(f"path {path!r} is outside the workspace; access refused")
    return target


def _display(base: Path, target: Path) -> str:
    return target.relative_to(base).as_posix() or "."


def _is_binary(head: bytes) -> bool:
    return b"\0" in head[:_SNIFF_BYTES]


def _read_file(base: Path, args: ReadFileArgs) -> str:
    target = _resolve(base, args.path)
    if target.is_dir():
        raise ToolError(f"{args.path!r} is a directory; use list_dir to see its entries")
    if not target.is_file():
        raise ToolError(f"no such file: {args.path!r}")
    data = target.read_bytes()
    if _is_binary(data):
        raise ToolError(f"{args.path!r} is a binary file ({len(data)} bytes); not shown")
    text = data.decode("utf-8", errors="replace")
    total = len(text)
    if args.offset >= total and total > 0:
        raise ToolError(f"offset {args.offset} is past the end of {args.path!r} ({total} chars)")
    end = min(args.offset + args.limit, total)
    chunk = text[args.offset : end]
    if args.offset > 0 or end < total:
        chunk += f"\n[showing characters {args.offset}-{end} of {total}"
        chunk += f"; call read_file with offset={end} to read more]" if end < total else "]"
    return chunk


def _list_dir(base: Path, args: ListDirArgs) -> str:
    target = _resolve(base, args.path)
    if not target.exists():
        raise ToolError(f"no such directory: {args.path!r}")
    if not target.is_dir():
        raise ToolError(f"{args.path!r} is a file, not a directory; use read_file to read it")
    entries = sorted(
        entry.name + "/" if entry.is_dir() else entry.name for entry in target.iterdir()
    )
    if not entries:
        return f"{_display(base, target)}/ is empty"
    if len(entries) > _MAX_DIR_ENTRIES:
        hidden = len(entries) - _MAX_DIR_ENTRIES
        entries = [*entries[:_MAX_DIR_ENTRIES], f"[{hidden} more entries not shown]"]
    return "\n".join(entries)


def _search_text(base: Path, args: SearchTextArgs) -> str:
    target = _resolve(base, args.path)
    if not target.exists():
        raise ToolError(f"no such file or directory: {args.path!r}")
    matches: list[str] = []
    for file in _files_under(base, target):
        try:
            data = file.read_bytes()
        except OSError:
            continue  # unreadable (permissions, vanished): nothing to find there
        if _is_binary(data):
            continue
        shown = _display(base, file)
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if args.pattern in line:
                text = line if len(line) <= _MAX_LINE_CHARS else line[:_MAX_LINE_CHARS] + "…"
                matches.append(f"{shown}:{number}: {text}")
                if len(matches) >= args.max_results:
                    matches.append(
                        f"[stopped at {args.max_results} matches; narrow the pattern or path]"
                    )
                    return "\n".join(matches)
    if not matches:
        return f"no matches for {args.pattern!r} under {_display(base, target)}"
    return "\n".join(matches)


def _files_under(base: Path, target: Path) -> list[Path]:
    if target.is_file():
        return [target]
    files: list[Path] = []
    for directory, dirnames, filenames in os.walk(target):
        # Pruning in place stops os.walk descending into hidden dirs (.git, .venv, ...).
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(directory, name)
            # A symlinked file may point outside the workspace; read only what stays inside.
            if path.is_file() and path.resolve().is_relative_to(base):
                files.append(path)
    return files
