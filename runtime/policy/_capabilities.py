"""What a model can take, and how a request is shaped by it.

Two capabilities change what stowage sends: whether the model makes parallel tool calls (a
model that does not is asked for one call a round, ``parallel_tool_calls: false``, so it never
emits several the endpoint would then cut or reject), and how many tools one request may carry
(a session with more is refused when it starts, naming both figures, rather than failing at
the endpoint on every round). They come from the registry below (by model name, dated snapshots
by prefix, as the window's registry), from what ``/v1/models/{id}`` says
(``capabilities_from_model_info``), and from the settings ``parallel_tool_calls`` and
``max_tools``, which win. Reasoning items and images are not part of stowage's items, so no
request carries them whatever the model takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from stowage.core import ConfigError, Settings

__all__ = [
    "CAPABILITIES", "Capabilities", "capabilities_for", "capabilities_from_model_info",
    "check_tool_count",
]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """``parallel_tool_calls``: True or False when known (None: nothing is said to the
    endpoint); ``max_tools``: the most tools one request may carry (None: no known limit)."""

    parallel_tool_calls: bool | None = None
    max_tools: int | None = None


# OpenAI's function-calling models take at most 128 tools a request; the first GPT-4 snapshots
# made one call a turn (parallel calls came with the 1106 models); the o-series reasoning
# models refuse the parallel_tool_calls parameter, so nothing is said to them
_OPENAI = Capabilities(parallel_tool_calls=True, max_tools=128)
CAPABILITIES: Mapping[str, Capabilities] = {
    "gpt-5": _OPENAI,
    "gpt-4.1": _OPENAI,
    "gpt-4o": _OPENAI,
    "gpt-4-turbo": _OPENAI,
    "gpt-4": Capabilities(parallel_tool_calls=False, max_tools=128),
    "gpt-3.5-turbo": _OPENAI,
    "o1": Capabilities(max_tools=128),
    "o3": Capabilities(max_tools=128),
    "o4-mini": Capabilities(max_tools=128),
}


def _registered(model: str) -> Capabilities:
    if model in CAPABILITIES:
        return CAPABILITIES[model]
    prefixes = [key for key in CAPABILITIES if model.startswith(key + "-")]
    return CAPABILITIES[max(prefixes, key=len)] if prefixes else Capabilities()


def capabilities_for(settings: Settings, found: Capabilities | None = None) -> Capabilities:
    """The capabilities a session's requests are shaped by: the registry's for its model,
    what the endpoint said (``found``) over them, the settings over both. Raises nothing."""
    caps = _registered(settings.model)
    if found is not None:
        caps = replace(
            caps,
            parallel_tool_calls=(
                found.parallel_tool_calls
                if found.parallel_tool_calls is not None
                else caps.parallel_tool_calls
            ),
            max_tools=found.max_tools if found.max_tools is not None else caps.max_tools,
        )
    if settings.parallel_tool_calls is not None:
        caps = replace(caps, parallel_tool_calls=settings.parallel_tool_calls)
    if settings.max_tools is not None:
        caps = replace(caps, max_tools=settings.max_tools)
    return caps


_PARALLEL_FIELDS = ("supports_parallel_function_calling", "parallel_tool_calls")
_MAX_TOOLS_FIELDS = ("max_tools", "max_functions")


def capabilities_from_model_info(info: Mapping[str, Any]) -> Capabilities:
    """What a ``/models/{id}`` answer says the model can take (top level first, then nested
    objects such as ``model_info`` or ``capabilities``): LiteLLM's
    ``supports_parallel_function_calling``, or ``parallel_tool_calls``; ``max_tools``. Raises
    nothing."""
    candidates: list[Mapping[str, Any]] = [info]
    candidates.extend(v for v in info.values() if isinstance(v, Mapping))
    parallel: bool | None = None
    max_tools: int | None = None
    for where in candidates:
        for name in _PARALLEL_FIELDS:
            if parallel is None and isinstance(where.get(name), bool):
                parallel = where[name]
        for name in _MAX_TOOLS_FIELDS:
            value = where.get(name)
            if max_tools is None and type(value) is int and value > 0:
                max_tools = value
    return Capabilities(parallel_tool_calls=parallel, max_tools=max_tools)


def check_tool_count(settings: Settings, tools: int, caps: Capabilities | None = None) -> None:
    """Raises ``ConfigError`` when a session's ``tools`` are more than its model takes."""
    limit = (caps or capabilities_for(settings)).max_tools
    if limit is not None and tools > limit:
        raise ConfigError(
            f"model {settings.model} takes at most {limit} tools a request and this session "
            f"has {tools}: give it fewer (--tools none, fewer MCP servers) or set max_tools "
            "if the model takes more"
        )
