"""The options a session runs with, shared by ``run``/``resume``/``compact`` and ``worker``: one
parser section and one way to turn it into ``Settings``, tools (``--tools-from``, ``--mcp``,
``--mcp-url``) and tracing, so they cannot drift apart.

Every option defaults to None, so that an option the user typed can be told from one left
out: only typed options override a continued session's identity (see ``_config`` for the
whole precedence). Where the tools come from (``--tools-from``, ``--mcp``, ``--mcp-url``) is
part of that identity: a command that continues a session (``resume``, ``chat ID``,
``approve``, ``deny``, ``compact``, ``milestone``, ``protect``) builds the tools its session
recorded (``runtime_as_the_session``), so an approved call finds the tool it was asked of.

MCP servers (``--mcp COMMAND``, ``--mcp-url URL``) are repeatable, in the order given; the ``mcp`` extra is needed only when one is used, and its
absence is a one-line usage error (exit 2) naming the extra.

Tracing (``STOWAGE_OTEL=1``, or ``otel = true`` in ``stowage.toml``): spans go to the global tracer provider, which the command does not set up: run it under
``opentelemetry-instrument`` (opentelemetry-distro, configured by the standard ``OTEL_*``
variables) or any ``sitecustomize`` that installs an SDK provider. Without one the spans cost
nothing and go nowhere; without the ``otel`` extra the switch is a usage error naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stowage.core import (
    IDENTITY_FIELDS,
    REDACTED,
    ConfigError,
    Event,
    LogRepaired,
    LogStore,
    SessionIdentity,
    Settings,
    SettingsChanged,
    ToolSpec,
    continue_settings,
    setting_infos,
)
from stowage.facade import Runtime, session_identity
from stowage.policy import resolve_budget
from stowage.tools import MCPServer, MCPToolSource, ToolRegistry, mcp_server

from ._config import ConfigBase, ConfigLayers, StowageConfig, load_config, load_layers
from ._exits import use_wire
from ._setting_options import add_setting_options, typed_settings

__all__ = [
    "SessionSetup",
    "add_mcp_options",
    "add_model_options",
    "as_the_session",
    "continued_settings",
    "mcp_servers_from",
    "mcp_servers_of",
    "refuse_oversized",
    "repair_notice",
    "runtime_as_the_session",
    "say_opening",
    "session_tools",
    "settings_from_options",
    "settings_notice",
    "tools_from_spec",
    "trace_if_configured",
    "typed_overrides",
]

# config keys that are Settings fields of the same name; ``store`` is the command's,
# ``api_key`` is read apart (never recorded) and ``profile`` selects a [models.NAME] table
_CONFIG_FIELDS = tuple(
    name
    for name in StowageConfig.model_fields
    if name in {f.name for f in dataclasses.fields(Settings)}
    and name not in ("store", "api_key", "profile", "mcp", "mcp_url")
)
# what a profile sets besides its model id (and its key, read apart: never recorded)
_PROFILE_FIELDS = tuple(
    i.name for i in setting_infos() if i.profile and i.name not in ("model", "api_key")
)


def add_model_options(parser: argparse.ArgumentParser, *, system_help: str) -> None:
    """The model, endpoint, policy and tool options of a session: one per setting that
    declares a flag (``_setting_options``), and ``--tools-from``."""
    add_setting_options(parser, help_overrides={"system": system_help})
    parser.add_argument(
        "--tools-from",
        default=None,
        metavar="MODULE:NAME",
        help="your own tools: a ToolRegistry (or a function returning one) importable as MODULE:NAME",
    )


def _typed(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the user typed, by config key (the API key is read apart: never recorded)."""
    typed = typed_settings(args)
    typed.pop("api_key", None)
    if typed.get("model") == "scripted" and typed.get("base_url"):
        raise ConfigError(
            "--model scripted is the offline model and sends nothing: it takes no --base-url "
            "(name the endpoint's model with --model, or leave out --base-url)"
        )
    return typed


