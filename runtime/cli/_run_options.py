"""The options a session runs with, shared by ``run``/``resume``/``compact`` and ``worker``: one
parser section and one way to turn it into ``Settings`` and tools, so they cannot drift apart.

Every option defaults to None, so that an option the user typed can be told from one left
out: only typed options override a continued session's identity (see ``_config`` for the
whole precedence).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
from pathlib import Path
from typing import Any

from stowage.core import (
    IDENTITY_FIELDS,
    ConfigError,
    LogStore,
    SessionIdentity,
    Settings,
    SettingsChanged,
    continue_settings,
)
from stowage.facade import session_identity
from stowage.tools import ToolRegistry

from ._config import StowageConfig, load_config
from ._policy_options import add_policy_options, policy_settings

__all__ = [
    "add_model_options",
    "continued_settings",
    "settings_from_options",
    "settings_notice",
    "tools_from_spec",
    "typed_overrides",
]

# config keys that are Settings fields of the same name; ``store`` is the command's,
# ``api_key`` is read apart (never recorded) and ``profile`` selects a [models.NAME] table
_CONFIG_FIELDS = tuple(
    name
    for name in StowageConfig.model_fields
    if name in {f.name for f in dataclasses.fields(Settings)}
    and name not in ("store", "api_key", "profile")
)
_PROFILE_FIELDS = ("base_url", "wire_api", "context_window", "max_output_tokens", "compact_model")


def add_model_options(parser: argparse.ArgumentParser, *, system_help: str) -> None:
    """The model, endpoint, policy and tool options of a session."""
    parser.add_argument(
        "--model",
        default=None,
        help="a model name, or the name of a [models.NAME] profile in stowage.toml "
        "(default: configuration, else 'scripted', the offline model)",
    )
    parser.add_argument(
        "--profile", default=None, help="a [models.NAME] profile of stowage.toml to run with"
    )
    parser.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint (else OPENAI_BASE_URL)"
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="API key (else the profile's, STOWAGE_API_KEY or OPENAI_API_KEY); never stored",
    )
    parser.add_argument("--wire-api", choices=["chat", "responses"], default=None)
    add_policy_options(parser)
    parser.add_argument(
        "--no-auto-compact", action="store_true", default=None, help="never compact on its own"
    )
    parser.add_argument("--system", default=None, help=system_help)
    parser.add_argument(
        "--tools",
        choices=["workspace", "none"],
        default=None,
        help="read-only tools over the current directory (default) or none",
    )
    parser.add_argument(
        "--tools-from",
        default=None,
        metavar="MODULE:NAME",
        help="your own tools: a ToolRegistry (or a function returning one) importable as MODULE:NAME",
    )
    parser.add_argument(
        "--no-stream", action="store_true", default=None, help="ask for whole responses"
    )


def _typed(args: argparse.Namespace) -> dict[str, Any]:
    """The options the user typed, by config key (None: not typed)."""
    values: dict[str, Any] = {
        "model": getattr(args, "model", None),
        "profile": getattr(args, "profile", None),
        "base_url": getattr(args, "base_url", None),
        "wire_api": getattr(args, "wire_api", None),
        "system": getattr(args, "system", None),
        "tools": getattr(args, "tools", None),
        **policy_settings(args),
    }
    if getattr(args, "no_auto_compact", None):
        values["auto_compact"] = False
    if getattr(args, "no_stream", None):
        values["stream"] = False
    return {k: v for k, v in values.items() if v is not None}


def _profile_name(config: StowageConfig) -> str | None:
    """The profile the options or configuration select: ``--profile``, else ``--model`` when
    it names one, else ``profile``/``model`` of the configuration when it names one.

    Raises ``ConfigError`` for a ``--profile`` (or ``STOWAGE_PROFILE``/``profile``) that names
    no profile."""
    if config.profile is not None:
        if config.profile not in config.models:
            raise ConfigError(
                f"profile {config.profile!r}: no [models.{config.profile}] table in stowage.toml"
            )
        return config.profile
    if config.model is not None and config.model in config.models:
        return config.model
    return None


def _profile_values(config: StowageConfig, name: str | None) -> dict[str, Any]:
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


def typed_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The identity fields the user typed, a typed profile (``--profile NAME``, or
    ``--model NAME`` naming one) expanded into the fields it sets; typed fields win over it.
    Raises ``ConfigError`` for a bad configuration or an unknown ``--profile``."""
    typed = _typed(args)
    typed.pop("stream", None)
    if not typed:
        return {}
    config = load_config()
    overrides: dict[str, Any] = {}
    name = typed.get("profile") or typed.get("model")
    if "profile" in typed and name not in config.models:
        raise ConfigError(f"--profile {name}: no [models.{name}] table in stowage.toml")
    if name in config.models:
        overrides.update(_profile_values(config, name))
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
    """Settings of a new session: typed options over ``STOWAGE_*`` over the project's and the
    user's ``stowage.toml`` over the defaults (plus ``extra`` fields). ``typed=False`` leaves
    the typed identity options out (a continued session applies them itself), and
    ``continuing_profile`` is then the profile the session was created with (its endpoint and
    key are found there).

    Raises ``ConfigError`` for bad values, naming the file or option.
    """
    options = typed_overrides(args) if typed else {}
    config = load_config()
    values: dict[str, Any] = {
        k: getattr(config, k) for k in _CONFIG_FIELDS if getattr(config, k) is not None
    }
    name = continuing_profile if not typed and continuing_profile else _profile_name(config)
    values.update(_profile_values(config, name))
    values.update(options)
    if getattr(args, "no_stream", None):
        values["stream"] = False
    if values.get("base_url") is None:
        values["base_url"] = os.environ.get("OPENAI_BASE_URL")
    values["api_key"] = _api_key(args, config, values.get("profile"))
    return Settings(workspace=Path.cwd(), **{**values, **extra})


