"""structlog set up once, for the CLI and for embedding applications that want ours."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Any, Literal

import structlog

__all__ = ["configure_logging"]


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time, so a live progress display that
    redirects stderr (rich does) prints log lines above itself instead of tearing it."""

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
) -> None:
    """Send structlog output to stderr as console lines or JSON objects, at ``level``.

    ``quiet``: event names not printed as warnings or errors (something else reports them once,
    such as the command line's own error line); ``tap`` sees every event at or above
    ``level`` first, printed or not (a status line shows retries with it).
    Raises ``ValueError`` for an unknown format or level.
    """
    if fmt not in ("console", "json"):
        raise ValueError(f"log format must be 'console' or 'json', got {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}: use debug, info, warning or error")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    quiet_names = frozenset(quiet)

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
