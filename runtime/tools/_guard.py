"""What the workspace tools may touch: the rules, checked on every path a model names.

A path is refused, with a message naming it and the rule, when it

* leaves the workspace (``..``, an absolute path, a symlink resolving outside);
* lies in the session store: the store directory of the settings (when it is a local
  directory), any directory named ``.stowage``, any other directory holding stowage logs or
  lease lock files, or such a file itself; no setting lifts this: the store holds other
  sessions' transcripts;
* looks like a secret (``DEFAULT_SECRET_PATTERNS``), unless ``Settings.workspace_allow``
  names it;
* is ignored by a ``.gitignore`` of the workspace (or ``.git/info/exclude``), unless
  ``Settings.workspace_gitignore`` is off or ``Settings.workspace_allow`` names it.

Listing and searching hide what reading refuses. Both the path as given and the path its
symlinks resolve to must pass, so neither a symlink nor a ``..`` step hides a refused file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from pathspec import GitIgnoreSpec
from stowage.core import ConfigError, Settings

from ._registry import ToolError

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "IGNORED",
    "SECRET",
    "STORE",
    "STORE_DIR_NAME",
    "Guard",
    "Refusal",
    "Scope",
    "is_store_file",
]

#: Files and directories refused as secrets (gitignore syntax, matched at any depth).
DEFAULT_SECRET_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".pypirc",
    ".git-credentials",
    "credentials*.json",
    ".aws/",
    ".ssh/",
    ".gnupg/",
)

#: The default store directory's name; a directory so named is refused wherever it is.
STORE_DIR_NAME = ".stowage"

# A stowage log starts with its session record: {"v":1,"seq":0,"ts":...,"type":"session",...
_LOG_PREFIX = b'{"v":'
_LOG_SESSION = b'"type":"session"'
# A JSONL store's lease record <id>.lock holds {"owner":...,"token":n}.
_LOCK_PREFIX = b'{"'
_LOCK_TOKEN = b'"token":'
_LOG_PEEK_BYTES = 256
# Store-like files peeked per directory to decide whether it is a store; one real one suffices.
_LOG_PEEKS_PER_DIR = 3
# A .gitignore larger than this is read only this far (a real one is a few KB).
_MAX_GITIGNORE_BYTES = 1024 * 1024


class Refusal(NamedTuple):
    """Why a path may not be read: a short ``label`` for counts, the ``why`` for a refusal."""

    label: str
    why: str


STORE = Refusal(
    "in the session store", "it is in the session store, which holds sessions' transcripts"
)
SECRET = Refusal(
    "secret",
    "it looks like a secret (keys, credentials, .env); Settings.workspace_allow can allow it",
)
IGNORED = Refusal(
    "ignored by .gitignore", "it is ignored by .gitignore; Settings.workspace_allow can allow it"
)


def _spec(patterns: tuple[str, ...] | list[str], what: str) -> GitIgnoreSpec:
    try:
        return GitIgnoreSpec.from_lines(list(patterns))
    except Exception as exc:  # pathspec raises its own error types for a bad pattern
        raise ConfigError(f"{what}: bad pattern in {list(patterns)!r}: {exc}") from exc


class Guard:
    """The rules for one workspace root, built once from the settings."""

    __slots__ = ("allow", "base", "gitignore", "secrets", "store")

    def __init__(self, base: Path, settings: Settings) -> None:
        """Raises ``ConfigError`` for an allow pattern pathspec cannot compile."""
        self.base = base
        # the session store's directory (a database store is never in Settings: the command
        # line leaves the default directory there, and Settings refuses a URL)
        self.store = Path(os.path.abspath(settings.store)).resolve()
        self.secrets = _spec(DEFAULT_SECRET_PATTERNS, "secret patterns")
        allow = settings.workspace_allow
        if isinstance(allow, str):
            raise ConfigError(
                f"workspace_allow must be a tuple of patterns, not the string {allow!r}"
            )
        self.allow = _spec(tuple(allow), "workspace_allow") if allow else None
        self.gitignore = settings.workspace_gitignore

    def scope(self) -> Scope:
        """A view for one tool call; it caches what it reads, so build one per call."""
        return Scope(self)


def _as_rel(parts: tuple[str, ...], is_dir: bool) -> str:
    return "/".join(parts) + ("/" if is_dir else "")


def is_store_file(name: str, head: bytes) -> bool:
    """Whether the file ``name`` starting with ``head`` is a stowage log or lease lock file."""
    first = head.split(b"\n", 1)[0]
    if name.endswith(".lock"):
        return first.startswith(_LOCK_PREFIX) and _LOCK_TOKEN in first
    return first.startswith(_LOG_PREFIX) and _LOG_SESSION in first


def _store_candidate(name: str) -> bool:
    # session logs are <id>.jsonl, their leases <id>.lock; a log being created is .<id>.<hex>.tmp
    return name.endswith((".jsonl", ".lock")) or (name.startswith(".") and name.endswith(".tmp"))


class Scope:
    """The rules applied within one tool call, with the reads they need cached."""

    __slots__ = ("_guard", "_holds_logs", "_specs")

    def __init__(self, guard: Guard) -> None:
        self._guard = guard
        self._specs: dict[tuple[str, ...], GitIgnoreSpec | None] = {}
        self._holds_logs: dict[Path, bool] = {}

    @property
    def base(self) -> Path:
        return self._guard.base

    # -- whole paths ------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The resolved path ``path`` names under the root, if every rule lets it be read."""
        base = self.base
        if os.path.isabs(path) or path.startswith("~"):
            raise ToolError(
                f"path {path!r} is absolute; give a path relative to the workspace root"
            )
        try:
            target = (base / path).resolve()
        except (OSError, RuntimeError) as exc:  # 3.11 raises RuntimeError for a symlink loop
            raise ToolError(f"path {path!r} cannot be resolved: {exc}") from None
        if not target.is_relative_to(base):
            raise ToolError(f"path {path!r} is outside the workspace; access refused")
        store = self._guard.store
        if base.is_relative_to(store):
            raise ToolError(
                f"path {path!r} is refused: the workspace root is inside the session store"
            )
        is_dir = target.is_dir()
        resolved = target.relative_to(base).parts
        reason = self.refusal(resolved, is_dir)
        lexical = Path(os.path.normpath(path)).parts
        if reason is None and lexical != resolved and lexical[:1] not in (("..",), (".",)):
            # the name as given (a symlink, say) must pass too
            reason = self.refusal(lexical, is_dir, on_disk=False)
        if reason is not None:
            raise ToolError(f"path {path!r} is refused: {reason.why}")
        return target

    def refusal(
        self, parts: tuple[str, ...], is_dir: bool, *, on_disk: bool = True
    ) -> Refusal | None:
        """Why the path ``parts`` (relative to the root) may not be read, or ``None``."""
        allowed = self._allowed(parts, is_dir)
        for depth in range(1, len(parts) + 1):
            last = depth == len(parts)
            reason = self.entry_refusal(
                parts[:depth],
                is_dir if last else True,
                on_disk=on_disk,
                # a file the settings allow may sit in an ignored or secret directory
                check_rules=not allowed,
            )
            if reason is not None:
                return reason
        return None

    # -- one entry, its parent already checked -------------------------------------------------

    def entry_refusal(
        self,
        parts: tuple[str, ...],
        is_dir: bool,
        *,
        on_disk: bool = True,
        check_rules: bool = True,
    ) -> Refusal | None:
        """Why the entry ``parts`` may not be read, its parents aside, or ``None``."""
        if not parts:
            return None
        if self._in_store(parts, is_dir, on_disk=on_disk):
            return STORE
        if not check_rules or self._allowed(parts, is_dir):
            return None
        # lowercased: on a case-insensitive file system ".ENV" is ".env"
        if self._guard.secrets.match_file(_as_rel(parts, is_dir).lower()):
            return SECRET
        if self._guard.gitignore and self._ignored(parts, is_dir):
            return IGNORED
        return None

    def _allowed(self, parts: tuple[str, ...], is_dir: bool) -> bool:
        allow = self._guard.allow
        return allow is not None and bool(parts) and allow.match_file(_as_rel(parts, is_dir))

    # -- the store ----------------------------------------------------------------------------

    def _in_store(self, parts: tuple[str, ...], is_dir: bool, *, on_disk: bool) -> bool:
        if parts[-1].casefold() == STORE_DIR_NAME:  # casefold: case-insensitive file systems
            return True
        if not on_disk:
            return False
        path = self.base.joinpath(*parts)
        store = self._guard.store
        # parents are checked first, so only the entry itself may be a symlink
        if path.is_relative_to(store) or (path.is_symlink() and _real(path).is_relative_to(store)):
            return True
        if is_dir:
            return self.holds_logs(path)
        return _store_candidate(parts[-1]) and self._is_store_file(path)

    def holds_logs(self, directory: Path) -> bool:
        """Whether ``directory`` (not the root) holds stowage logs or locks: another store."""
        if directory == self.base:
            return False  # a log at the root is refused, not the whole workspace
        known = self._holds_logs.get(directory)
        if known is None:
            known = False
            peeks = 0
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if not _store_candidate(entry.name) or not entry.is_file():
                            continue
                        if self._is_store_file(Path(entry.path)):
                            known = True
                            break
                        peeks += 1
                        if peeks >= _LOG_PEEKS_PER_DIR:
                            break
            except OSError:
                pass
            self._holds_logs[directory] = known
        return known

    @staticmethod
    def _is_store_file(path: Path) -> bool:
        try:
            with open(path, "rb") as file:
                return is_store_file(path.name, file.read(_LOG_PEEK_BYTES))
        except OSError:
            return False

    # -- .gitignore ---------------------------------------------------------------------------

    def _ignored(self, parts: tuple[str, ...], is_dir: bool) -> bool:
        """Whether the .gitignore files down to the entry's directory ignore it (git's rule)."""
        verdict: bool | None = None
        for depth in range(len(parts)):
            spec = self._spec_for(parts[:depth])
            if spec is None:
                continue
            include = spec.check_file(_as_rel(parts[depth:], is_dir)).include
            if include is not None:
                verdict = include
        return bool(verdict)

    def _spec_for(self, directory: tuple[str, ...]) -> GitIgnoreSpec | None:
        if directory in self._specs:
            return self._specs[directory]
        folder = self.base.joinpath(*directory)
        lines: list[str] = []
        if not directory:
            lines += _read_lines(folder / ".git" / "info" / "exclude")
        lines += _read_lines(folder / ".gitignore")
        spec = _compile_gitignore(lines) if lines else None
        self._specs[directory] = spec
        return spec


def _compile_gitignore(lines: list[str]) -> GitIgnoreSpec:
    try:
        return GitIgnoreSpec.from_lines(lines)
    except Exception:  # pathspec's own error types; git too skips a line it cannot parse
        return GitIgnoreSpec.from_lines([line for line in lines if _compiles(line)])


def _compiles(line: str) -> bool:
    try:
        GitIgnoreSpec.from_lines([line])
    except Exception:
        return False
    return True


def _real(path: Path) -> Path:
    """``path`` with its symlinks resolved, or ``path`` itself when they loop."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # 3.11 raises RuntimeError for a symlink loop
        return path


def _read_lines(path: Path) -> list[str]:
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_GITIGNORE_BYTES)
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()
