"""Credentials never reach a log, an event or an output: URLs are redacted before recording.

A base URL can carry a secret in two places: user-info (``https://user:pass@host/``) and the
query (``?key=…``, ``?api_key=…``, ``?token=…``). The original URL is used only for the request;
everything that is written, logged or shown gets the redacted form.
"""

from __future__ import annotations

import re
import shlex
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["REDACTED", "redact_command", "redact_url"]

REDACTED = "REDACTED"

# Query parameter names that carry a credential (matched case-insensitively, as whole words
# within the name: "api_key", "apikey", "access_token", "sig", "X-Amz-Signature", ...).
_SECRET_PARAM = re.compile(
    r"(key|token|secret|password|passwd|pwd|auth|sig|signature|credential|session)", re.IGNORECASE
)


def redact_url(url: str | None) -> str | None:
    """``url`` with user-info and secret-looking query values replaced by ``REDACTED``.

    A string that does not parse as a URL has anything before an ``@`` in its first part hidden.
    Raises nothing.
    """
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return _hide_before_at(url)
    if not parts.netloc and "@" in url:
        return _hide_before_at(url)  # "user:pw@host/x": no scheme, so no netloc to parse
    netloc = parts.netloc
    if "@" in netloc:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{REDACTED}@{host}" + (f":{port}" if port is not None else "")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(name, REDACTED if _SECRET_PARAM.search(name) else value) for name, value in pairs],
            safe=REDACTED,
        )
    if netloc == parts.netloc and query == parts.query:
        # nothing hidden: the text as given, since rebuilding it drops the empty authority
        # of ``sqlite:////abs/path`` and ``sqlite:///rel`` and names another file
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _hide_before_at(text: str) -> str:
    head, sep, tail = text.partition("/")
    if "@" in head:
        head = f"{REDACTED}@" + head.rpartition("@")[2]
    return head + sep + tail


def redact_command(command: str) -> str:
    """A command line (an MCP server's) as it may be recorded."""
    try:
        words = shlex.split(command)
    except ValueError:
        return REDACTED
    shown: list[str] = []
    secret_next = False
    for word in words:
        name, eq, _ = word.partition("=")
        if secret_next:
            shown.append(REDACTED)
        elif eq and _SECRET_PARAM.search(name):
            shown.append(f"{name}={REDACTED}")
        elif "://" in word:
            shown.append(redact_url(word) or word)
        else:
            shown.append(word)
        secret_next = word.startswith("-") and not eq and bool(_SECRET_PARAM.search(word))
    return shlex.join(shown)
