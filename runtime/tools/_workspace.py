"""The workspace tools: read a file, list a directory, search text, all inside one root; and,
when the session's sandbox lets something change, write and edit files and run commands
(``_acting``, ``_command``).

Every path a model gives passes the rules of ``_guard`` (inside the root, symlinks included;
never the session store; no secrets; nothing ``.gitignore`` ignores, unless the settings allow
it); listing and searching hide what reading refuses. Every read is bounded: ``read_file``
reads at most ``Settings.read_max_bytes`` from an offset, never a whole file, and says what it
left out; ``search_text`` stops at ``Settings.search_max_matches`` lines and skips files over
``Settings.search_max_file_bytes`` and binary ones, and says so. The file system is touched
only in a worker thread, never on the event loop.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field
from stowage.core import ConfigError, Effect, OutputBudget, Settings, current_tool_context

from ._acting import file_tools
from ._command import command_tool
from ._guard import Guard, Refusal, Scope
from ._registry import FunctionTool, ToolError, ToolRegistry

__all__ = ["workspace_tools"]

_T = TypeVar("_T")

# Bytes sniffed to call a file binary (a NUL, or not UTF-8): what git and grep do.
_SNIFF_BYTES = 8192
# A matched line longer than this is cut: minified files would flood the context otherwise.
_MAX_LINE_CHARS = 300
_MAX_DIR_ENTRIES = 1000
# Files too large to search named in the note, at most.
_MAX_SKIPPED_NAMES = 5
# The longest UTF-8 character: a read cut at a byte limit moves this far at most to keep
# characters whole.
_MAX_CHAR_BYTES = 4
_DEFAULT_READ_BYTES = 20_000


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path relative to the workspace root.")
    offset: int = Field(default=0, ge=0, description="Byte offset to start reading at.")
    limit: int = Field(
        default=_DEFAULT_READ_BYTES,
        ge=1,
        description="Most bytes to return; the workspace's read cap lowers a larger value.",
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


def workspace_tools(root: Path, *, settings: Settings | None = None) -> ToolRegistry:
    """A registry of ``read_file``, ``list_dir`` and ``search_text`` over ``root``; with
    ``write_file``, ``edit_file`` and ``run_command`` when ``settings.sandbox`` is not
    ``read-only``.

    ``settings`` gives the store to keep out, the read and search bounds, ``.gitignore``
    handling and the allowed patterns (``Settings()``'s defaults when ``None``: the store is
    ``.stowage`` under the current directory). Raises ``ToolError`` if ``root`` is not an
    existing directory, ``ConfigError`` for a bound below 1 or an allow pattern that does not
    compile (checked here, once, before any event loop work).
    """
    settings = settings if settings is not None else Settings()
    for name in ("read_max_bytes", "search_max_matches", "search_max_file_bytes"):
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    base = Path(root).resolve()
    if not base.is_dir():
        raise ToolError(f"workspace root {str(root)!r} is not a directory")
    guard = Guard(base, settings)

    async def read_file(args: ReadFileArgs) -> str:
        # a read the session's window cannot show whole would be cut to its head and tail, or
        # compacted away and read again: read a part it can show, and say where to go on
        context = current_tool_context.get()
        budget = context.output if context is not None else None
        return await _in_thread(
            lambda: _read_file(guard.scope(), args, settings.read_max_bytes, budget)
        )

    async def list_dir(args: ListDirArgs) -> str:
        return await _in_thread(lambda: _list_dir(guard.scope(), args))

    async def search_text(args: SearchTextArgs) -> str:
        context = current_tool_context.get()
        max_chars = context.output.whole if context is not None and context.output else None
        return await _in_thread(
            lambda: _search_text(
                guard.scope(),
                args,
                settings.search_max_matches,
                settings.search_max_file_bytes,
                max_chars,
            )
        )

    return ToolRegistry(
        [
            FunctionTool(
                name="read_file",
                description=(
                    "Read a UTF-8 text file in the workspace. Returns up to `limit` bytes "
                    "starting at byte `offset`; when the file goes on, the output ends with a "
                    "note giving the offset to continue from. Binary files, secrets (.env, "
                    "keys), files ignored by .gitignore and the session store are refused. "
                    "Paths are relative to the workspace root."
                ),
                args_model=ReadFileArgs,
                fn=read_file,
                effects=lambda a: (Effect("read", os.path.normpath(a.path)),),
            ),
            FunctionTool(
                name="list_dir",
                description=(
                    "List the entries of a workspace directory, sorted by name, one per line; "
                    "directories end with '/'. Entries read_file would refuse are left out and "
                    "counted. Paths are relative to the workspace root; use '.' for the root."
                ),
                args_model=ListDirArgs,
                fn=list_dir,
                effects=lambda a: (Effect("list", os.path.normpath(a.path)),),
            ),
            FunctionTool(
                name="search_text",
                description=(
                    "Find lines containing a literal, case-sensitive text in the files under a "
                    "workspace path (a file or a directory, searched recursively). Prints "
                    "`file:line: text` per match. Skips binary and very large files, hidden "
                    "directories such as .git and .venv, and what read_file refuses. Not a "
                    "regular expression."
                ),
                args_model=SearchTextArgs,
                fn=search_text,
                effects=lambda a: (Effect("search", os.path.normpath(a.path)),),
            ),
            # what acts is offered only when the sandbox lets something change
            *(
                ()
                if settings.sandbox == "read-only"
                else (*file_tools(guard, settings), command_tool(guard, settings))
            ),
        ]
    )


async def _in_thread(fn: Callable[[], _T]) -> _T:
    # Abandoning on cancel lets a tool timeout return at once; these functions only read.
    return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)


def _display(base: Path, target: Path) -> str:
    return target.relative_to(base).as_posix() or "."


def _binary_reason(head: bytes, *, whole: bool) -> str | None:
    """Why a file starting with ``head`` is binary (``whole``: that is all of it), or None."""
    if b"\0" in head[:_SNIFF_BYTES]:
        return "it has NUL bytes"
    try:
        head[:_SNIFF_BYTES].decode("utf-8")
    except UnicodeDecodeError as exc:
        cut_short = exc.reason == "unexpected end of data" and not whole
        if not (cut_short and exc.start >= min(len(head), _SNIFF_BYTES) - _MAX_CHAR_BYTES):
            return "it is not UTF-8 text"
    return None


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _read_file(scope: Scope, args: ReadFileArgs, cap: int, budget: OutputBudget | None) -> str:
    target = scope.resolve(args.path)
    if target.is_dir():
        raise ToolError(f"{args.path!r} is a directory; use list_dir to see its entries")
    if not target.is_file():
        raise ToolError(f"no such file: {args.path!r}")
    with open(target, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        head = file.read(_SNIFF_BYTES)
        reason = _binary_reason(head, whole=len(head) >= size)
        if reason is not None:
            raise ToolError(f"{args.path!r} is a binary file ({size:,} bytes; {reason}); not shown")
        if args.offset > 0 and args.offset >= size:
            raise ToolError(f"offset {args.offset} is past the end of {args.path!r} ({size} bytes)")
        if budget is not None:
            # what the window shows whole comes back whole; of more, a part a compaction keeps
            cap = max(1, min(cap, budget.part(size - args.offset)))
        want = min(args.limit, cap)
        file.seek(args.offset)
        # a few bytes more than wanted tell whether the cut falls inside a character
        data = file.read(want + _MAX_CHAR_BYTES)
    start = 0
    if args.offset > 0:  # an offset inside a character starts at the next one
        while start < min(len(data), _MAX_CHAR_BYTES - 1) and _is_continuation(data[start]):
            start += 1
    cut = _char_cut(data, start, start + want) if len(data) > start + want else len(data)
    text = data[start:cut].decode("utf-8", errors="replace")
    first, end = args.offset + start, args.offset + cut
    if first == 0 and end >= size:
        return text
    note = f"\n[bytes {first:,}-{end:,} of {size:,}"
    if end < size:
        note += (
            f"; {size - end:,} more bytes not shown; call read_file with offset={end} to continue"
        )
        if args.limit > cap:
            note += f" (at most {cap:,} bytes a call)"
    return text + note + "]"


def _char_cut(data: bytes, start: int, limit: int) -> int:
    """Where to end a read of ``data[start:]`` wanted up to ``limit``: a UTF-8 boundary."""
    cut = limit
    floor = max(start, limit - (_MAX_CHAR_BYTES - 1))
    while cut > floor and _is_continuation(data[cut]):
        cut -= 1
    if cut > start and not _is_continuation(data[cut]):
        return cut
    cut = limit
    while cut < len(data) and cut - limit < _MAX_CHAR_BYTES - 1 and _is_continuation(data[cut]):
        cut += 1
    return cut


def _list_dir(scope: Scope, args: ListDirArgs) -> str:
    base = scope.base
    target = scope.resolve(args.path)
    if not target.exists():
        raise ToolError(f"no such directory: {args.path!r}")
    if not target.is_dir():
        raise ToolError(f"{args.path!r} is a file, not a directory; use read_file to read it")
    parts = target.relative_to(base).parts
    entries: list[str] = []
    hidden: Counter[str] = Counter()
    with os.scandir(target) as found:
        for entry in sorted(found, key=lambda e: e.name):
            path = Path(entry.path)
            is_dir = path.is_dir()
            refusal = _entry_refusal(scope, (*parts, entry.name), path, is_dir)
            if refusal is not None:
                hidden[refusal.label] += 1
            else:
                entries.append(entry.name + "/" if is_dir else entry.name)
    note = ""
    if hidden:
        counts = ", ".join(f"{count} {label}" for label, count in sorted(hidden.items()))
        note = f"[not shown: {counts}]"
    if not entries:
        shown = _display(base, target)
        return f"{shown}/ is empty" if not hidden else f"{shown}/ has nothing to show\n{note}"
    if len(entries) > _MAX_DIR_ENTRIES:
        more = len(entries) - _MAX_DIR_ENTRIES
        entries = [*entries[:_MAX_DIR_ENTRIES], f"[{more} more entries not shown]"]
    return "\n".join([*entries, note] if note else entries)


def _entry_refusal(
    scope: Scope, parts: tuple[str, ...], path: Path, is_dir: bool
) -> Refusal | None:
    """Why an entry (its parent already passed) is refused; a symlink's target must pass too."""
    refusal = scope.entry_refusal(parts, is_dir)
    if refusal is None and path.is_symlink():
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # 3.11 raises RuntimeError for a symlink loop
            return None  # nothing can be read through it; read_file says why
        if real.is_relative_to(scope.base):
            refusal = scope.refusal(real.relative_to(scope.base).parts, is_dir)
    return refusal