def _api_key(args: argparse.Namespace, config: StowageConfig, profile: str | None) -> str | None:
    """--api-key, else the profile's key, else STOWAGE_API_KEY or a file's, else
    OPENAI_API_KEY."""
    typed: str | None = getattr(args, "api_key", None)
    if typed:
        return typed
    found = config.profile_named(profile)
    if found is not None and found[1].api_key is not None:
        return found[1].api_key.get_secret_value()
    if config.api_key is not None:
        return config.api_key.get_secret_value()
    return os.environ.get("OPENAI_API_KEY")


async def continued_settings(
    args: argparse.Namespace, log_store: LogStore, session_id: str, /, **extra: Any
) -> tuple[Settings, dict[str, Any], SessionIdentity]:
    """What session ``session_id`` continues with: its recorded identity over the
    configuration, the typed options over both; with the typed overrides (for the runtime to
    record) and the identity.

    Raises what ``session_identity`` raises and ``ConfigError``.
    """
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
    return settings, overrides, identity


def settings_notice(event: SettingsChanged) -> str:
    """The one stderr line that says a continued session runs with changed settings."""
    shown = "; ".join(f"{k} {v[0]!r} -> {v[-1]!r}" for k, v in event.changes.items())
    why = "by options" if event.source == "user" else f"({event.source})"
    return f"[{event.session_id}: settings changed {why}: {shown}; recorded in its log]"


def tools_from_spec(spec: str) -> ToolRegistry:
    """Import ``MODULE:NAME``: a ``ToolRegistry`` or a function returning one.

    Raises ``ConfigError`` naming the spec when it cannot be imported or is not a registry.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--tools-from {spec!r}: expected MODULE:NAME, e.g. mytools:registry")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--tools-from {spec!r}: cannot import it: {exc}") from exc
    registry = target() if callable(target) and not isinstance(target, ToolRegistry) else target
    if not isinstance(registry, ToolRegistry):
        raise ConfigError(
            f"--tools-from {spec!r}: expected a ToolRegistry, got {type(registry).__name__}"
        )
    return registry