def _typed_tool_sources(args: argparse.Namespace) -> dict[str, Any]:
    """Where the user said the tools come from, by ``Settings`` field: ``--tools-from``, and
    ``--mcp``/``--mcp-url`` (either typed replaces both lists)."""
    typed: dict[str, Any] = {}
    spec: str | None = getattr(args, "tools_from", None)
    if spec:
        typed["tools_from"] = spec
    commands: list[str] = getattr(args, "mcp", None) or []
    urls: list[str] = getattr(args, "mcp_url", None) or []
    if commands or urls:
        typed["mcp"], typed["mcp_url"] = tuple(commands), tuple(urls)
    return typed


def _profile_name(config: ConfigBase) -> str | None:
    """The profile the options or configuration select: ``--profile``, else ``--model`` when it
    names one, else ``profile``/``model`` of the configuration when it names one."""
    profile: str | None = getattr(config, "profile", None)
    if profile is not None:
        if profile not in config.models:
            raise ConfigError(f"profile {profile!r}: no [models.{profile}] table in stowage.toml")
        return profile
    model: str | None = getattr(config, "model", None)
    if model is not None and model in config.models:
        return model
    return None


def _profile_values(config: ConfigBase, name: str | None) -> dict[str, Any]:
    """The Settings fields profile ``name`` sets (its model id and name included), or {}."""
    found = config.profile_named(name)
    if found is None:
        return {}
    model, profile = found
    values: dict[str, Any] = {"model": model, "profile": name}
    values.update(
        {k: getattr(profile, k) for k in _PROFILE_FIELDS if getattr(profile, k) is not None}
    )
    return values


def _config_values(layers: ConfigLayers, profile: str | None) -> dict[str, Any]:
    """The Settings fields the configuration gives, in its precedence: the files, then the
    profile ``profile``, then the ``STOWAGE_*`` variables (a variable that only selects the
    profile does not set the model id over the profile's)."""
    config = layers.config
    values: dict[str, Any] = {
        k: getattr(config, k)
        for k in _CONFIG_FIELDS
        if k in layers.from_files and getattr(config, k) is not None
    }
    values.update(_profile_values(config, profile))
    for k in _CONFIG_FIELDS:
        if k not in layers.from_env or getattr(config, k) is None:
            continue
        if k == "model" and profile is not None and getattr(config, k) == profile:
            continue  # STOWAGE_MODEL=NAME selected the profile
        values[k] = getattr(config, k)
    return values


def typed_overrides(args: argparse.Namespace, *, below: tuple[str, ...] = ()) -> dict[str, Any]:
    """The identity fields the user typed, a typed profile (``--profile NAME``, or ``--model NAME``
    naming one) expanded into the fields it sets; typed fields win over it. Raises ``ConfigError``
    for a bad configuration or an unknown ``--profile``."""
    typed = _typed(args)
    typed.pop("stream", None)
    typed.update(_typed_tool_sources(args))
    if not typed:
        return {}
    layers = load_layers()
    config = layers.config
    overrides: dict[str, Any] = {}
    name = typed.get("profile") or typed.get("model")
    if "profile" in typed and name not in config.models:
        raise ConfigError(f"--profile {name}: no [models.{name}] table in stowage.toml")
    if name in config.models:
        profile = _profile_values(config, name)
        if "env" in below:
            profile = {
                k: v
                for k, v in profile.items()
                if k in ("model", "profile") or k not in layers.from_env
            }
        overrides.update(profile)
        typed.pop("model", None)
    elif "model" in typed:
        overrides["profile"] = None  # a plain model id leaves any profile behind
    typed.pop("profile", None)
    overrides.update(typed)
    return overrides


