"""Configuration of the command line: options, ``STOWAGE_*`` variables, ``stowage.toml`` files.

Precedence, highest first: an option typed on the command line; a ``STOWAGE_*`` environment
variable; ``./stowage.toml`` (the project's); the user's ``stowage.toml``
(``$XDG_CONFIG_HOME/stowage/``, else ``~/.config/stowage/``); the built-in defaults. A session
that is continued runs with its recorded identity instead of everything below the typed
options (see ``core.continue_settings``): configuration shapes new sessions, an option typed
now is an explicit override. API keys are read here at every start and never recorded.

A ``[models.NAME]`` table is a profile: ``--model NAME`` (or ``--profile NAME``, or
``model = "NAME"`` in a file) selects it, and its fields replace the top-level ones.
"""

from __future__ import annotations

import functools
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from stowage.core import ConfigError

__all__ = ["CONFIG_NAME", "ModelProfile", "StowageConfig", "load_config", "user_config_path"]

CONFIG_NAME = "stowage.toml"


class ModelProfile(BaseModel):
    """One ``[models.NAME]`` table: an endpoint and what is known about its model."""

    model_config = ConfigDict(extra="forbid")

    #: the model id sent to the endpoint (default: the profile's name)
    model: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    wire_api: Literal["chat", "responses"] | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    compact_model: str | None = None


class StowageConfig(BaseSettings):
    """Every configured value; None where nothing was configured (the default applies).

    ``StowageConfig()`` reads the ``STOWAGE_*`` variables; ``model_validate`` (which runs no
    settings source) checks what a ``stowage.toml`` holds: an unknown key is an error.
    """

    model_config = SettingsConfigDict(env_prefix="STOWAGE_", extra="forbid")

    model: str | None = None
    profile: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    wire_api: Literal["chat", "responses"] | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    compact_threshold: int | None = None
    compact_model: str | None = None
    require_reported_usage: bool | None = None
    soft_mark: float | None = None
    compact_mark: float | None = None
    hard_mark: float | None = None
    target_after: float | None = None
    keep_rounds: int | None = None
    micro_min_free: float | None = None
    reattach_share: float | None = None
    max_answer_chars: int | None = None
    prompt_cache_key: str | None = None
    compact_prompt_file: str | None = None
    auto_compact: bool | None = None
    background_compaction: bool | None = None
    tools: Literal["workspace", "none"] | None = None
    system: str | None = None
    store: str | None = None
    durability: Literal["fsync", "none"] | None = None
    stream: bool | None = None
    request_timeout: float | None = None
    max_retries: int | None = None
    #: MCP servers whose tools new and continued sessions get: commands (stdio) and URLs
    mcp: list[str] | None = None
    mcp_url: list[str] | None = None
    #: trace turns, rounds, tools and compactions with OpenTelemetry (the ``otel`` extra)
    otel: bool | None = None
    models: dict[str, ModelProfile] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Typed options (init), then ``STOWAGE_*``, then the files (given as init values)."""
        return (init_settings, env_settings)

    def profile_named(self, name: str | None) -> tuple[str, ModelProfile] | None:
        """The profile ``name`` selects, with the model id it names; None when it names none."""
        if name is None or name not in self.models:
            return None
        profile = self.models[name]
        return (profile.model or name), profile


def user_config_path() -> Path:
    """``$XDG_CONFIG_HOME/stowage/stowage.toml``, else ``~/.config/stowage/stowage.toml``."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "stowage" / CONFIG_NAME


def _read_file(path: Path) -> dict[str, Any]:
    """The validated values of one file, or {} when it does not exist.

    Raises ``ConfigError`` naming the file and the key for bad TOML, an unknown key or a bad
    value.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        StowageConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_first_problem(exc)}") from None
    return data


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"unknown key {where!r}"
    return f"bad value for {where!r}: {error['msg']}"


def _merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    merged = dict(low)
    for key, value in high.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(*, project_dir: Path | None = None) -> StowageConfig:
    """The configuration: ``STOWAGE_*`` over ``./stowage.toml`` over the user's file (typed
    options are applied over it by the caller). Read once per distinct input: a command asks
    for it several times, and the files (path, size, time) and the variables are the key.

    Raises ``ConfigError`` naming the file (or variable) and key.
    """
    user, project = user_config_path(), (project_dir or Path.cwd()) / CONFIG_NAME
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("STOWAGE_")))
    return _load(user, _stamp(user), project, _stamp(project), env)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=16)
def _load(
    user: Path,
    user_stamp: tuple[int, int] | None,
    project: Path,
    project_stamp: tuple[int, int] | None,
    env: tuple[tuple[str, str], ...],
) -> StowageConfig:
    """``load_config`` for one set of inputs (the stamps and ``env`` are only the cache key)."""
    files = _merge(_read_file(user), _read_file(project))
    try:
        from_env = StowageConfig().model_dump(exclude_unset=True)  # the STOWAGE_* variables
    except ValidationError as exc:
        error = exc.errors()[0]
        name = "STOWAGE_" + ".".join(str(p) for p in error["loc"]).upper()
        raise ConfigError(f"environment variable {name}: {error['msg']}") from None
    try:
        return StowageConfig.model_validate(_merge(files, from_env))
    except ValidationError as exc:
        raise ConfigError(f"configuration: {_first_problem(exc)}") from None
