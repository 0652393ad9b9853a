"""Configuration of the command line: options, ``STOWAGE_*`` variables, ``stowage.toml`` files.

Precedence, highest first: an option typed on the command line; a ``STOWAGE_*`` environment
variable; the selected ``[models.NAME]`` profile; ``./stowage.toml`` (the project's); the
user's ``stowage.toml`` (``$XDG_CONFIG_HOME/stowage/``, else ``~/.config/stowage/``); the
built-in defaults. A session
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
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, create_model
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from stowage.core import ConfigError, SettingInfo, setting_infos
from stowage.policy import CustomPrice

__all__ = [
    "CONFIG_NAME",
    "ConfigBase",
    "ConfigLayers",
    "ModelProfile",
    "ProfileBase",
    "StowageConfig",
    "load_config",
    "load_layers",
    "user_config_path",
]

CONFIG_NAME = "stowage.toml"


class ProfileBase(BaseModel):
    """One ``[models.NAME]`` table: an endpoint and what is known about its model."""

    model_config = ConfigDict(extra="forbid")

    api_key: SecretStr | None = None


class ConfigBase(BaseSettings):
    """Every configured value; None where nothing was configured (the default applies)."""

    model_config = SettingsConfigDict(env_prefix="STOWAGE_", extra="forbid")

    api_key: SecretStr | None = None
    store: str | None = None
    #: MCP servers whose tools new and continued sessions get: commands (stdio) and URLs
    mcp: list[str] | None = None
    mcp_url: list[str] | None = None
    #: trace turns, rounds, tools and compactions with OpenTelemetry (the ``otel`` extra)
    otel: bool | None = None
    #: model prices in US dollars per million tokens by model name, over genai-prices' table
    #: (``stowage cost``, ``list``): ``[prices."NAME"]`` with input, output, cached_input...
    prices: dict[str, CustomPrice] = {}
    models: dict[str, ProfileBase] = {}

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

    def profile_named(self, name: str | None) -> tuple[str, ProfileBase] | None:
        """The profile ``name`` selects, with the model id it names; None when it names none."""
        if name is None or name not in self.models:
            return None
        profile = self.models[name]
        return (getattr(profile, "model", None) or name), profile


def _optional(info: SettingInfo) -> tuple[Any, Any]:
    """A configuration key of a setting: its type and bounds, or None (not configured)."""
    b = info.bounds
    bounds = Field(gt=b.get("gt"), ge=b.get("ge"), lt=b.get("lt"), le=b.get("le"))
    kind = Annotated[info.annotation, bounds] if b else info.annotation
    return (kind | None, Field(default=None, description=info.help))


def _made(base: type[BaseModel], name: str, infos: Any) -> Any:
    fields: dict[str, Any] = {
        i.name: _optional(i) for i in infos if i.name not in base.model_fields
    }
    return create_model(name, __base__=base, **fields)


ModelProfile: type[ProfileBase] = _made(
    ProfileBase, "ModelProfile", (i for i in setting_infos() if i.profile)
)
# the profiles of the full configuration are ``ModelProfile`` (every key a profile may set)
StowageConfig: type[ConfigBase] = _made(
    create_model(
        "ConfigWithProfiles", __base__=ConfigBase, models=(cast(Any, dict)[str, ModelProfile], {})
    ),
    "StowageConfig",
    (i for i in setting_infos() if i.config),
)


def user_config_path() -> Path:
    """``$XDG_CONFIG_HOME/stowage/stowage.toml``, else ``~/.config/stowage/stowage.toml``."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "stowage" / CONFIG_NAME


def _read_file(path: Path) -> dict[str, Any]:
    """The validated values of one file, or {} when it does not exist."""
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


@dataclass(frozen=True, slots=True)
class ConfigLayers:
    """The configuration, and which of its keys each layer set: ``from_env`` the
    ``STOWAGE_*`` variables, ``from_files`` the two files (the profile layer sits between:
    it is applied over the files and under the variables)."""

    config: ConfigBase
    from_files: frozenset[str]
    from_env: frozenset[str]


def load_config(*, project_dir: Path | None = None) -> ConfigBase:
    """The configuration: ``STOWAGE_*`` over ``./stowage.toml`` over the user's file (typed options
    are applied over it by the caller). Raises ``ConfigError`` naming the file (or variable) and
    key."""
    return load_layers(project_dir=project_dir).config


def load_layers(*, project_dir: Path | None = None) -> ConfigLayers:
    """``load_config`` with the keys each layer set. Raises ``ConfigError`` as it does."""
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
) -> ConfigLayers:
    """``load_layers`` for one set of inputs (the stamps and ``env`` are only the cache key)."""
    files = _merge(_read_file(user), _read_file(project))
    try:
        from_env = StowageConfig().model_dump(exclude_unset=True)  # the STOWAGE_* variables
    except ValidationError as exc:
        error = exc.errors()[0]
        name = "STOWAGE_" + ".".join(str(p) for p in error["loc"]).upper()
        raise ConfigError(f"environment variable {name}: {error['msg']}") from None
    try:
        config = StowageConfig.model_validate(_merge(files, from_env))
    except ValidationError as exc:
        raise ConfigError(f"configuration: {_first_problem(exc)}") from None
    return ConfigLayers(config, frozenset(files), frozenset(from_env))
