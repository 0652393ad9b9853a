"""How long a server asks us to wait, from every header that says so.

Providers and the proxies in front of them say it in different words: ``Retry-After``
(seconds or an HTTP date), ``retry-after-ms``, LiteLLM's ``llm_provider-*`` copies of the
provider's own headers, and OpenAI's ``x-ratelimit-reset-requests`` / ``-tokens`` (durations
such as ``1s``, ``6m0s``, ``250ms``), and Anthropic's ``anthropic-ratelimit-*-reset`` (an
RFC 3339 time). The longest wait that applies wins: a reset applies only to a limit that is
used up (its ``x-ratelimit-remaining-*`` or ``anthropic-ratelimit-*-remaining`` is 0 or not
given).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

__all__ = ["parse_duration", "parse_retry_after", "requested_wait"]

_PROXY_PREFIX = "llm_provider-"
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta seconds or an HTTP date), or None."""
    if value is None or not value.strip():
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def parse_duration(value: str | None) -> float | None:
    """Seconds of a duration such as ``6m0s``, ``250ms`` or a bare number; None if not one."""
    if value is None:
        return None
    text = value.strip().lower()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    position, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return seconds if position == len(text) else None


def _millis(value: str | None) -> float | None:
    try:
        return None if value is None else max(0.0, float(value) / 1000)
    except ValueError:
        return None


def _until(value: str | None, now: float | None) -> float | None:
    """Seconds until an RFC 3339 time (Anthropic's resets), or None when it is not one."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _exhausted(headers: Mapping[str, str], remaining: str) -> bool:
    value = headers.get(remaining)
    if value is None:
        return True
    try:
        return float(value) <= 0
    except ValueError:
        return True


def _waits(headers: Mapping[str, str], now: float | None) -> list[float | None]:
    waits = [
        _millis(headers.get("retry-after-ms")),
        parse_retry_after(headers.get("retry-after"), now=now),
    ]
    for kind in ("requests", "tokens"):
        if _exhausted(headers, f"x-ratelimit-remaining-{kind}"):
            waits.append(parse_duration(headers.get(f"x-ratelimit-reset-{kind}")))
    for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
        prefix = f"anthropic-ratelimit-{kind}"
        if f"{prefix}-reset" in headers and _exhausted(headers, f"{prefix}-remaining"):
            waits.append(_until(headers[f"{prefix}-reset"], now))
    return waits


def requested_wait(
    headers: Mapping[str, str], *, cap: float | None = None, now: float | None = None
) -> float | None:
    """The longest wait any of ``headers`` asks for (None: none does), at most ``cap``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    proxied = {
        k.removeprefix(_PROXY_PREFIX): v for k, v in lowered.items() if k.startswith(_PROXY_PREFIX)
    }
    waits = [w for w in (*_waits(lowered, now), *_waits(proxied, now)) if w is not None]
    if not waits:
        return None
    wait = max(waits)
    return wait if cap is None else min(cap, wait)
