"""What each zoo member is and what it answers: pure functions of the request alone.

Every member is deterministic from a seed and stateless like a real model: every answer is a
function of the request (and of the seed and the member's knobs), never of earlier requests.
So a member that no longer sees a file's whole output reads it again, as real agents do, and a
compaction that absorbs what the turn needs shows up as a loop, not as a model quirk.

Workspace files the members read are written by ``write_zoo_file``: a header line naming the
file, its token and its length, and an ``END`` line, so a member can tell from the request
alone whether a file's whole output is visible (a stub or a summary does not count).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ModelRequest,
    UserMessage,
)
from stowage.model import scripted_usage

__all__ = [
    "CHARS_PER_TOKEN",
    "GUARDED_TOOL",
    "USAGE_MODES",
    "ZOO_MEMBERS",
    "UsageMode",
    "ZooBehaviour",
    "ZooFile",
    "member_answer",
    "member_summary",
    "request_tokens",
    "write_zoo_file",
    "zoo_behaviour",
]

#: the zoo's token rule: characters of input items and tool schemas over 4
CHARS_PER_TOKEN = 4

UsageMode: TypeAlias = Literal["exact", "none", "zero", "half", "double"]
USAGE_MODES: tuple[UsageMode, ...] = ("exact", "none", "zero", "half", "double")

#: the zoo's members by name (see ``zoo_member``)
ZOO_MEMBERS: tuple[str, ...] = (
    "rereader",
    "bursty",
    "huge_output",
    "no_usage",
    "zero_usage",
    "usage_half",
    "usage_double",
    "slow_summary",
    "approval",
    "interrupt",
)

_FILE_NAME = re.compile(r"[\w.-]+\.txt")
_HEADER = re.compile(r"FILE (\S+) token=(\w+) chars=(\d+)\n")
#: the tool the approval member calls; ``zoo_tools`` registers it with ``needs_approval``
GUARDED_TOOL = "guarded"


def request_tokens(request: ModelRequest) -> int:
    """The zoo's size of ``request``: input items and tool schemas at 4 characters a token.
    Raises nothing."""
    return scripted_usage(request, ()).input_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class ZooFile:
    """A workspace file written for the zoo: its name, its token and its length in chars."""

    name: str
    token: str
    chars: int


def write_zoo_file(root: Path, name: str, *, tokens: int, seed: int = 0) -> ZooFile:
    """Write ``root/name`` with about ``tokens`` tokens of text (4 chars a token): a header
    line, filler, and an ``END`` line carrying the file's token. Raises ``OSError``."""
    token = hashlib.sha256(f"{seed}:{name}".encode()).hexdigest()[:10]
    chars = max(tokens * CHARS_PER_TOKEN, 80)
    footer = f"\nEND {name} {token}\n"
    # the header states the total length, whose digits change the header's own length
    header = f"FILE {name} token={token} chars={chars:08d}\n"
    rng = random.Random(f"{seed}:{name}:body")
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    body_chars = chars - len(header) - len(footer)
    parts: list[str] = []
    size = 0
    while size < body_chars:
        word = rng.choice(words) + (" " if rng.random() < 0.9 else "\n")
        parts.append(word)
        size += len(word)
    body = "".join(parts)[: max(body_chars, 0)]
    text = header + body + footer
    (root / name).write_text(text, encoding="ascii")
    return ZooFile(name=name, token=token, chars=len(text))


def _complete(output: str, name: str, *, partial_ok: bool) -> bool:
    """Whether ``output`` shows file ``name`` whole (or, with ``partial_ok``, at least its
    head: a capped huge output is all a model ever gets of it)."""
    match = _HEADER.match(output)
    if match is None or match.group(1) != name:
        return False
    if partial_ok:
        return True
    return len(output) >= int(match.group(3)) and f"END {name} {match.group(2)}" in output


def _file_token(output: str) -> str:
    match = _HEADER.match(output)
    return match.group(2) if match else "?"


@dataclass(frozen=True, slots=True, kw_only=True)
class ZooBehaviour:
    """How a zoo member behaves. None of it is memory of requests: ``usage`` is how usage is
    reported (``exact``, ``none``, ``zero``, ``half``, ``double``); ``burst`` reads several
    missing files in one round (parallel calls); ``summary_delay`` and ``round_delay`` are
    simulated latency in seconds; ``approval`` calls the ``guarded`` tool mid-turn when the
    user message names it."""

    name: str = "rereader"
    usage: UsageMode = "exact"
    burst: bool = False
    summary_delay: float = 0.0
    round_delay: float = 0.0
    approval: bool = False


