"""The ``http_client="sdk"`` path of the Anthropic gateway: the official ``anthropic`` SDK's
public ``messages.create``, with the bodies ``_anthropic_wire`` builds.

Its typed results are turned back into the plain JSON they came from (``to_dict``) and parsed
by the same functions as the aiohttp path; a stream's typed events likewise
(``AnthropicEvents``, used like ``JsonEventStream``). The SDK sends each request once
(``max_retries=0``): retries are stowage's. ``import anthropic`` happens when the first
client is made (the SDK is an extra: ``pip install stowage-runtime[anthropic]``), never when
this module is imported; only public names of it are used.
"""

from __future__ import annotations

import json
from typing import Any

from stowage.core import ConfigError, IncompleteResponse, ModelConnectionError, ModelError

from ._anthropic_wire import ANTHROPIC_VERSION, event_error
from ._openai_wire import PURPOSE_HEADER
from ._sdk_events import SdkEvents, sdk_error, sdk_plain

__all__ = ["AnthropicEvents", "AnthropicSdkClient", "map_anthropic_error", "plain_message"]


def plain_message(value: Any) -> Any:
    """A typed SDK object (a message or a stream event) as the plain JSON it came from."""
    return sdk_plain(value, "the response is not a message")


def map_anthropic_error(exc: BaseException, *, max_retry_wait: float | None = None) -> ModelError:
    """The ``ModelError`` for an anthropic SDK failure ``exc``. Raises nothing."""
    import anthropic

    known = sdk_error(exc, anthropic, None, max_retry_wait=max_retry_wait)
    if known is not None:
        return known
    if isinstance(exc, anthropic.APIError):  # an error event inside a stream
        body = exc.body if isinstance(exc.body, dict) else {}
        return event_error(body.get("error", {"message": str(exc.message)}))
    if isinstance(exc, json.JSONDecodeError):
        return IncompleteResponse(f"the response is not valid JSON: {exc}")
    return event_error({"message": f"{type(exc).__name__}: {exc}"})


class AnthropicEvents(SdkEvents):
    """The anthropic SDK's typed stream as plain JSON events; an ``error`` event raises."""

    def sdk_errors(self) -> tuple[type[Exception], ...]:
        import anthropic

        return (anthropic.APIError,)

    def broken(self, exc: Exception) -> Exception:
        return ModelConnectionError(f"the message stream broke: {exc!r}")

    def plain_event(self, event: Any) -> Any:
        data = plain_message(event)
        if isinstance(data, dict) and data.get("type") == "error":
            raise event_error(data.get("error"))
        return data


class AnthropicSdkClient:
    """One ``anthropic.AsyncAnthropic`` client calling the public ``messages.create``."""

    def __init__(self, *, api_key: str, base_url: str, timeout: float) -> None:
        """Raises ``ConfigError`` if the SDK is not installed or cannot make a client."""
        try:
            import anthropic
        except ImportError as exc:
            raise ConfigError(
                "http_client 'sdk' on the anthropic wire needs the anthropic SDK: pip install "
                "'stowage-runtime[anthropic]' (or use http_client 'aiohttp')"
            ) from exc
        #: what a call on this path may raise that is the provider's fault
        self.errors: tuple[type[Exception], ...] = (anthropic.APIError,)
        try:
            self.client = anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                # one send per call: the actors retry, with jitter and the server's wait
                max_retries=0,
                default_headers={"anthropic-version": ANTHROPIC_VERSION},
            )
        except anthropic.AnthropicError as exc:
            raise ConfigError(f"cannot configure the Anthropic client: {exc}") from exc

    async def create(self, body: dict[str, Any], purpose: str) -> Any:
        """``messages.create`` with ``body``: a message, or a stream when ``body`` asks for one."""
        return await self.client.messages.create(**body, extra_headers={PURPOSE_HEADER: purpose})

    async def aclose(self) -> None:
        """Close the SDK's connections."""
        await self.client.close()
