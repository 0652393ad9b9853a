"""What goes wrong on the wire, as plain exceptions, and the ``ModelError`` each one stands for.

Neither HTTP client of the gateway leaks its own error classes past its module: the aiohttp
transport raises ``HttpStatusError`` for an error status (its status, headers and body kept)
and ``TransportError`` when the exchange itself fails (refused, reset, a cut body, a socket
timeout); an ``error`` payload inside an event stream is an ``EventError``. ``model_error``
turns any of them into stowage's error tree, by the same rules the SDK path follows
(``status_error``): 429 ``RateLimitError`` with the wait the server asked for, 401/403
``ModelAuthError``, an overflow message ``ContextLengthExceeded``, 5xx ``ModelConnectionError``.
Nothing here imports an HTTP library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stowage.core import (
    IncompleteResponse,
    ModelAuthError,
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    RateLimitError,
)

from ._openai_wire import context_error, is_context_length_error
from ._retry_headers import requested_wait

__all__ = [
    "BodyTooLarge",
    "EventError",
    "HttpStatusError",
    "TransportError",
    "error_fields",
    "model_error",
    "status_error",
]


class TransportError(Exception):
    """The HTTP exchange failed before a whole answer came (``timeout``: the socket went silent)."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class BodyTooLarge(Exception):
    """A body passed the most bytes it may be read to; ``size``: bytes read by then."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size:,} bytes read")
        self.size = size


class HttpStatusError(Exception):
    """The endpoint answered an error status, with its ``headers`` and ``body``."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.code, self.message = error_fields(status, body)
        super().__init__(self.message)


class EventError(Exception):
    """An event of a stream carried an ``error`` object (``error``: the object)."""

    def __init__(self, error: Any) -> None:
        self.error = error
        message = error.get("message") if isinstance(error, dict) else None
        self.code = error.get("code") if isinstance(error, dict) else None
        super().__init__(
            message if isinstance(message, str) and message else "error in the event stream"
        )


def error_fields(status: int, body: bytes) -> tuple[object, str]:
    """The ``code`` of an error body and the message naming it, as the openai SDK words it."""
    text = body.decode("utf-8", "replace").strip()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        return None, text or f"Error code: {status}"
    data = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    code = data.get("code") if isinstance(data, dict) else None
    return code, f"Error code: {status} - {parsed}"


def status_error(
    status: int,
    code: object,
    message: str,
    headers: Mapping[str, str],
    *,
    max_retry_wait: float | None = None,
) -> ModelError:
    """The ``ModelError`` for an error status; the server's wait, capped, is its ``retry_after``."""
    wait = requested_wait(headers, cap=max_retry_wait)
    error: ModelError
    if status == 429:
        error = RateLimitError(message, retry_after=wait)
    elif status in (400, 413, 422) and is_context_length_error(code, message):
        error = context_error(code, message)
    elif status in (401, 403):
        error = ModelAuthError(message)
    elif status >= 500:
        error = ModelConnectionError(message)
        error.retry_after = wait
    else:
        error = ModelResponseError(message)
    return error


def model_error(exc: BaseException, *, max_retry_wait: float | None = None) -> ModelError:
    """The ``ModelError`` that stands for ``exc``."""
    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, TransportError):
        return ModelConnectionError(f"cannot reach the model endpoint: {exc}")
    if isinstance(exc, HttpStatusError):
        return status_error(
            exc.status, exc.code, exc.message, exc.headers, max_retry_wait=max_retry_wait
        )
    if isinstance(exc, EventError):
        if is_context_length_error(exc.code, str(exc)):
            return context_error(exc.code, str(exc))
        return ModelResponseError(str(exc))
    if isinstance(exc, json.JSONDecodeError):  # orjson's too: a cut or garbled body
        return IncompleteResponse(f"the response is not valid JSON: {exc}")
    return ModelResponseError(f"unusable model response: {type(exc).__name__}: {exc}")