def settings_from_options(
    args: argparse.Namespace,
    *,
    continuing_profile: str | None = None,
    typed: bool = True,
    **extra: Any,
) -> Settings:
    """Settings of a new session: typed options over ``STOWAGE_*`` over the project's and the user's
    ``stowage.toml`` over the defaults (plus ``extra`` fields). Raises ``ConfigError`` for bad
    values, naming the file or option."""
    options = typed_overrides(args, below=("env",)) if typed else {}
    layers = load_layers()
    config = layers.config
    name = continuing_profile if not typed and continuing_profile else _profile_name(config)
    values = _config_values(layers, name)
    if hasattr(args, "mcp") and "mcp" not in options:
        # a command that starts MCP servers: the configuration's, when none is typed
        values["mcp"], values["mcp_url"] = tuple(config.mcp or ()), tuple(config.mcp_url or ())
    values.update(options)
    if getattr(args, "stream", None) is False:
        values["stream"] = False
    anthropic = values.get("wire_api") == "anthropic"
    if values.get("base_url") is None:
        values["base_url"] = os.environ.get(
            "ANTHROPIC_BASE_URL" if anthropic else "OPENAI_BASE_URL"
        )
    values["api_key"] = _api_key(args, config, values.get("profile"), anthropic=anthropic)
    settings = Settings(workspace=Path.cwd(), **{**values, **extra})
    use_wire(settings.wire_api)  # an endpoint's errors name this wire's key variable
    return settings


def _api_key(
    args: argparse.Namespace, config: ConfigBase, profile: str | None, *, anthropic: bool = False
) -> str | None:
    """--api-key, else the profile's key, else STOWAGE_API_KEY or a file's, else
    OPENAI_API_KEY (ANTHROPIC_API_KEY on the anthropic wire)."""
    typed: str | None = getattr(args, "api_key", None)
    if typed:
        return typed
    found = config.profile_named(profile)
    if found is not None and found[1].api_key is not None:
        return found[1].api_key.get_secret_value()
    if config.api_key is not None:
        return config.api_key.get_secret_value()
    return os.environ.get("ANTHROPIC_API_KEY" if anthropic else "OPENAI_API_KEY")


async def continued_settings(
    args: argparse.Namespace, log_store: LogStore, session_id: str, /, **extra: Any
) -> tuple[Settings, dict[str, Any], SessionIdentity]:
    """What session ``session_id`` continues with: its recorded identity over the configuration, the
    typed options over both; with the typed overrides (for the runtime to record) and the identity.
    Raises what ``session_identity`` raises and ``ConfigError``."""
    identity = await session_identity(log_store, session_id)
    overrides = typed_overrides(args)
    if "system" in overrides and overrides["system"] != identity.fields.get("system"):
        raise ConfigError(
            f"--system applies to a new session; session {session_id} keeps the system "
            "message it was created with"
        )
    overrides.pop("system", None)
    # typed options that are not part of a session's identity (``micro_min_free``,
    # ``reattach_share``, ``max_answer_chars``) apply to this run and are not recorded
    local = {name: overrides.pop(name) for name in list(overrides) if name not in IDENTITY_FIELDS}
    profile = overrides.get("profile", identity.fields.get("profile"))
    # the configuration gives what is not identity, and the secrets of the session's endpoint
    base = settings_from_options(
        args, continuing_profile=profile, typed=False, **{**extra, **local}
    )
    settings, _ = continue_settings(base, identity, overrides)
    use_wire(settings.wire_api)  # the session's wire, which may not be the configuration's
    return settings, overrides, identity


def settings_notice(event: SettingsChanged) -> str:
    """The one stderr line that says a continued session runs with changed settings."""
    shown = "; ".join(f"{k} {v[0]!r} -> {v[-1]!r}" for k, v in event.changes.items())
    why = "by options" if event.source == "user" else f"({event.source})"
    return f"[{event.session_id}: settings changed {why}: {shown}; recorded in its log]"


#: characters per token of the estimate before an endpoint has reported any usage
_CHARS_PER_TOKEN = 4


