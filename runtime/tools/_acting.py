"""Tools that act: write a file, edit one, run a command; each says what it touches.

They are offered when the session's sandbox lets something change (``workspace-write`` or
``full``); the approval policy (``_policy``) decides on each call before it runs, from the
``Effect``s the tool declares. Every path passes the workspace rules of ``_guard`` (inside
the root, never the session store, no secrets, nothing ``.gitignore`` ignores). A write is
atomic (a temporary file renamed over the target), so a process killed mid-write leaves the
old file or the new one, never half of it; and every acting tool can tell, after such a
kill, whether its call was applied (``applied_after_crash``), so a resume records "applied"
or "interrupted" and never applies it twice.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
import whatthepatch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from stowage.core import Effect, Settings

from ._guard import Guard
from ._registry import FunctionTool, ToolError

__all__ = ["EditFileArgs", "WriteFileArgs", "applied_after_crash", "file_tools"]

_T = TypeVar("_T")
# lines of context shown around a stale or ambiguous match
_CONTEXT_LINES = 3
# the most a write or an edit's result may be (a model pasting a huge file is a mistake)
_MAX_FILE_CHARS = 2_000_000


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path relative to the workspace root.")
    content: str = Field(description="The whole new content of the file.")


class EditFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path relative to the workspace root.")
    old: str | None = Field(
        default=None, description="Exact text to replace (found once, unless replace_all)."
    )
    new: str | None = Field(default=None, description="The text that replaces it.")
    replace_all: bool = Field(default=False, description="Replace every occurrence of old.")
    patch: str | None = Field(
        default=None, description="A unified diff of this file, instead of old and new."
    )

    @model_validator(mode="after")
    def _one_form(self) -> EditFileArgs:
        if (self.patch is None) == (self.old is None or self.new is None):
            raise ValueError("give either old and new (exact replace), or patch (a unified diff)")
        if self.old is not None and not self.old:
            raise ValueError("old must not be empty: use write_file to write a whole file")
        return self


def _atomic_write(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` atomically: a kill leaves the old file or the new one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if target.exists():
            os.chmod(temporary, target.stat().st_mode & 0o7777)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read(target: Path, path: str) -> str:
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ToolError(f"{path!r} does not exist; write_file creates a file") from None
    except UnicodeDecodeError:
        raise ToolError(f"{path!r} is not UTF-8 text; it cannot be edited here") from None
    except IsADirectoryError:
        raise ToolError(f"{path!r} is a directory") from None


def _around(text: str, index: int) -> str:
    """The lines around character ``index`` of ``text``, numbered."""
    lines = text.splitlines()
    line = text.count("\n", 0, index)
    start, end = max(0, line - _CONTEXT_LINES), min(len(lines), line + _CONTEXT_LINES + 1)
    return "\n".join(f"{n + 1:>5}| {lines[n]}" for n in range(start, end))


def _stale(text: str, old: str, path: str) -> ToolError:
    """What an edit whose ``old`` text is not in the file says: the nearest lines found."""
    first = old.strip().splitlines()[0] if old.strip() else old
    lines = text.splitlines()
    near = difflib.get_close_matches(first, lines, n=1, cutoff=0.5)
    found = ""
    if near:
        index = text.find(near[0])
        found = f"; the closest text in the file is at line {text.count(chr(10), 0, index) + 1}:\n"
        found += _around(text, index)
    return ToolError(
        f"edit of {path!r} refused: the text to replace is not in the file (it may have "
        f"changed since it was read: read it again){found}"
    )


def _replaced(text: str, args: EditFileArgs) -> str:
    assert args.old is not None and args.new is not None
    count = text.count(args.old)
    if count == 0:
        raise _stale(text, args.old, args.path)
    if count > 1 and not args.replace_all:
        places = []
        start = 0
        for _ in range(count):
            index = text.find(args.old, start)
            places.append(str(text.count("\n", 0, index) + 1))
            start = index + 1
        raise ToolError(
            f"edit of {args.path!r} refused: the text to replace is there {count} times (lines "
            f"{', '.join(places)}): give more of the text around it, or replace_all true"
        )
    return (
        text.replace(args.old, args.new)
        if args.replace_all
        else text.replace(args.old, args.new, 1)
    )


def _blank_context(patch: str) -> str:
    """``patch`` with empty lines in hunks read as blank context (models drop the space)."""
    lines = patch.split("\n")
    in_hunk = False
    for i, line in enumerate(lines[:-1]):
        if line.startswith("@@"):
            in_hunk = True
        elif line.startswith(("--- ", "diff ")):
            in_hunk = False
        elif in_hunk and line == "":
            lines[i] = " "
    return "\n".join(lines)


def _patched(text: str, args: EditFileArgs, *, reverse: bool = False) -> str:
    assert args.patch is not None
    diffs = list(whatthepatch.parse_patch(_blank_context(args.patch)))
    if len(diffs) != 1:
        raise ToolError(f"the patch for {args.path!r} must hold one file's diff, not {len(diffs)}")
    try:
        lines = whatthepatch.apply_diff(diffs[0], text, reverse=reverse)
    except whatthepatch.exceptions.HunkApplyException as exc:
        raise ToolError(
            f"edit of {args.path!r} refused: the patch does not apply to the file as it is "
            f"({exc}; read it again and make the patch from what it holds now)"
        ) from None
    ends = "\n" if text.endswith("\n") or not text else ""
    return "\n".join(lines) + ends


def _edited(text: str, args: EditFileArgs) -> str:
    return _patched(text, args) if args.patch is not None else _replaced(text, args)


def _diff(before: str, after: str, path: str) -> str:
    """A unified diff of an edit, for the output the model reads (and a person approves)."""
    diff = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(diff)


def applied_after_crash(name: str, arguments: dict[str, Any], guard: Guard) -> bool | None:
    """Whether a write or an edit whose call was logged, and whose output never was, had
    been applied when its process was killed: the file against the intended result. None
    when the file cannot say (it changed since, or the call is not a write or an edit).
    Raises nothing."""
    try:
        if name == "write_file":
            return _write_applied(WriteFileArgs.model_validate(arguments), guard)
        if name == "edit_file":
            return _edit_applied(EditFileArgs.model_validate(arguments), guard)
    except Exception:  # whatever the file holds now, the answer is "cannot say"
        return None
    return None


def _write_applied(args: WriteFileArgs, guard: Guard) -> bool | None:
    target = guard.scope().resolve(args.path)
    return target.is_file() and target.read_text(encoding="utf-8") == args.content


def _edit_applied(args: EditFileArgs, guard: Guard) -> bool | None:
    target = guard.scope().resolve(args.path)
    text = target.read_text(encoding="utf-8")
    if args.patch is not None:
        try:
            _patched(text, args, reverse=True)
            return True
        except ToolError:
            pass
        try:
            _patched(text, args)
            return False
        except ToolError:
            return None
    assert args.old is not None and args.new is not None
    if args.old in args.new or args.new in args.old:
        return None  # one holds the other: the file cannot tell before from after
    if args.old in text:
        return False
    return True if args.new in text else None


#: the most lines of a diff or a new file a preview shows
_PREVIEW_LINES = 200


def _shown(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= _PREVIEW_LINES:
        return text
    rest = len(lines) - _PREVIEW_LINES
    return "\n".join(lines[:_PREVIEW_LINES]) + f"\n[... {rest:,} more lines]\n"


def _write_preview(args: WriteFileArgs, guard: Guard) -> str:
    target = guard.scope().resolve(args.path)
    if not target.is_file():
        lines = args.content.count("\n") + (not args.content.endswith("\n"))
        return f"create {args.path} ({lines:,} lines):\n{_shown(args.content)}"
    before = _read(target, args.path)
    if before == args.content:
        return f"write {args.path}: the file already holds this content"
    return f"replace {args.path}:\n{_shown(_diff(before, args.content, args.path))}"


def _edit_preview(args: EditFileArgs, guard: Guard) -> str:
    target = guard.scope().resolve(args.path)
    try:
        before = _read(target, args.path)
        after = _edited(before, args)
    except ToolError as exc:
        return f"edit {args.path}: as the file is now, this edit will be refused: {exc}"
    return f"edit {args.path}:\n{_shown(_diff(before, after, args.path))}"


def file_tools(guard: Guard, settings: Settings) -> list[FunctionTool[Any]]:
    """``write_file`` and ``edit_file`` over the guard's workspace."""
    del settings  # the workspace rules come with the guard

    def relative(path: str) -> str:
        return os.path.normpath(path)

    async def write_file(args: WriteFileArgs) -> str:
        def work() -> str:
            if len(args.content) > _MAX_FILE_CHARS:
                raise ToolError(f"content of {args.path!r} is over {_MAX_FILE_CHARS:,} characters")
            target = guard.scope().resolve(args.path)
            if target.is_dir():
                raise ToolError(f"{args.path!r} is a directory")
            existed = target.exists()
            _atomic_write(target, args.content)
            verb = "replaced" if existed else "created"
            return f"{verb} {args.path} ({len(args.content):,} characters)"

        return await _in_thread(work)

    async def edit_file(args: EditFileArgs) -> str:
        def work() -> str:
            target = guard.scope().resolve(args.path)
            before = _read(target, args.path)
            after = _edited(before, args)
            if len(after) > _MAX_FILE_CHARS:
                raise ToolError(
                    f"the edited {args.path!r} would be over {_MAX_FILE_CHARS:,} characters"
                )
            if after == before:
                return f"{args.path}: the edit changes nothing"
            _atomic_write(target, after)
            return f"edited {args.path}:\n{_diff(before, after, relative(args.path))}"

        return await _in_thread(work)

    return [
        FunctionTool(
            name="write_file",
            description=(
                "Write a whole file (creating it, and the folders on its path, inside the "
                "workspace). Use edit_file to change part of an existing file."
            ),
            args_model=WriteFileArgs,
            fn=write_file,
            effects=lambda a: (Effect("write", relative(a.path)),),
            after_crash=lambda a: _write_applied(a, guard),
            preview=lambda a: _write_preview(a, guard),
        ),
        FunctionTool(
            name="edit_file",
            description=(
                "Edit a file: replace the exact text old with new (old must be found once, "
                "unless replace_all), or apply patch, a unified diff of the file. An edit "
                "whose text is not found or found more than once is refused, showing what "
                "the file holds."
            ),
            args_model=EditFileArgs,
            fn=edit_file,
            effects=lambda a: (Effect("edit", relative(a.path)),),
            after_crash=lambda a: _edit_applied(a, guard),
            preview=lambda a: _edit_preview(a, guard),
        ),
    ]


async def _in_thread(work: Callable[[], _T]) -> _T:
    return await anyio.to_thread.run_sync(work)
