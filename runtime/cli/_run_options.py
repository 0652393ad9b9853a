"""The options a session runs with, shared by ``run``/``resume`` and ``worker``: one parser
section and one way to turn it into ``Settings`` and tools, so the two cannot drift apart."""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path

from stowage.core import ConfigError, Settings
from stowage.tools import ToolRegistry

from ._policy_options import add_policy_options, policy_settings

__all__ = ["add_model_options", "settings_from_options", "tools_from_spec"]


def add_model_options(parser: argparse.ArgumentParser, *, system_help: str) -> None:
    """The model, endpoint, policy and tool options of a session."""
    parser.add_argument(
        "--model", default="scripted", help="'scripted' (offline, default) or a model name"
    )
    parser.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint (else OPENAI_BASE_URL)"
    )
    parser.add_argument(
        "--api-key", default=None, help="API key (else OPENAI_API_KEY); never logged"
    )
    parser.add_argument("--wire-api", choices=["chat", "responses"], default="chat")
    add_policy_options(parser)
    parser.add_argument("--no-auto-compact", action="store_true", help="never compact on its own")
    parser.add_argument("--system", default=None, help=system_help)
    parser.add_argument(
        "--tools",
        choices=["workspace", "none"],
        default="workspace",
        help="read-only tools over the current directory (default) or none",
    )
    parser.add_argument(
        "--tools-from",
        default=None,
        metavar="MODULE:NAME",
        help="your own tools: a ToolRegistry (or a function returning one) importable as MODULE:NAME",
    )
    parser.add_argument("--no-stream", action="store_true", help="ask for whole responses")


def settings_from_options(args: argparse.Namespace, **extra: object) -> Settings:
    """Settings from the options of ``add_model_options`` (plus ``extra`` fields).

    Raises ``ConfigError`` for bad values.
    """
    return Settings(
        model=args.model,
        base_url=args.base_url or os.environ.get("OPENAI_BASE_URL"),
        api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
        wire_api=args.wire_api,
        system=args.system,
        tools=args.tools,
        workspace=Path.cwd(),
        **policy_settings(args),
        auto_compact=not args.no_auto_compact,
        stream=not args.no_stream,
        **extra,  # type: ignore[arg-type]
    )


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
