"""An SDK's typed stream read as plain JSON events: what the openai and anthropic paths share."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

from stowage.core import ModelError

__all__ = ["SdkEvents"]


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