def member_answer(
    request: ModelRequest, behaviour: ZooBehaviour, *, seed: int, serial: int
) -> tuple[AssistantMessage | FunctionCall, ...]:
    """Read the first named file not visible whole (several in a burst), call the guarded
    tool mid-turn when asked, else answer quoting each file's token. ``serial`` only makes
    call ids unique, as a provider does: what to call is decided from the request alone."""
    items = request.input
    last_user = max((n for n, i in enumerate(items) if isinstance(i, UserMessage)), default=-1)
    newest = items[last_user] if last_user >= 0 else None
    text = newest.text if isinstance(newest, UserMessage) else ""
    names = list(dict.fromkeys(_FILE_NAME.findall(text)))
    calls = {i.call_id: i for i in items if isinstance(i, FunctionCall)}
    outputs = [i for i in items if isinstance(i, FunctionCallOutput)]
    seen: dict[str, str] = {}
    for output in outputs:
        call = calls.get(output.call_id)
        path = _read_path(call)
        if path is None or path in seen:
            continue
        if _complete(output.output, path, partial_ok=path.startswith("huge")):
            seen[path] = output.output
    missing = [n for n in names if n not in seen]
    digest = hashlib.sha256(f"{seed}:{items!r}".encode()).hexdigest()
    rng = random.Random(digest)
    new_calls: list[FunctionCall] = []
    # mid-turn: once something was read (or nothing is to be read)
    mid_turn = len(seen) >= 1 or not names
    wants_guarded = behaviour.approval and GUARDED_TOOL in text and mid_turn
    if wants_guarded and not _guarded_done(items, last_user):
        new_calls.append(
            FunctionCall(
                call_id=f"call_{serial}_g",
                name=GUARDED_TOOL,
                arguments=json.dumps({"note": "zoo"}),
            )
        )
    if missing:
        take = rng.randint(1, len(missing)) if behaviour.burst else 1
        for n, path in enumerate(missing[:take]):
            args: dict[str, object] = {"path": path}
            if path.startswith("huge"):
                args["limit"] = 1_000_000  # the workspace cap bounds it
            new_calls.append(
                FunctionCall(
                    call_id=f"call_{serial}_{n}",
                    name="read_file",
                    arguments=json.dumps(args),
                )
            )
    if new_calls:
        return tuple(new_calls)
    quoted = " ".join(f"{n}:{_file_token(seen[n])}" for n in names)
    return (AssistantMessage(text=f"done {quoted}".strip()),)


def _read_path(call: FunctionCall | None) -> str | None:
    if call is None or call.name != "read_file":
        return None
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return None
    path = args.get("path") if isinstance(args, dict) else None
    return path if isinstance(path, str) else None


def _guarded_marker(ask: str) -> str:
    """What a summary says of a turn (named by its user message) that called the guarded
    tool: the member reads it back, so a compaction does not make it ask twice."""
    return f"called {GUARDED_TOOL} for: {ask[:80]}"


def _guarded_done(items: tuple[Item, ...], last_user: int) -> bool:
    """Whether the turn already called the guarded tool: its call is in the turn's part of
    the request, or a summary says it was called."""
    newest = items[last_user] if last_user >= 0 else None
    if isinstance(newest, UserMessage):
        marker = _guarded_marker(newest.text)
        if any(isinstance(i, CompactionSummary) and marker in i.text for i in items):
            return True
    return any(
        isinstance(i, FunctionCall) and i.name == GUARDED_TOOL for i in items[last_user + 1 :]
    )


def _guarded_asks(request: ModelRequest) -> list[str]:
    """The user messages of the turns that called the guarded tool, in the request's items
    or in a transcript rendered as text (``[user] ...``, ``[tool call] guarded(...)``)."""
    asks: list[str] = []
    ask = ""
    for item in request.input:
        if isinstance(item, UserMessage):
            ask = item.text
            for line in item.text.splitlines():
                if line.startswith("[user] "):
                    ask = line.removeprefix("[user] ").removeprefix("[pinned] ")
                elif line.startswith(f"[tool call] {GUARDED_TOOL}("):
                    asks.append(ask)
        elif isinstance(item, CompactionSummary):
            asks.extend(
                line.removeprefix(f"called {GUARDED_TOOL} for: ")
                for line in item.text.splitlines()
                if line.startswith(f"called {GUARDED_TOOL} for: ")
            )
        elif isinstance(item, FunctionCall) and item.name == GUARDED_TOOL:
            asks.append(ask)
    return list(dict.fromkeys(asks))


def member_summary(request: ModelRequest) -> str:
    """A short summary built from the request: the user's asks, the files read, and the turns
    that called the guarded tool (one line each, so the member can read them back)."""
    asks = [i.text[:120] for i in request.input if isinstance(i, UserMessage)]
    read = [p for i in request.input if isinstance(i, FunctionCall) and (p := _read_path(i))]
    lines = ["Summary of the work so far."]
    lines.extend(_guarded_marker(ask) for ask in _guarded_asks(request)[-4:])
    if asks:
        lines.append("User asked: " + " | ".join(asks[-2:]))
    if read:
        lines.append("Read: " + ", ".join(dict.fromkeys(read)))
    return "\n".join(lines)[:1500]


def zoo_behaviour(
    name: str, *, summary_delay: float = 0.05, round_delay: float = 0.01
) -> ZooBehaviour:
    """The behaviour of the zoo member called ``name`` (one of ``ZOO_MEMBERS``):
    ``summary_delay`` is used by ``slow_summary``, ``round_delay`` by ``interrupt`` (so an
    interrupt lands mid-turn). Raises ``ValueError`` for an unknown name."""
    match name:
        case "rereader" | "huge_output":
            return ZooBehaviour(name=name)
        case "bursty":
            return ZooBehaviour(name=name, burst=True)
        case "no_usage":
            return ZooBehaviour(name=name, usage="none")
        case "zero_usage":
            return ZooBehaviour(name=name, usage="zero")
        case "usage_half":
            return ZooBehaviour(name=name, usage="half")
        case "usage_double":
            return ZooBehaviour(name=name, usage="double")
        case "slow_summary":
            return ZooBehaviour(name=name, summary_delay=summary_delay)
        case "approval":
            return ZooBehaviour(name=name, approval=True)
        case "interrupt":
            return ZooBehaviour(name=name, round_delay=round_delay)
    raise ValueError(f"unknown zoo member {name!r}; choose one of {', '.join(ZOO_MEMBERS)}")
