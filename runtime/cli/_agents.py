"""AGENTS.md: a project's standing instructions, read into a new session's system message.

As in other coding agents, ``AGENTS.md`` in the working directory (or the file ``--agents FILE``
names; ``--no-agents`` reads none) is appended to the system message of a session when it is
created, under a heading that says where it came from. It is part of the session from then on
(logged with its first records, kept verbatim through every compaction as the system message
is), so a resumed session keeps what it was started with even when the file changed since.
``stowage context`` shows it as a part of its own (``split_agents``).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["AGENTS_FILE", "agents_text", "split_agents", "system_with_agents"]

AGENTS_FILE = "AGENTS.md"

#: the heading the instructions stand under in the system message
_HEADING = "# AGENTS.md: instructions from {path}"
_HEADING_AT = re.compile(r"(?:^|\n\n)# AGENTS\.md: instructions from [^\n]*\n")


def agents_text(given: str | None, *, cwd: Path | None = None) -> tuple[Path, str] | None:
    """The instructions to read: the file ``given`` names (``--agents FILE``; ``""`` for
    ``--no-agents``), else ``AGENTS.md`` in ``cwd`` when there is one; None for none. Raises
    ``ConfigError`` naming the file when it cannot be read as UTF-8 text (a missing ``--agents``
    file included; a missing AGENTS.md is simply none)."""
    from stowage.core import ConfigError

    if given == "":
        return None
    path = Path(given) if given is not None else (cwd or Path.cwd()) / AGENTS_FILE
    if given is None and not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        option = f"--agents {given}" if given is not None else str(path)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"{option}: cannot read it: {reason} (name a UTF-8 text file, or --no-agents)"
        ) from None
    return path.resolve(), text.strip()


def system_with_agents(system: str | None, given: str | None) -> str | None:
    """The system message of a new session: ``system`` and then the instructions of
    ``agents_text(given)`` under their heading. Raises what ``agents_text`` raises."""
    found = agents_text(given)
    if found is None or not found[1]:
        return system
    path, text = found
    block = _HEADING.format(path=path) + "\n\n" + text
    return f"{system}\n\n{block}" if system else block


def split_agents(system: str) -> tuple[str, str]:
    """A system message as its own text and the AGENTS.md block after it (``""`` when it has
    none). Raises nothing."""
    found = _HEADING_AT.search(system)
    if found is None:
        return system, ""
    return system[: found.start()], system[found.start() :]
