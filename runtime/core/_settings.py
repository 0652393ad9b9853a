"""Settings of a session or a runtime, validated once, with errors that name the bad value."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ._errors import ConfigError, InvalidSessionId
from ._redact import redact_url

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
    #: the ``[models.NAME]`` profile of a configuration file the model came from, if any
    profile: str | None = None
    #: the endpoint; it may carry credentials, so only ``redact_url(base_url)`` is ever recorded
    base_url: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    wire_api: Literal["chat", "responses"] = "chat"
    store: Path = Path(".stowage")
    durability: Literal["fsync", "none"] = "fsync"
    system: str | None = None
    tools: Literal["workspace", "none"] = "workspace"
    workspace: Path = Path(".")
    #: a fixed threshold (the seed's rule) that, when set, takes precedence over the watermarks
    compact_threshold: int | None = None
    #: window of the model; None looks it up in ``runtime._budget.MODEL_REGISTRY``
    context_window: int | None = None
    #: model for summaries (a cheaper one, say); None uses ``model``
    compact_model: str | None = None
    #: the seed's conservative rule: no reported usage, no compaction (no estimates)
    require_reported_usage: bool = False
    #: watermarks, as fractions of the usable budget (see README, "Compaction policy")
    soft_mark: float = 0.70
    compact_mark: float = 0.85
    hard_mark: float = 0.95
    target_after: float = 0.50
    #: tool outputs of the newest ``keep_rounds`` rounds are never microcompacted
    keep_rounds: int = 3
    #: a safety cap on compactions in one turn; what stops a turn that keeps compacting is
    #: the loop rule of ``compaction_loop_repeats``
    max_compactions_per_turn: int = 8
    #: a compaction must free at least this share of the usable budget to be worth its
    #: prompt-cache break: microcompaction acts in batches that free this much (or nothing),
    #: then leaves the prefix alone until the soft mark is crossed again; and below the hard
    #: mark a compaction that would free less is not applied
    micro_min_free: float = 0.20
    #: the share of the usable budget that the outputs the current turn read most recently
    #: may take when they are re-attached after a compaction, so the model need not read them
    #: again
    reattach_share: float = 0.20
    #: ``prompt_cache_key`` sent with every request: "session" derives it from the session
    #: id, "" (or None) sends none, anything else is sent as is
    prompt_cache_key: str | None = "session"
    #: a tool output above this share of the usable budget (and at least 16,000 characters)
    #: is shown to the model as its head and tail with its artifact reference as soon as it
    #: comes back (the log keeps it whole; ``recall_artifact`` pages through it); 0: no cap
    tool_output_cap: float = 0.25
    #: a file whose text replaces the built-in instructions of the summary request
    compact_prompt_file: Path | None = None
    #: skip a manual compaction, too, whose summary is no smaller than what it replaces
    #: (an automatic one always is); ``stowage compact`` sets it
    compact_only_if_smaller: bool = False
    #: plan compactions while rounds go on (True), or wait for each plan at the compaction mark
    background_compaction: bool = True
    #: summary failures in a row before the breaker opens and the no-model fallback takes over
    breaker_failures: int = 3
    user_budget_chars: int = DEFAULT_USER_BUDGET_CHARS
    auto_compact: bool = True
    tool_timeout: float = 30.0
    max_rounds_per_turn: int = 50
    max_output_tokens: int | None = None
    request_timeout: float = 120.0
    #: seconds a streamed response may go without an event (SSE comments and keep-alives do
    #: not count) before it is abandoned as a transient failure and retried
    stream_idle_timeout: float = 60.0
    #: seconds one model request may take in all, streamed or not, before it is abandoned
    request_deadline: float = 600.0
    max_retries: int = 2
    #: the most seconds one retry waits, whatever the server asks for (Retry-After and kin)
    max_retry_wait: float = 60.0
    #: compactions in one turn, each followed by re-issuing calls (same name and arguments)
    #: whose outputs it absorbed with no new distinct call in between, before the turn stops
    #: as a loop (``CompactionLoop``)
    compaction_loop_repeats: int = 3
    #: the most characters of one answer (assistant text plus call arguments) accepted; a
    #: response past it is not read further and fails as ``ResponseTooLarge`` (retried)
    max_answer_chars: int = 1_000_000
    stream: bool = True
    #: workspace tools: the most bytes one read_file call returns (it never reads more)
    read_max_bytes: int = 256 * 1024
    #: workspace tools: the most matching lines one search_text call returns
    search_max_matches: int = 200
    #: workspace tools: search_text skips files larger than this many bytes
    search_max_file_bytes: int = 1024 * 1024
    #: workspace tools: hide and refuse paths the workspace's .gitignore files ignore
    workspace_gitignore: bool = True
    #: workspace tools: gitignore-style patterns readable even if ignored or secret-looking
    #: (never the session store)
    workspace_allow: tuple[str, ...] = ()

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
        if not 0 < self.soft_mark <= self.compact_mark <= self.hard_mark <= 1:
            raise ConfigError(
                "watermarks must satisfy 0 < soft_mark <= compact_mark <= hard_mark <= 1, got "
                f"{self.soft_mark}, {self.compact_mark}, {self.hard_mark}"
            )
        if not 0 < self.target_after < self.compact_mark:
            raise ConfigError(
                f"target_after must be > 0 and below compact_mark, got {self.target_after}"
            )
        if self.context_window is not None and self.context_window <= 0:
            raise ConfigError(
                f"context_window must be a positive token count, got {self.context_window}"
            )
        if self.max_output_tokens is not None and self.max_output_tokens <= 0:
            raise ConfigError(
                f"max_output_tokens must be a positive token count, got {self.max_output_tokens}"
            )
        if self.keep_rounds < 0:
            raise ConfigError(f"keep_rounds must be >= 0, got {self.keep_rounds}")
        if not 0 <= self.tool_output_cap <= 1:
            raise ConfigError(
                f"tool_output_cap must be a share of the usable budget in [0, 1], "
                f"got {self.tool_output_cap}"
            )
        if not 0 <= self.micro_min_free < 1:
            raise ConfigError(
                f"micro_min_free must be a share of the usable budget in [0, 1), "
                f"got {self.micro_min_free}"
            )
        if not 0 <= self.reattach_share < 1:
            raise ConfigError(
                f"reattach_share must be a share of the usable budget in [0, 1), "
                f"got {self.reattach_share}"
            )
        if self.max_compactions_per_turn < 1 or self.breaker_failures < 1:
            raise ConfigError(
                "max_compactions_per_turn and breaker_failures must be >= 1, got "
                f"{self.max_compactions_per_turn} and {self.breaker_failures}"
            )
        if self.user_budget_chars < 0:
            raise ConfigError(f"user_budget_chars must be >= 0, got {self.user_budget_chars}")
        if self.tool_timeout <= 0:
            raise ConfigError(f"tool_timeout must be > 0 seconds, got {self.tool_timeout}")
        if self.max_rounds_per_turn < 1:
            raise ConfigError(f"max_rounds_per_turn must be >= 1, got {self.max_rounds_per_turn}")
        for name in ("stream_idle_timeout", "request_deadline", "max_retry_wait"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.compaction_loop_repeats < 1:
            raise ConfigError(
                f"compaction_loop_repeats must be >= 1, got {self.compaction_loop_repeats}"
            )
        if self.max_answer_chars <= 0:
            raise ConfigError(
                f"max_answer_chars must be a positive number of characters, "
                f"got {self.max_answer_chars}"
            )

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied and validated."""
        return replace(self, **changes)

    def public(self) -> dict[str, Any]:
        """The settings worth recording in a log: no secrets, paths as strings."""
        return {
            "model": self.model,
            "base_url": redact_url(self.base_url),
            "wire_api": self.wire_api,
            "compact_threshold": self.compact_threshold,
            "context_window": self.context_window,
            "max_output_tokens": self.max_output_tokens,
            "compact_model": self.compact_model,
            "require_reported_usage": self.require_reported_usage,
            "watermarks": [self.soft_mark, self.compact_mark, self.hard_mark, self.target_after],
            "keep_rounds": self.keep_rounds,
            "user_budget_chars": self.user_budget_chars,
            "tools": self.tools,
            "auto_compact": self.auto_compact,
            "stream_idle_timeout": self.stream_idle_timeout,
            "request_deadline": self.request_deadline,
            "max_retry_wait": self.max_retry_wait,
            "compaction_loop_repeats": self.compaction_loop_repeats,
            "max_answer_chars": self.max_answer_chars,
            # the rest of the session's identity (see ``core._identity``), one field per name
            "soft_mark": self.soft_mark,
            "compact_mark": self.compact_mark,
            "hard_mark": self.hard_mark,
            "target_after": self.target_after,
            "max_compactions_per_turn": self.max_compactions_per_turn,
            "background_compaction": self.background_compaction,
            "system": self.system,
            "profile": self.profile,
        }
