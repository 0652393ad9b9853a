"""The compatible path: the openai SDK's public API, ``chat.completions.create`` and
``responses.create``, for a gateway set to ``http_client="sdk"`` (or ``STOWAGE_HTTP_CLIENT=sdk``).

The bodies are the same ones ``_openai_wire`` builds for the aiohttp path: each field the
public ``create`` takes goes as its keyword argument, the rest as ``extra_body``. The typed
results are turned back into the plain JSON they came from (``to_dict``) and go through the
same parsers; a stream's typed events likewise (``PlainEvents``, used like
``JsonEventStream``). The SDK sends each request once (``max_retries=0``): retries are the
caller's. Only public names of the SDK are used here; its errors become ``ModelError`` by
``map_openai_error``. The SDK reads each event and body itself, so on this path only the
parsed answer is checked against ``max_answer_chars``. ``import openai`` (about 0.4 s) happens
when the first ``SdkClient`` is made, never when this module is imported.
"""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any

from stowage.core import ConfigError, IncompleteResponse, ModelError, ModelResponseError

from ._openai_wire import PURPOSE_HEADER, context_error, is_context_length_error
from ._sdk_events import SdkEvents, sdk_error, sdk_plain

if TYPE_CHECKING:
    import openai

__all__ = ["PlainEvents", "SdkClient", "map_openai_error", "plain"]


def plain(value: Any) -> Any:
    """A typed SDK object (a response, a stream chunk or event) as the plain JSON it came from."""
    return sdk_plain(value, "the response is not valid JSON")


def map_openai_error(exc: BaseException, *, max_retry_wait: float | None = None) -> ModelError:
    """The ``ModelError`` for an openai/parse failure ``exc``, the server's wait capped."""
    import openai

    known = sdk_error(exc, openai, getattr(exc, "code", None), max_retry_wait=max_retry_wait)
    if known is not None:
        return known
    if isinstance(exc, openai.APIError):  # an error event inside a stream, a bad body
        if is_context_length_error(exc.code, str(exc.message)):
            return context_error(exc.code, str(exc.message))
        return ModelResponseError(str(exc.message))
    if isinstance(exc, json.JSONDecodeError):  # orjson's too: a cut or garbled body
        return IncompleteResponse(f"the response is not valid JSON: {exc}")
    return ModelResponseError(f"unusable model response: {type(exc).__name__}: {exc}")


class PlainEvents(SdkEvents):
    """The openai SDK's typed ``AsyncStream`` as plain JSON events."""

    def sdk_errors(self) -> tuple[type[Exception], ...]:
        import openai

        return (openai.APIError,)

    def broken(self, exc: Exception) -> Exception:
        import openai

        return openai.APIConnectionError(request=self._stream.response.request)

    def plain_event(self, event: Any) -> Any:
        return plain(event)


def _public_parameters(client: openai.AsyncOpenAI, wire_api: str) -> frozenset[str] | None:
    """The keyword arguments the public ``create`` of ``wire_api`` takes (None: any)."""
    import openai

    if wire_api == "chat":
        endpoint = getattr(getattr(client, "chat", None), "completions", None)
    else:
        endpoint = getattr(client, "responses", None)
    create = getattr(endpoint, "create", None)
    if not callable(create):
        version = getattr(openai, "__version__", "unknown")
        raise ConfigError(f"openai {version} has no {wire_api} API: upgrade the openai package")
    try:
        parameters = inspect.signature(create).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return frozenset(parameters)


def _split_body(
    body: dict[str, Any], parameters: frozenset[str] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``body`` split into the public ``create``'s keyword arguments and ``extra_body``."""
    if parameters is None:
        return body, {}
    known = {k: v for k, v in body.items() if k in parameters}
    return known, {k: v for k, v in body.items() if k not in parameters}


class SdkClient:
    """One ``openai.AsyncOpenAI`` client calling the public ``create`` of one wire API."""

    def __init__(
        self, *, api_key: str, base_url: str | None, timeout: float, wire_api: str
    ) -> None:
        """Raises ``ConfigError`` if the SDK cannot make a client or lacks ``wire_api``."""
        import openai

        #: what a call on this path may raise that is the provider's fault
        self.errors: tuple[type[Exception], ...] = (openai.APIError,)
        try:
            self.client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                # the gateway sends each request once: retries are the caller's (the actors
                # retry with jitter, Retry-After honoured and logged), never the SDK's as well
                max_retries=0,
            )
        except openai.OpenAIError as exc:
            raise ConfigError(f"cannot configure the OpenAI client: {exc}") from exc
        self.wire_api = wire_api
        #: the keyword arguments the public ``create`` takes (None: any)
        self.parameters = _public_parameters(self.client, wire_api)

    @property
    def base_url(self) -> str:
        """The endpoint's base URL as the SDK resolved it (``OPENAI_BASE_URL``, its default)."""
        return str(self.client.base_url)

    async def create(self, body: dict[str, Any], purpose: str) -> Any:
        """``create`` with ``body``: a response, or a stream when ``body`` asks for one."""
        known, extra = _split_body(body, self.parameters)
        endpoint: Any = (
            self.client.chat.completions if self.wire_api == "chat" else self.client.responses
        )
        return await endpoint.create(
            **known, extra_headers={PURPOSE_HEADER: purpose}, extra_body=extra or None
        )

    async def compact(self, body: dict[str, Any], purpose: str) -> bytes:
        """``POST /responses/compact`` through the SDK's public ``post`` (older SDKs lack it)."""
        answer: bytes = await self.client.post(
            "/responses/compact",
            cast_to=bytes,
            body=body,
            options={"headers": {PURPOSE_HEADER: purpose}},
        )
        return answer

    async def aclose(self) -> None:
        """Close the SDK's connections."""
        await self.client.close()
