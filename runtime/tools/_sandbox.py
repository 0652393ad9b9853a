"""Where a command runs: in a bubblewrap sandbox, unless the user said ``full``.

Bubblewrap (Debian's ``bubblewrap``, the sandbox Flatpak is built on) needs no Python
binding and no daemon: a command runs in new namespaces with the whole file system bound
read-only, the workspace bound writable only under ``workspace-write`` (its ``.git`` still read-only,
as the default ``tool_deny`` keeps the file tools out of it), its own ``/tmp`` (where a
program or a virtualenv under ``/tmp`` stays visible, read-only),
the session store hidden, and no network unless ``sandbox_network`` says so. Where bwrap is
missing, a sandboxed command is refused with what to install: it never runs unconfined
because a tool was absent.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from ._registry import ToolError

_TMP = Path("/tmp")

__all__ = ["BWRAP", "sandboxed_argv"]

#: the bubblewrap program (searched on PATH)
BWRAP = "bwrap"


def sandboxed_argv(
    argv: Sequence[str],
    *,
    sandbox: Literal["read-only", "workspace-write", "full"],
    workspace: Path,
    cwd: Path,
    hidden: Sequence[Path] = (),
    protected: Sequence[str] = (".git",),
    network: bool = False,
    bwrap: str | None = None,
) -> list[str]:
    """The argv that runs ``argv`` in ``cwd`` under ``sandbox`` (bubblewrap unless ``full``)."""
    if sandbox == "full":
        return list(argv)
    found = bwrap or shutil.which(BWRAP)
    if found is None:
        raise ToolError(
            f"run_command cannot confine a command under the {sandbox} sandbox: bubblewrap "
            "is not installed (apt install bubblewrap, or your system's package of it); "
            "not running it unconfined (--sandbox full runs commands without a sandbox)"
        )
    mode = "--bind" if sandbox == "workspace-write" else "--ro-bind"
    box = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for program in _programs_in_tmp(argv):  # a virtualenv or a checkout in /tmp, read-only
        box += ["--ro-bind", str(program), str(program)]
    box += [mode, str(workspace), str(workspace)]
    for kept in protected:
        if (workspace / kept).exists():  # writable workspace, but never its history
            box += ["--ro-bind", str(workspace / kept), str(workspace / kept)]
    for directory in hidden:
        if directory.is_dir():
            box += ["--tmpfs", str(directory)]
    if not network:
        box.append("--unshare-net")
    box += ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session"]
    box += ["--chdir", str(cwd), "--", *argv]
    return box


def _programs_in_tmp(argv: Sequence[str]) -> list[Path]:
    """Directories under ``/tmp`` holding the program or a ``PATH`` entry. Raises nothing."""
    entries = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    program = argv[0] if argv else ""
    where = program if os.path.isabs(program) else shutil.which(program) if program else None
    if where:
        entries.append(os.path.dirname(where))
    found: list[Path] = []
    for entry in entries:
        path = Path(os.path.abspath(entry))
        if not path.is_relative_to(_TMP) or path == _TMP or not path.is_dir():
            continue
        root = path.parent if path.name == "bin" else path
        if root != _TMP and not any(root.is_relative_to(f) for f in found):
            found = [f for f in found if not f.is_relative_to(root)] + [root]
    return found
