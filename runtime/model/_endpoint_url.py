"""Where a gateway POSTs and how its errors name the place: shared by the OpenAI and the
Anthropic gateways, which differ in their wires and not in how an endpoint URL is read."""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit, urlunsplit

from stowage.core import ConfigError, ModelError, redact_url

__all__ = ["locate_error", "post_url"]


def post_url(base_url: str, path: str) -> tuple[str, str | None]:
    """The URL to POST to, without credentials, and the basic-auth header they make, if any."""
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"cannot configure the model client: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"the model endpoint must be an http(s) URL, got {redact_url(base_url)!r}"
        )
    auth = None
    netloc = parts.netloc
    if "@" in netloc:
        user = unquote(parts.username or "")
        password = unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    joined = parts.path.rstrip("/") + path
    return urlunsplit((parts.scheme, netloc, joined, parts.query, "")), auth


def locate_error(error: ModelError, where: str) -> ModelError:
    """``error`` with ``where`` (endpoint and status) appended to its message, once."""
    text = str(error)
    if where not in text:
        error.args = (f"{text} ({where})", *error.args[1:])
    return error
