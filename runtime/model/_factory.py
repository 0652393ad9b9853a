"""Which gateway a session's settings name, without importing an HTTP client until one is needed:
``import aiohttp`` or ``import openai`` takes a good part of a command's start, and the offline
model, ``show``, ``check``, ``list`` and ``context`` never use either."""

from __future__ import annotations

from typing import Any

from stowage.core import ModelGateway, Settings

from ._scripted import ScriptedModel

__all__ = ["make_gateway"]


def make_gateway(settings: Settings) -> ModelGateway:
    """The gateway ``settings`` ask for: ``ScriptedModel`` for model ``scripted``, an
    ``AnthropicGateway`` for wire_api ``anthropic``, else an ``OpenAIGateway`` (its HTTP
    client is imported here, on first use).

    Raises ``ConfigError`` when the gateway has no API key.
    """
    if settings.model == "scripted":
        return ScriptedModel()
    # what both gateways take from the settings, named as their arguments
    endpoint: dict[str, Any] = {
        "base_url": settings.base_url,
        "api_key": settings.api_key,
        "timeout": settings.request_timeout,
        "stream_idle_timeout": settings.stream_idle_timeout,
        "request_deadline": settings.request_deadline,
        "max_retry_wait": settings.max_retry_wait,
        "max_answer_chars": settings.max_answer_chars,
        "http_client": settings.http_client,
    }
    if settings.wire_api == "anthropic":
        from ._anthropic_gateway import AnthropicGateway

        return AnthropicGateway(**endpoint)
    from ._openai_gateway import OpenAIGateway

    return OpenAIGateway(wire_api=settings.wire_api, **endpoint)