def _search_text(
    scope: Scope, args: SearchTextArgs, most: int, max_file_bytes: int, max_chars: int | None
) -> str:
    """The matching lines within the caps, with notes on where it stopped and what it skipped."""
    base = scope.base
    target = scope.resolve(args.path)
    if not target.exists():
        raise ToolError(f"no such file or directory: {args.path!r}")
    limit = min(args.max_results, most)
    matches: list[str] = []
    too_large: list[str] = []
    stopped = False
    chars = 0
    window_full = False
    for file in _files_under(scope, target):
        shown = _display(base, file)
        try:
            with open(file, "rb") as handle:
                if os.fstat(handle.fileno()).st_size > max_file_bytes:
                    too_large.append(shown)
                    continue
                data = handle.read(max_file_bytes + 1)
        except OSError:
            continue  # unreadable (permissions, vanished): nothing to find there
        if len(data) > max_file_bytes:  # it grew since
            too_large.append(shown)
            continue
        if _binary_reason(data, whole=True) is not None:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if args.pattern not in line:
                continue
            if len(matches) == limit:
                stopped = True
                break
            text = line if len(line) <= _MAX_LINE_CHARS else line[:_MAX_LINE_CHARS] + "…"
            match = f"{shown}:{number}: {text}"
            chars += len(match) + 1
            if max_chars is not None and chars > max_chars and matches:
                stopped = window_full = True
                break
            matches.append(match)
        if stopped:
            break
    lines = matches or [f"no matches for {args.pattern!r} under {_display(base, target)}"]
    if window_full:
        lines.append(
            f"[stopped at {len(matches)} matches, what the context window shows at once; "
            "more lines match: narrow the pattern or path]"
        )
    elif stopped:
        most_note = ", the most search_text returns" if limit < args.max_results else ""
        lines.append(
            f"[stopped at {limit} matches{most_note}; more lines match: narrow the pattern or path]"
        )
    if too_large:
        names = ", ".join(too_large[:_MAX_SKIPPED_NAMES])
        if len(too_large) > _MAX_SKIPPED_NAMES:
            names += f" and {len(too_large) - _MAX_SKIPPED_NAMES} more"
        files = "file" if len(too_large) == 1 else "files"
        lines.append(
            f"[skipped {len(too_large)} {files} over {max_file_bytes:,} bytes: {names}; "
            "read_file reads them in parts]"
        )
    return "\n".join(lines)


