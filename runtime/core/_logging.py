"""structlog set up once, for the CLI and for embedding applications that want ours.

A command that may well log nothing (``stowage list``) sets it up lazily: structlog, a tenth of
that command's start, is imported and configured at the first line a ``get_logger`` logger
logs, if one ever does.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Any, Literal

__all__ = ["configure_logging", "get_logger"]

#: the configuration ``configure_logging(..., lazily=True)`` left for the first log line, and
#: the lock that keeps a line logged in another thread meanwhile from going out unconfigured
_deferred: list[Callable[[], None]] = []
_deferring = threading.Lock()


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time, so a live display that redirects stderr
    (rich does) prints log lines above itself."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(
    fmt: Literal["console", "json"] = "console",
    level: str = "warning",
    *,
    quiet: Collection[str] = (),
    tap: Callable[[str, Mapping[str, Any]], None] | None = None,
    lazily: bool = False,
) -> None:
    """Send structlog output to stderr as console lines or JSON objects, at ``level``.

    ``quiet``: event names not printed as warnings or errors (something else reports them once,
    such as the command line's own error line); ``tap`` sees every event at or above
    ``level`` first, printed or not (a status line shows retries with it). ``lazily``: when
    structlog is not imported yet, import and configure it at the first line a ``get_logger``
    logger logs (for a program whose every logger is one).
    Raises ``ValueError`` for an unknown format or level.
    """
    if fmt not in ("console", "json"):
        raise ValueError(f"log format must be 'console' or 'json', got {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}: use debug, info, warning or error")
    configure = functools.partial(_configure, fmt, numeric, frozenset(quiet), tap)
    with _deferring:
        _deferred.clear()
        if lazily and "structlog" not in sys.modules:
            _deferred.append(configure)
            return
    configure()


def get_logger(name: str) -> Any:
    """``structlog.get_logger(name)``, made when it is first used: structlog is imported then,
    configured first if ``configure_logging(..., lazily=True)`` left it so."""
    return _LazyLogger(name)


class _LazyLogger:
    """A structlog logger made at its first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            with _deferring:
                while _deferred:
                    _deferred.pop()()
            import structlog

            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, attr)


def _configure(
    fmt: str,
    numeric: int,
    quiet_names: frozenset[str],
    tap: Callable[[str, Mapping[str, Any]], None] | None,
) -> None:
    import structlog

    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )

    def tap_and_quiet(
        logger: Any, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        name = str(event_dict.get("event", ""))
        if tap is not None:
            tap(name, event_dict)
        if name in quiet_names and method in ("warning", "warn", "error"):
            raise structlog.DropEvent
        return event_dict

    printer = structlog.PrintLogger(file=_CurrentStderr())  # type: ignore[arg-type]
    structlog.configure(
        processors=[
            tap_and_quiet,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # one printer for every logger: each live session binds a few loggers, and a factory
        # making a printer per bind would give every session its own
        logger_factory=lambda *_args: printer,
        cache_logger_on_first_use=False,
    )
