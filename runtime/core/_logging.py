"""structlog set up once, for the CLI and for embedding applications that want ours."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

__all__ = ["configure_logging"]


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time, so a live progress display that
    redirects stderr (rich does) prints log lines above itself instead of tearing it."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(fmt: Literal["console", "json"] = "console", level: str = "warning") -> None:
    """Send structlog output to stderr as console lines or JSON objects, at ``level``.

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
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
