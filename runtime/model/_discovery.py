"""Ask an endpoint how large a model's context window is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import structlog
from stowage.core import ModelAuthError, ModelConnectionError, ModelResponseError, redact_url

__all__ = [
    "WINDOW_FIELDS",
    "discover_context_window",
    "discover_model_info",
    "probe_endpoint",
    "window_from_model_info",
]

_log = structlog.get_logger("stowage.model.discovery")

#: fields that name a model's window, in the order they are trusted
WINDOW_FIELDS: tuple[str, ...] = (
    "max_model_len",
    "context_length",
    "context_window",
    "max_context_length",
    "max_context_tokens",
    "max_sequence_length",
    "n_ctx",
)

_DEFAULT_BASE_URL = "https://api.openai.com/v1"


def window_from_model_info(info: Mapping[str, Any]) -> int | None:
    """The window a ``/models/{id}`` answer states (top level first, then nested objects such
    as ``top_provider`` or ``meta``), or None. Raises nothing."""
    candidates: list[Mapping[str, Any]] = [info]
    candidates.extend(v for v in info.values() if isinstance(v, Mapping))
    for where in candidates:
        for name in WINDOW_FIELDS:
            value = where.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


async def discover_context_window(
    base_url: str | None, api_key: str | None, model: str, *, wait: float = 10.0
) -> int | None:
    """The window ``GET {base_url}/models/{model}`` states, or None when the endpoint cannot
    be reached within ``wait`` seconds, answers with an error, or names no window. Raises
    nothing."""
    info = await discover_model_info(base_url, api_key, model, wait=wait)
    return window_from_model_info(info) if info is not None else None


async def discover_model_info(
    base_url: str | None, api_key: str | None, model: str, *, wait: float = 10.0
) -> Mapping[str, Any] | None:
    """What ``GET {base_url}/models/{model}`` answers (its window, and what the model can
    take: ``policy.capabilities_from_model_info``), or None when the endpoint cannot be
    reached within ``wait`` seconds or answers with an error. Raises nothing."""
    url = f"{(base_url or _DEFAULT_BASE_URL).rstrip('/')}/models/{quote(model, safe='/')}"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    import httpx  # here, not at import: ``import stowage.model`` stays light

    try:
        async with httpx.AsyncClient(timeout=wait) as client:
            response = await client.get(url, headers=headers)
        if response.status_code != 200:
            _log.debug("window_discovery_refused", url=redact_url(url), status=response.status_code)
            return None
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        _log.debug("window_discovery_failed", url=redact_url(url), error=type(exc).__name__)
        return None
    return data if isinstance(data, Mapping) else None


async def probe_endpoint(
    base_url: str | None, api_key: str | None, *, wait: float = 10.0, wire_api: str = "chat"
) -> None:
    """Check, with one ``GET {base_url}/models``, that an endpoint can serve at all, before a
    command writes a new session for it (so a wrong URL or a server that is down leaves no
    log behind). Some servers have no ``/models``: on a 404 the wire's own route is asked with
    an empty ``POST`` (a server that serves it refuses the empty body with a 400 or 422 and
    costs nothing); a 404 or 405 there too means nothing serves that API at this URL.

    Raises ``ModelConnectionError`` when nothing answers at the URL, ``ModelAuthError`` when
    it refuses the key (401, 403) and ``ModelResponseError`` when neither route is there,
    each naming the requests as the gateway does. Anything else passes, a slow answer and a
    5xx among it: the model call will say what it is.
    """
    url = f"{(base_url or _DEFAULT_BASE_URL).rstrip('/')}/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if wire_api == "anthropic":  # its own root, key header and version header
        base_url = (base_url or "https://api.anthropic.com").rstrip("/").removesuffix("/v1")
        url = f"{base_url}/v1/models"
        headers = {"anthropic-version": "2023-06-01"} | ({"x-api-key": api_key} if api_key else {})
    import httpx  # here, not at import: ``import stowage.model`` stays light

    try:
        async with httpx.AsyncClient(timeout=wait) as client:
            response = await client.get(url, headers=headers)
    except httpx.TimeoutException:
        return  # slow is not down
    except httpx.HTTPError as exc:
        raise ModelConnectionError(
            f"{type(exc).__name__}: {exc} (GET {redact_url(url)}, no HTTP status)"
        ) from None
    if response.status_code in (401, 403):
        raise ModelAuthError(
            f"the endpoint refused the API key (GET {redact_url(url)}, HTTP {response.status_code})"
        )
    if response.status_code == 404:
        await _probe_route(base_url, headers, wire_api=wire_api, wait=wait)


async def _probe_route(
    base_url: str | None, headers: dict[str, str], *, wire_api: str, wait: float
) -> None:
    """After a 404 on ``/models``: whether the wire's route is served at ``base_url``."""
    import httpx

    base = (base_url or _DEFAULT_BASE_URL).rstrip("/")
    route = {"chat": "/chat/completions", "anthropic": "/v1/messages"}.get(wire_api, "/responses")
    url = f"{base}{route}"
    try:
        async with httpx.AsyncClient(timeout=wait) as client:
            response = await client.post(url, headers=headers, json={})
    except httpx.HTTPError:
        return  # it answered GET: the model call will say what this is
    if response.status_code in (401, 403):
        raise ModelAuthError(
            f"the endpoint refused the API key (POST {redact_url(url)}, HTTP {response.status_code})"
        )
    if response.status_code in (404, 405):
        raise ModelResponseError(
            f"nothing serves the {wire_api} API at {redact_url(base)}: GET .../models and "
            f"POST {redact_url(url)} both answered HTTP {response.status_code}; check "
            "--base-url (an OpenAI-compatible URL usually ends in /v1)"
        )