def refuse_oversized(text: str, settings: Settings, specs: Sequence[ToolSpec]) -> None:
    """Refuse a message that cannot fit the window by itself, before it is sent or logged. Raises
    ``ConfigError`` with the figures: the message's estimated tokens, the window and what of it
    history may use."""
    try:
        budget = resolve_budget(settings, specs)
    except ConfigError:
        return  # a window too small at all is refused, with its own figures, where it opens
    if budget is None:
        return
    tokens = math.ceil(len(text) / _CHARS_PER_TOKEN)
    if tokens <= budget.usable:
        return
    raise ConfigError(
        f"the message is ~{tokens:,} tokens ({len(text):,} characters) and cannot fit: the "
        f"context window is {budget.context_window:,} tokens, {budget.usable:,} usable for "
        f"history after the output reserve ({budget.output_reserve:,}) and the tool schemas "
        f"({budget.tool_tokens:,}); nothing was sent or logged: shorten it or send it in parts "
        "(or put it in a file the workspace tools read)"
    )


def say_opening(event: Event) -> None:
    """An override typed now, and a torn last line cut on open: one line each on stderr."""
    if isinstance(event, SettingsChanged):
        print(settings_notice(event), file=sys.stderr)
    elif isinstance(event, LogRepaired):
        print(repair_notice(event), file=sys.stderr)


def repair_notice(event: LogRepaired) -> str:
    """The one stderr line that says a torn last line was cut when the session was opened
    (the store's own log line for it is left out: the command says it, once)."""
    return (
        f"[log repaired: cut a torn last line ({event.bytes_removed} bytes) at "
        f"{event.path}:{event.line}]"
    )


def tools_from_spec(spec: str, *, recorded_by: str | None = None) -> ToolRegistry:
    """Import ``MODULE:NAME``: a ``ToolRegistry`` or a function returning one (the current directory
    importable, as with ``python -m``). Raises ``ConfigError`` naming the spec when it cannot be
    imported or is not a registry."""
    said = (
        f"session {recorded_by} takes its tools from {spec!r} (recorded when it started), but"
        if recorded_by is not None
        else f"--tools-from {spec!r}:"
    )
    fix = (
        "; run the command where that module imports, or name the tools with --tools-from"
        if recorded_by is not None
        else ""
    )
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{said} expected MODULE:NAME, e.g. mytools:registry")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like "python -m": the user's own modules import
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{said} cannot import it: {exc}{fix}") from exc
    registry = target() if callable(target) and not isinstance(target, ToolRegistry) else target
    if not isinstance(registry, ToolRegistry):
        raise ConfigError(f"{said} expected a ToolRegistry, got {type(registry).__name__}{fix}")
    return registry


def session_tools(
    settings: Settings, *, recorded_by: str | None = None
) -> tuple[ToolRegistry | None, list[MCPServer]]:
    """The tools ``settings`` name: the registry of ``tools_from`` (None: the built-in set ``tools``
    names) and the MCP servers of ``mcp`` and ``mcp_url``. Raises ``ConfigError`` for a registry
    that does not import, a bad MCP server, or MCP servers without the ``mcp`` extra."""
    tools = (
        tools_from_spec(settings.tools_from, recorded_by=recorded_by)
        if settings.tools_from
        else None
    )
    return tools, mcp_servers_of(settings)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SessionSetup:
    """What a continued session runs with, known before its runtime starts: the settings,
    the typed overrides the runtime records, its own tools (None: the built-in set its
    ``tools`` setting names) and its MCP servers."""

    settings: Settings
    overrides: dict[str, Any]
    tools: ToolRegistry | None
    servers: list[MCPServer]

    def runtime(self, log_store: LogStore) -> Runtime:
        """The runtime that continues the session in ``log_store``."""
        return Runtime(
            self.settings,
            store=log_store,
            tools=self.tools,
            overrides=self.overrides,
            mcp=self.servers,
        )


