"""Settings of a session or a runtime: each declared once, validated once, with errors that name
the bad value.

``Settings`` is a frozen dataclass: every field carries its type, default, bounds and help,
and, where a person may set it, its command-line flag (``setting(..., cli="--flag")``) and
whether ``stowage.toml`` files and ``STOWAGE_<NAME>`` variables may (``config``) and a
``[models.NAME]`` profile may (``profile``). The command line's options, the configuration
model of files and variables and the README's table of settings are made from these
declarations (``stowage.cli``), so they cannot disagree. A bad value is a ``ConfigError`` that
names the setting and the value.

Every construction validates what it is given (``_declare``): values that already have their
field's type and keep its bounds (what a program passes, what a log's JSON gives back) are
taken as they are; anything else goes through pydantic, built from the same declarations,
which converts what it can (``"5"`` to 5) and names what it cannot. So the commands that only
read logs (``stowage list``, ``show``, ``context``) never import pydantic: it is half their
start.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from pathlib import Path, PurePath
from typing import Annotated, Any, Literal

from ._declare import PositiveInt, SettingInfo, declarations, setting, validating
from ._errors import ConfigError, InvalidSessionId
from ._redact import redact_command, redact_url

__all__ = [
    "DEFAULT_COMPACT_THRESHOLD", "DEFAULT_USER_BUDGET_CHARS", "IDENTITY_FIELDS", "REDACTED_FIELDS",
    "Settings", "SettingInfo", "new_session_id", "recordable", "setting_infos",
    "validate_session_id",
]  # fmt: skip

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


@validating
@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a session runs with. ``api_key`` never appears in ``repr`` or logs."""

    model: Annotated[
        str,
        setting(
            "a model name, or the name of a [models.NAME] profile in stowage.toml "
            "('scripted' is the offline model)",
            cli="--model",
            profile=True,
        ),
    ] = "scripted"
    #: the ``[models.NAME]`` profile of a configuration file the model came from, if any
    profile: Annotated[
        str | None, setting("a [models.NAME] profile of stowage.toml to run with", cli="--profile")
    ] = None
    #: the endpoint; it may carry credentials, so only ``redact_url(base_url)`` is ever recorded
    base_url: Annotated[
        str | None,
        setting(
            "the model endpoint (else OPENAI_BASE_URL, or ANTHROPIC_BASE_URL on the anthropic wire)",
            cli="--base-url",
            profile=True,
        ),
    ] = dataclasses.field(default=None, repr=False)
    api_key: Annotated[
        str | None,
        setting(
            "API key (else the profile's, STOWAGE_API_KEY or OPENAI_API_KEY, ANTHROPIC_API_KEY on "
            "the anthropic wire); never stored",
            cli="--api-key",
            profile=True,
        ),
    ] = dataclasses.field(default=None, repr=False)
    wire_api: Annotated[
        Literal["chat", "responses", "anthropic"],
        setting(
            "the endpoint's API: chat completions, responses, or anthropic (Claude's Messages)",
            cli="--wire-api",
            profile=True,
        ),
    ] = "chat"
    store: Annotated[
        Path, setting("the session store: a directory, sqlite:///FILE or postgresql://…")
    ] = Path(".stowage")
    durability: Annotated[
        Literal["fsync", "syncfs", "none"],
        setting(
            "fsync every batch before it is acknowledged; syncfs: the same, but a group commit "
            "of several JSONL logs with one sync of their filesystem (less CPU with many "
            "sessions; Linux 5.8+); none: leave it to the OS"
        ),
    ] = "fsync"
    archive_after: Annotated[
        float | None,
        setting(
            "seconds after a compaction that 'stowage archive' moves the records it covers to "
            "the archive table resume never reads (SQLite, PostgreSQL); unset: only with "
            "--older-than",
            gt=0,
        ),
    ] = None
    system: Annotated[
        str | None, setting("the system message of a new session", cli="--system")
    ] = None
    tools: Annotated[
        Literal["workspace", "none"],
        setting("read-only tools over the current directory, or none", cli="--tools"),
    ] = "workspace"
    workspace: Annotated[Path, setting("the directory the workspace tools read", config=False)] = (
        Path(".")
    )
    #: where the command line took the session's tools from, recorded (redacted) so that every
    #: command continuing the session builds the same ones; ``Runtime`` reads none of these
    #: three (pass ``tools=`` and ``mcp=``)
    tools_from: Annotated[
        str | None, setting("MODULE:NAME of the ToolRegistry --tools-from imported", config=False)
    ] = None
    mcp: Annotated[
        tuple[str, ...],
        setting("MCP server commands --mcp (or the configuration) started", config=False),
    ] = dataclasses.field(default=(), repr=False)
    mcp_url: Annotated[
        tuple[str, ...],
        setting("MCP server URLs --mcp-url (or the configuration) connected to", config=False),
    ] = dataclasses.field(default=(), repr=False)
    compact_threshold: Annotated[
        PositiveInt | None,
        setting(
            "a fixed threshold: compact when reported usage reaches N tokens; when given it "
            f"replaces the watermarks (without a window: {DEFAULT_COMPACT_THRESHOLD})",
            cli="--compact-threshold",
            metavar="N",
        ),
    ] = None
    context_window: Annotated[
        PositiveInt | None,
        setting(
            "model window in tokens (default: the profile, the registry, or the endpoint's answer)",
            cli="--context-window",
            metavar="N",
            profile=True,
        ),
    ] = None
    compact_model: Annotated[
        str | None,
        setting(
            "model for summaries (default: the session's model)",
            cli="--compact-model",
            profile=True,
        ),
    ] = None
    compaction: Annotated[
        Literal["local", "provider", "auto"],
        setting(
            "how a full compaction is made: local (a summary request, readable in the log), "
            "provider (the responses wire's /responses/compact: an opaque item), or auto "
            "(provider where the wire has it, local otherwise); local for the rest of the "
            "session once the endpoint fails it",
            cli="--compaction",
            profile=True,
        ),
    ] = "local"
    require_reported_usage: Annotated[
        bool,
        setting(
            "never compact on an estimate: without reported usage, no compaction",
            cli="--require-reported-usage",
            cli_value=True,
        ),
    ] = False
    soft_mark: Annotated[
        float,
        setting(
            "share of usable at which old tool outputs are microcompacted",
            cli="--soft-mark",
            gt=0,
            le=1,
        ),
    ] = 0.70
    compact_mark: Annotated[
        float,
        setting(
            "share of usable at which a summary is asked for in the background",
            cli="--compact-mark",
            gt=0,
            le=1,
        ),
    ] = 0.85
    hard_mark: Annotated[
        float,
        setting(
            "share of usable at which the next request waits until compacted",
            cli="--hard-mark",
            gt=0,
            le=1,
        ),
    ] = 0.95
    target_after: Annotated[
        float,
        setting(
            "the most a compaction may leave, as a share of usable, else it falls back",
            cli="--target-after",
            gt=0,
            le=1,
        ),
    ] = 0.50
    keep_rounds: Annotated[
        int,
        setting("tool rounds whose outputs are never microcompacted", cli="--keep-rounds", ge=0),
    ] = 3
    max_compactions_per_turn: Annotated[
        int,
        setting(
            "a safety cap on compactions in one turn (what stops a turn that keeps compacting "
            "is the loop rule of compaction_loop_repeats)",
            ge=1,
        ),
    ] = 8
    micro_min_free: Annotated[
        float,
        setting(
            "a compaction must free at least this share of usable to be worth its prompt-cache "
            "break: microcompaction stubs only in batches that free that much (and room for "
            "four rounds at the recent growth), once per crossing of the soft mark, and below "
            "the hard mark a compaction that would free less is not applied; 0: every round",
            cli="--micro-min-free",
            ge=0,
            lt=1,
        ),
    ] = 0.20
    reattach_share: Annotated[
        float,
        setting(
            "share of usable that the outputs the current turn read most recently may take "
            "when re-attached after a compaction",
            cli="--reattach-share",
            ge=0,
            lt=1,
        ),
    ] = 0.20
    prompt_cache_key: Annotated[
        str | None,
        setting(
            "prompt_cache_key sent with each request: 'session' derives one from the session "
            "id, '' sends none, anything else is sent as is",
            cli="--prompt-cache-key",
            metavar="KEY",
        ),
    ] = "session"
    tool_output_cap: Annotated[
        float,
        setting(
            "a tool output above this share of usable (and at least 16,000 characters, or half "
            "of usable on a window too small for that) is shown by its artifact reference "
            "(with its head and tail from 16,000 characters); 0: no cap",
            ge=0,
            le=1,
        ),
    ] = 0.25
    compact_prompt_file: Annotated[
        Path | None,
        setting(
            "a file whose text replaces the built-in instructions of the summary request",
            cli="--compact-prompt-file",
            metavar="PATH",
        ),
    ] = None
    background_compaction: Annotated[
        bool,
        setting(
            "plan compactions while rounds go on, or wait for each plan at the compaction mark"
        ),
    ] = True
    breaker_failures: Annotated[
        int,
        setting(
            "summary failures in a row before the no-model fallback takes over", ge=1, config=False
        ),
    ] = 3
    user_budget_chars: Annotated[
        int, setting("characters of recent user messages kept verbatim by a compaction", ge=0)
    ] = DEFAULT_USER_BUDGET_CHARS
    auto_compact: Annotated[
        bool, setting("compact on its own", cli="--no-auto-compact", cli_value=False)
    ] = True
    tool_timeout: Annotated[float, setting("seconds one tool call may take", gt=0)] = 30.0
    max_rounds_per_turn: Annotated[int, setting("rounds one turn may take", ge=1)] = 50
    max_output_tokens: Annotated[
        PositiveInt | None,
        setting(
            "output cap per request, reserved from the window (default: the registry, at most "
            "a quarter of the window)",
            cli="--max-output-tokens",
            metavar="N",
            profile=True,
        ),
    ] = None
    request_timeout: Annotated[
        float, setting("seconds to connect and to wait for a byte", gt=0)
    ] = 120.0
    stream_idle_timeout: Annotated[
        float,
        setting(
            "seconds a streamed response may go without an event before it is abandoned and "
            "retried",
            gt=0,
        ),
    ] = 60.0
    request_deadline: Annotated[
        float, setting("seconds one model request may take in all, streamed or not", gt=0)
    ] = 600.0
    max_retries: Annotated[int, setting("retries of a failed model call", ge=0)] = 2
    max_retry_wait: Annotated[
        float, setting("the most seconds one retry waits, whatever the server asks for", gt=0)
    ] = 60.0
    compaction_loop_repeats: Annotated[
        int,
        setting(
            "compactions in one turn, each followed by re-issuing calls whose outputs it "
            "absorbed with no new distinct call between, before the turn stops as a loop",
            ge=1,
        ),
    ] = 3
    compact_every_turns: Annotated[
        int,
        setting(
            "a full compaction once this many turns finished since the last one, whatever the "
            "watermarks say; 0: never on its own",
            ge=0,
        ),
    ] = 0
    milestone_tool: Annotated[
        bool,
        setting(
            "give the model a mark_milestone tool: a phase it says ended is recorded like "
            "stowage milestone"
        ),
    ] = False
    search_history_tool: Annotated[
        bool,
        setting(
            "offer search_history with recall_artifact: the model finds records of the whole "
            "log, compacted or not, by their words"
        ),
    ] = False
    files_touched: Annotated[
        bool,
        setting(
            "keep a trail of the files the tool calls read, wrote or edited and the commands "
            "they ran in the protected state, carried verbatim through every compaction",
            cli="--no-files-touched",
            cli_value=False,
        ),
    ] = True
    check_summaries: Annotated[
        bool,
        setting(
            "check each summary against the user's instructions and corrections it absorbs; "
            "ask once more naming what it missed, then append what it still misses",
            cli="--no-check-summaries",
            cli_value=False,
        ),
    ] = True
    reground_every: Annotated[
        int,
        setting(
            "every Nth full compaction makes its summary from the log's original records since "
            "the last such one, not from the summary before it; 0: never on its own",
            ge=0,
        ),
    ] = 0
    max_answer_chars: Annotated[
        int,
        setting(
            "the most characters of one answer (text plus call arguments); a response past it "
            "is not read further and is refused, then retried",
            cli="--max-answer-chars",
            metavar="N",
            gt=0,
        ),
    ] = 1_000_000
    parallel_tool_calls: Annotated[
        bool | None,
        setting(
            "whether the model may make several tool calls a round (default: what the registry "
            "or the endpoint says; unknown: nothing is sent)",
            cli="--no-parallel-tool-calls",
            cli_value=False,
            profile=True,
        ),
    ] = None
    max_tools: Annotated[
        PositiveInt | None,
        setting(
            "the most tools one request may carry (default: the registry's, or the endpoint's)",
            profile=True,
        ),
    ] = None
    http_client: Annotated[
        Literal["aiohttp", "sdk"] | None,
        setting(
            "how model calls are sent: aiohttp, or the openai SDK's public API (default: the "
            "STOWAGE_HTTP_CLIENT variable, else aiohttp)"
        ),
    ] = None
    stream: Annotated[
        bool, setting("ask for streamed responses", cli="--no-stream", cli_value=False)
    ] = True
    read_max_bytes: Annotated[
        int,
        setting(
            "workspace tools: the most bytes one read_file call returns (fewer when the "
            "session's window takes fewer: ToolContext.output)",
            gt=0,
        ),
    ] = 256 * 1024
    search_max_matches: Annotated[
        int, setting("workspace tools: the most matching lines one search_text call returns", gt=0)
    ] = 200
    search_max_file_bytes: Annotated[
        int, setting("workspace tools: search_text skips files larger than this many bytes", gt=0)
    ] = 1024 * 1024
    workspace_gitignore: Annotated[
        bool, setting("workspace tools: hide and refuse paths the .gitignore files ignore")
    ] = True
    workspace_allow: Annotated[
        tuple[str, ...],
        setting(
            "workspace tools: gitignore-style patterns readable even if ignored or "
            "secret-looking (never the session store)"
        ),
    ] = ()
    sandbox: Annotated[
        Literal["read-only", "workspace-write", "full"],
        setting(
            "what the workspace tools may change: read-only (nothing: no tool writes, edits or "
            "runs a command), workspace-write (write_file, edit_file and run_command, confined "
            "to the workspace; commands in a bubblewrap sandbox without network), or full "
            "(commands unconfined: only when you trust what runs)",
            cli="--sandbox",
        ),
    ] = "read-only"
    approval: Annotated[
        Literal["untrusted", "on-request", "never"],
        setting(
            "when a call that acts waits for your word: untrusted (every write, edit and "
            "command), on-request (only what the sandbox cannot confine), never (nothing "
            "waits; what the sandbox refuses is refused)",
            cli="--approval",
        ),
    ] = "on-request"
    tool_allow: Annotated[
        tuple[str, ...],
        setting(
            "rules TOOL:PATTERN (shell-style) of calls that run without asking, e.g. "
            "'run_command:pytest *' or 'write_file:docs/*'; the sandbox still confines them",
            cli="--allow",
            metavar="TOOL:PATTERN",
        ),
    ] = ()
    tool_deny: Annotated[
        tuple[str, ...],
        setting(
            "rules TOOL:PATTERN of calls refused whatever else says (TOOL may be *), e.g. "
            "'*:.git/*' or 'run_command:rm *'",
            cli="--deny",
            metavar="TOOL:PATTERN",
        ),
    ] = ("*:.git/*",)
    sandbox_network: Annotated[
        bool,
        setting(
            "let commands under workspace-write reach the network",
            cli="--sandbox-network",
            cli_value=True,
        ),
    ] = False
    command_env: Annotated[
        tuple[str, ...],
        setting(
            "environment variables a command sees (the rest of the environment, API keys "
            "among it, never reaches it)"
        ),
    ] = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "PYTHONPATH", "VIRTUAL_ENV")

    def __post_init__(self) -> None:
        if (url := _URL_SCHEME.match(str(self.store))) is not None:
            # a URL made a Path ("postgresql:/user:password@host/db") would silently become a
            # JSONL directory named after it, password and all
            raise ConfigError(
                f"store {url.group(1)}://... is a database URL, but Settings.store names a JSONL "
                "directory: open the database with stowage.storage.open_store(url) and pass it "
                "as Runtime(store=...) (the command line's --store and STOWAGE_STORE take URLs)"
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
        for rule in (*self.tool_allow, *self.tool_deny):
            parse_rule(rule)
        if self.compaction == "provider" and self.wire_api != "responses":
            raise ConfigError(
                "compaction 'provider' needs wire_api 'responses': the chat wire cannot carry "
                "the provider's compaction item (use 'auto' to compact locally there)"
            )

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied and validated."""
        return dataclasses.replace(self, **changes)

    def public(self) -> dict[str, Any]:
        """The settings worth recording in a log: every identity field (credentials
        redacted, paths as strings), with the timeouts and caps a reader of the log may want
        to see; never a secret."""
        recorded = {name: recordable(name, getattr(self, name)) for name in IDENTITY_FIELDS}
        # the marks as one list too, as logs written before the identity fields had them
        recorded["watermarks"] = [
            self.soft_mark,
            self.compact_mark,
            self.hard_mark,
            self.target_after,
        ]
        for name in (
            "stream_idle_timeout",
            "request_deadline",
            "max_retry_wait",
            "max_answer_chars",
        ):
            recorded[name] = getattr(self, name)
        return recorded


def parse_rule(text: str) -> tuple[str, str]:
    """A tool rule ``TOOL:PATTERN`` as (tool, pattern); a rule without a colon applies to
    every tool.

    Raises ``ConfigError`` naming the rule when the tool or the pattern is empty."""
    tool, sep, pattern = text.partition(":")
    if not sep:
        tool, pattern = "*", text
    if not pattern.strip() or not tool.strip():
        raise ConfigError(
            f"tool rule {text!r}: write TOOL:PATTERN, e.g. 'run_command:pytest *' or "
            "'*:.git/*' (shell-style patterns over the path or the command line)"
        )
    return tool.strip(), pattern.strip()


#: "scheme:/" at the start of a store path: a URL such as sqlite:///x.db, made a Path
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")


def setting_infos() -> tuple[SettingInfo, ...]:
    """Every setting's declaration, in declaration order."""
    return declarations(Settings).infos


#: the ``Settings`` fields a session keeps for life unless explicitly overridden
IDENTITY_FIELDS: tuple[str, ...] = (
    "model",
    "profile",
    "base_url",
    "wire_api",
    "context_window",
    "max_output_tokens",
    "compact_threshold",
    "compact_model",
    "require_reported_usage",
    "soft_mark",
    "compact_mark",
    "hard_mark",
    "target_after",
    "keep_rounds",
    "max_compactions_per_turn",
    "background_compaction",
    "auto_compact",
    "user_budget_chars",
    "tools",
    "system",
    "tools_from",
    "mcp",
    "mcp_url",
    # what the model takes, as the options, the registry or the endpoint said at creation
    "parallel_tool_calls",
    "max_tools",
    # how it compacts, whatever the mode: kept from creation, restored on every resume
    "compaction",
    "micro_min_free",
    "reattach_share",
    "tool_output_cap",
    "compaction_loop_repeats",
    "compact_every_turns",
    "reground_every",
    "milestone_tool",
    "search_history_tool",
    "files_touched",
    "check_summaries",
    "compact_prompt_file",
    "breaker_failures",
    # what its tools may change, the user's word: kept with the session, shown in `context`
    "sandbox",
    "approval",
    "tool_allow",
    "tool_deny",
    "sandbox_network",
    "command_env",
)


#: the identity fields whose values may hold credentials, recorded redacted
REDACTED_FIELDS = ("base_url", "mcp", "mcp_url")


def recordable(name: str, value: Any) -> Any:
    """``value`` of identity field ``name`` as it is recorded."""
    if name == "base_url":
        return redact_url(value)
    if name == "mcp":
        return [redact_command(command) for command in value or ()]
    if name == "mcp_url":
        return [redact_url(url) for url in value or ()]
    if isinstance(value, PurePath):
        return str(value)
    return list(value) if isinstance(value, tuple) else value
