"""An SDK's typed stream read as plain JSON events: what the openai and anthropic paths share."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

from stowage.core import IncompleteResponse, ModelConnectionError, ModelError

from ._http_errors import status_error

__all__ = ["SdkEvents", "sdk_error", "sdk_plain"]


def sdk_plain(value: Any, refused: str) -> Any:
    """A typed SDK object as the plain JSON it came from; ``IncompleteResponse`` if it is none."""
    to_dict = getattr(value, "to_dict", None)
    if not callable(to_dict):
        raise IncompleteResponse(f"{refused}: {type(value).__name__}")
    return to_dict(warnings=False)


def sdk_error(
    exc: BaseException, sdk: Any, code: object, *, max_retry_wait: float | None
) -> ModelError | None:
    """The ``ModelError`` for what both SDKs raise alike (no connection, an error status), or
    None; ``sdk`` is the SDK's module, ``code`` the error code a status error carries."""
    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, sdk.APIConnectionError):  # includes APITimeoutError
        return ModelConnectionError(f"cannot reach the model endpoint: {exc}")
    if isinstance(exc, sdk.APIStatusError):
        headers = exc.response.headers
        return status_error(
            exc.status_code, code, str(exc.message), headers, max_retry_wait=max_retry_wait
        )
    return None


class SdkEvents:
    """An SDK's typed stream as plain JSON events, used like ``JsonEventStream``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        response = getattr(stream, "response", None)
        status = getattr(response, "status_code", None)
        #: the HTTP status of the stream's response, if it can be read
        self.status: int | None = status if isinstance(status, int) else None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stream.close()

    def sdk_errors(self) -> tuple[type[Exception], ...]:  # the SDK's own, raised as they are
        raise NotImplementedError

    def broken(self, exc: Exception) -> Exception:  # what a transport failure is raised as
        raise NotImplementedError

    def plain_event(self, event: Any) -> Any:  # raises what an error event stands for
        raise NotImplementedError

    async def next_events(self) -> list[Any] | None:
        """The next event as a batch of one, or None at the end of the stream."""
        passes: tuple[type[Exception], ...] = (ModelError, ValueError, TypeError, KeyError)
        try:
            event = await anext(self._stream)
        except StopAsyncIteration:
            return None
        except passes + self.sdk_errors():
            raise
        except Exception as exc:  # the transport's own error classes: a broken stream
            raise self.broken(exc) from exc
        return [self.plain_event(event)]
