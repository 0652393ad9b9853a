"""Settings of a session or a runtime, validated once, with errors that name the bad value."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ._errors import ConfigError, InvalidSessionId

__all__ = [
    "DEFAULT_COMPACT_THRESHOLD",
    "DEFAULT_USER_BUDGET_CHARS",
    "Settings",
    "new_session_id",
    "validate_session_id",
]

DEFAULT_COMPACT_THRESHOLD = 8000
DEFAULT_USER_BUDGET_CHARS = 20_000
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def validate_session_id(session_id: str) -> str:
    """Return ``session_id`` if it is 1-128 letters, digits, ``-`` or ``_``.

    Raises ``InvalidSessionId`` otherwise: nothing else may reach a path or a query.
    """
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise InvalidSessionId(
            f"invalid session id {session_id!r}: use 1-128 letters, digits, '-' or '_'"
        )
    return session_id


def new_session_id() -> str:
    """A fresh random session id, safe as a file name."""
    return "s-" + secrets.token_hex(6)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything a session runs with. ``api_key`` never appears in ``repr`` or logs."""

    model: str = "scripted"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    wire_api: Literal["chat", "responses"] = "chat"
    store: Path = Path(".stowage")
    durability: Literal["fsync", "none"] = "fsync"
    system: str | None = None
    tools: Literal["workspace", "none"] = "workspace"
    workspace: Path = Path(".")
    compact_threshold: int | None = DEFAULT_COMPACT_THRESHOLD
    user_budget_chars: int = DEFAULT_USER_BUDGET_CHARS
    auto_compact: bool = True
    tool_timeout: float = 30.0
    max_rounds_per_turn: int = 50
    max_output_tokens: int | None = None
    request_timeout: float = 120.0
    max_retries: int = 2
    stream: bool = True

    def __post_init__(self) -> None:
        if self.wire_api not in ("chat", "responses"):
            raise ConfigError(f"wire_api must be 'chat' or 'responses', got {self.wire_api!r}")
        if self.durability not in ("fsync", "none"):
            raise ConfigError(f"durability must be 'fsync' or 'none', got {self.durability!r}")
        if self.tools not in ("workspace", "none"):
            raise ConfigError(f"tools must be 'workspace' or 'none', got {self.tools!r}")
        if self.compact_threshold is not None and self.compact_threshold <= 0:
            raise ConfigError(
                f"compact_threshold must be a positive token count, got {self.compact_threshold}"
            )
        if self.user_budget_chars < 0:
            raise ConfigError(f"user_budget_chars must be >= 0, got {self.user_budget_chars}")
        if self.tool_timeout <= 0:
            raise ConfigError(f"tool_timeout must be > 0 seconds, got {self.tool_timeout}")
        if self.max_rounds_per_turn < 1:
            raise ConfigError(f"max_rounds_per_turn must be >= 1, got {self.max_rounds_per_turn}")

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied and validated."""
        return replace(self, **changes)

    def public(self) -> dict[str, Any]:
        """The settings worth recording in a log: no secrets, paths as strings."""
        return {
            "model": self.model,
            "base_url": self.base_url,
            "wire_api": self.wire_api,
            "compact_threshold": self.compact_threshold,
            "user_budget_chars": self.user_budget_chars,
            "tools": self.tools,
            "auto_compact": self.auto_compact,
        }