def _files_under(scope: Scope, target: Path) -> Iterator[Path]:
    """The files to search under ``target``, sorted; refused and hidden ones skipped."""
    base = scope.base
    if target.is_file():
        yield target
        return
    stack = [target]
    while stack:
        directory = stack.pop()
        parts = directory.relative_to(base).parts
        try:
            with os.scandir(directory) as found:
                entries = sorted(found, key=lambda e: e.name)
        except OSError:
            continue
        subdirs: list[Path] = []
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    # hidden directories (.git, .venv, ...) are tooling, not the project
                    if not entry.name.startswith(".") and (
                        scope.entry_refusal((*parts, entry.name), True) is None
                    ):
                        subdirs.append(Path(entry.path))
                    continue
                if not entry.is_file():  # sockets, FIFOs, dangling or directory symlinks
                    continue
            except OSError:
                continue
            path = Path(entry.path)
            if scope.entry_refusal((*parts, entry.name), False) is not None:
                continue
            if entry.is_symlink() and not _symlink_passes(scope, path):
                continue
            yield path
        stack.extend(reversed(subdirs))


def _symlink_passes(scope: Scope, path: Path) -> bool:
    """Whether a symlinked file resolves inside the workspace to a file the rules let through."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # 3.11 raises RuntimeError for a symlink loop
        return False
    if not real.is_relative_to(scope.base):
        return False
    return scope.refusal(real.relative_to(scope.base).parts, False) is None