async def as_the_session(
    args: argparse.Namespace, log_store: LogStore, session_id: str, /, **extra: Any
) -> SessionSetup:
    """How session ``session_id`` of ``log_store`` continues as it was recorded: its model,
    endpoint, window, settings and tools (``continued_settings``, then ``session_tools``); what the
    user typed overrides them. ``log_store`` is closed when this raises. Raises what
    ``continued_settings`` and ``session_tools`` raise."""
    try:
        settings, overrides, _ = await continued_settings(args, log_store, session_id, **extra)
        recorded = None if "tools_from" in overrides else session_id
        tools, servers = session_tools(settings, recorded_by=recorded)
    except BaseException:
        await log_store.aclose()
        raise
    return SessionSetup(settings=settings, overrides=overrides, tools=tools, servers=servers)


async def runtime_as_the_session(
    args: argparse.Namespace, log_store: LogStore, session_id: str, /, **extra: Any
) -> Runtime:
    """``as_the_session(...).runtime(log_store)``: a runtime that continues the session as it was
    recorded, and records what the user typed over it. Raises what ``as_the_session`` raises."""
    setup = await as_the_session(args, log_store, session_id, **extra)
    return setup.runtime(log_store)


def add_mcp_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--mcp`` and ``--mcp-url`` (both repeatable) to ``parser``."""
    parser.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="'COMMAND ARGS'",
        help="start an MCP server over stdio and offer its tools (repeatable; needs the mcp extra)",
    )
    parser.add_argument(
        "--mcp-url",
        action="append",
        default=[],
        metavar="URL",
        help="connect to an MCP server over streamable HTTP (repeatable; needs the mcp extra)",
    )


def mcp_servers_from(args: argparse.Namespace) -> list[MCPServer]:
    """The servers the options name; when none is typed, the ``mcp``/``mcp_url`` lists of the
    configuration (``STOWAGE_MCP``, ``stowage.toml``). Raises ``ConfigError`` for an empty
    command, a URL that is not http(s), or when the ``mcp`` extra is not installed."""
    commands: list[str] = getattr(args, "mcp", None) or []
    urls: list[str] = getattr(args, "mcp_url", None) or []
    if not commands and not urls:
        config = load_config()
        commands, urls = config.mcp or [], config.mcp_url or []
    return _servers(commands, urls)


def _servers(commands: Sequence[str], urls: Sequence[str]) -> list[MCPServer]:
    """The servers of ``commands`` (stdio) and ``urls``; the ``mcp`` extra checked when any."""
    servers = [mcp_server(command) for command in commands]
    servers.extend(MCPServer(url=url) for url in urls)
    if servers:
        MCPToolSource.check_sdk()
    return servers


def mcp_servers_of(settings: Settings) -> list[MCPServer]:
    """The servers ``settings`` name (``mcp`` commands, then ``mcp_url`` URLs): those a new
    session was given, or those a continued one recorded. Raises ``ConfigError`` as
    ``mcp_servers_from`` does, and for a recorded server whose credentials were redacted and
    that neither an option nor the configuration gives again."""
    for name, option in (("mcp", "--mcp"), ("mcp_url", "--mcp-url")):
        for entry in getattr(settings, name):
            if REDACTED in entry:
                raise ConfigError(
                    f"the session's MCP server {entry!r} needs credentials that are never "
                    f"stored: give it again with {option} (or {name} in stowage.toml)"
                )
    return _servers(settings.mcp, settings.mcp_url)


def trace_if_configured(rt: Runtime, settings: Settings) -> None:
    """Subscribe an OpenTelemetry ``TraceSubscriber`` to ``rt`` when the configuration asks
    for tracing. Raises ``ConfigError`` when it does and the ``otel`` extra is missing."""
    if not load_config().otel:
        return
    try:
        from stowage.otel import TraceSubscriber
    except ImportError as exc:
        raise ConfigError(
            f"tracing is on (STOWAGE_OTEL or otel in stowage.toml) but {exc.name or 'opentelemetry'} "
            "cannot be imported: pip install 'stowage-runtime[otel]', or turn tracing off"
        ) from None
    rt.subscribe(TraceSubscriber(model=settings.model))
