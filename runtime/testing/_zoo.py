"""A model zoo: in-process gateways that behave like real models where naive compaction breaks.

Each member is deterministic from a seed and stateless like a real model: every answer is a
function of the request alone (and of the seed and the member's knobs), never of earlier
requests. So a member that no longer sees a file's whole output reads it again, as real agents
do, and a compaction that absorbs what the turn needs shows up as a loop, not as a model quirk.

A shared base enforces a real context window. The size of a request is counted as the
characters of every input item (text, output, call name and arguments) plus the JSON of the
tool schemas, at 4 characters a token (``scripted_usage``'s rule); a request above
``window - max_output_tokens`` is refused with ``ContextLengthExceeded`` and counted. Every
request is recorded (``ZooRequest``) for the invariant checks.

Workspace files the members read are written by ``write_zoo_file``: a header line naming the
file, its token and its length, and an ``END`` line, so a member can tell from the request
alone whether a file's whole output is visible (a stub or a summary does not count).

``ZooHarness`` drives one ``Runtime`` through the public API only (sessions, turns, manual
compactions, approvals, interrupts, restarts) and checks the compaction promises after each
step from what the gateway received and what the store holds; a check that fails is a
``Violation``, never an exception, so a run reports every kind it found.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypeAlias, cast

import anyio
from anyio.abc import TaskGroup, TaskStatus
from stowage.core import (
    AssistantMessage,
    CompactionLoop,
    CompactionRecord,
    CompactionSummary,
    ContextLengthExceeded,
    CorruptLogError,
    Event,
    FunctionCall,
    FunctionCallOutput,
    HistoryCompacted,
    Item,
    Microcompacted,
    MicrocompactRecord,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    RoundCommitted,
    SessionClosed,
    Settings,
    StowageError,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ToolStarted,
    Usage,
    UserMessage,
    replay,
)
from stowage.facade import Runtime, Session, TurnResult
from stowage.model import is_summary_request, scripted_usage
from stowage.policy import PrefixCache, cache_key_for
from stowage.tools import ToolRegistry, tool, workspace_tools

from ._pairing import request_orphan_calls, request_orphan_outputs

__all__ = [
    "CHARS_PER_TOKEN",
    "FINE_STOPS",
    "USAGE_MODES",
    "VIOLATION_KINDS",
    "ZOO_MEMBERS",
    "UsageMode",
    "Violation",
    "ViolationKind",
    "ZooFigures",
    "ZooFile",
    "ZooHarness",
    "ZooModel",
    "ZooBehaviour",
    "ZooRequest",
    "breaks_prefix",
    "irreducible_tokens",
    "request_tokens",
    "write_zoo_file",
    "zoo_behaviour",
    "zoo_member",
    "zoo_settings",
    "zoo_tools",
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

_CHUNK_CHARS = 32
_FILE_NAME = re.compile(r"[\w.-]+\.txt")
_HEADER = re.compile(r"FILE (\S+) token=(\w+) chars=(\d+)\n")
#: the tool the approval member calls; ``zoo_tools`` registers it with ``needs_approval``
GUARDED_TOOL = "guarded"


def request_tokens(request: ModelRequest) -> int:
    """The zoo's size of ``request``: input items and tool schemas at 4 characters a token.
    Raises nothing."""
    return scripted_usage(request, ()).input_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class ZooRequest:
    """One request a zoo member received: what the checks need, and the request itself."""

    index: int
    purpose: str
    tokens: int
    limit: int
    refused: bool
    call_ids: tuple[str, ...]
    output_ids: tuple[str, ...]
    request: ModelRequest


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


class ZooModel:
    """A ``ModelGateway`` playing zoo members; ``requests`` keeps every request received.

    ``behaviour`` is the member it plays; ``assign`` gives the requests of one prompt-cache
    key (one session) another, so one gateway can host a mixed zoo. Both may change between
    turns.
    """

    def __init__(
        self,
        behaviour: ZooBehaviour | None = None,
        *,
        seed: int = 0,
        window: int = 6000,
        max_output_tokens: int = 500,
        keep_requests: bool = True,
    ) -> None:
        self.behaviour = behaviour or ZooBehaviour()
        self.seed = seed
        self.window = window
        self.max_output_tokens = max_output_tokens
        self.keep_requests = keep_requests
        self.requests: list[ZooRequest] = []
        self.count = 0
        self.refused = 0
        self.input_tokens = 0
        self.cached_tokens = 0
        self._cache = PrefixCache()
        self._assigned: dict[str, ZooBehaviour] = {}
        self._by_key: dict[str | None, list[ZooRequest]] = {}

    def assign(self, cache_key: str | None, behaviour: ZooBehaviour) -> None:
        """Play ``behaviour`` for the requests carrying ``cache_key``."""
        if cache_key is None:
            self.behaviour = behaviour
        else:
            self._assigned[cache_key] = behaviour

    def behaviour_for(self, cache_key: str | None) -> ZooBehaviour:
        """The member played for requests carrying ``cache_key``."""
        return self._assigned.get(cache_key or "", self.behaviour)

    def requests_for(self, cache_key: str | None) -> list[ZooRequest]:
        """The recorded requests that carried ``cache_key``, in order."""
        return self._by_key.get(cache_key, [])

    @property
    def limit(self) -> int:
        """The most tokens a request may carry: the window less the output reserve."""
        return self.window - self.max_output_tokens

    async def create(self, request: ModelRequest) -> ModelResponse:
        """The member's answer to ``request``. Raises ``ContextLengthExceeded`` when the
        request is above ``limit`` (stating its tokens and the limit)."""
        tokens = request_tokens(request)
        behaviour = self.behaviour_for(request.cache_key)
        refused = tokens > self.limit
        index = self._record(request, tokens, refused)
        if refused:
            self.refused += 1
            raise ContextLengthExceeded(
                f"This model's maximum context length is {self.window} tokens; the request "
                f"carries {tokens} input tokens, above the {self.limit} left after "
                f"{self.max_output_tokens} reserved for output",
                tokens=tokens,
                limit=self.limit,
            )
        if is_summary_request(request):
            if behaviour.summary_delay > 0:
                await anyio.sleep(behaviour.summary_delay)  # simulated latency of a summary
            items: tuple[AssistantMessage | FunctionCall, ...] = (
                AssistantMessage(text=_summary(request)),
            )
        else:
            if behaviour.round_delay > 0:
                await anyio.sleep(behaviour.round_delay)  # simulated latency of a round
            items = _answer(request, behaviour, seed=self.seed, serial=index)
        return ModelResponse(
            items=items,
            usage=self._usage(request, tokens, items, behaviour.usage),
            model=behaviour.name,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The answer's text in chunks, then one ``ResponseDone``; raises as ``create``."""
        response = await self.create(request)
        text = response.text
        for start in range(0, len(text), _CHUNK_CHARS):
            yield TextDelta(text=text[start : start + _CHUNK_CHARS])
        yield ResponseDone(response=response)

    async def aclose(self) -> None:
        """Nothing to release."""

    def _record(self, request: ModelRequest, tokens: int, refused: bool) -> int:
        """Count (and keep) ``request``; returns its index among every request received."""
        index = self.count
        self.count += 1
        if not self.keep_requests:
            return index
        seen = ZooRequest(
            index=index,
            purpose="summary" if is_summary_request(request) else "round",
            tokens=tokens,
            limit=self.limit,
            refused=refused,
            call_ids=tuple(i.call_id for i in request.input if isinstance(i, FunctionCall)),
            output_ids=tuple(i.call_id for i in request.input if isinstance(i, FunctionCallOutput)),
            request=request,
        )
        self.requests.append(seen)
        self._by_key.setdefault(request.cache_key, []).append(seen)
        return index

    def _usage(
        self,
        request: ModelRequest,
        tokens: int,
        items: tuple[AssistantMessage | FunctionCall, ...],
        mode: UsageMode,
    ) -> Usage | None:
        output = scripted_usage(request, items).output_tokens
        hit = self._cache.serve(request, input_tokens=tokens)
        self.input_tokens += tokens
        self.cached_tokens += hit.cached_tokens
        match mode:
            case "none":
                return None
            case "zero":
                return Usage(input_tokens=0, output_tokens=0, total_tokens=0)
            case "half":
                reported = tokens // 2
            case "double":
                reported = tokens * 2
            case _:
                reported = tokens
        cached = min(hit.cached_tokens, reported)
        return Usage(
            input_tokens=reported,
            output_tokens=output,
            total_tokens=reported + output,
            cached_tokens=cached,
        )


def _answer(
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


def _summary(request: ModelRequest) -> str:
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


def zoo_member(
    name: str,
    *,
    seed: int = 0,
    window: int = 6000,
    max_output_tokens: int = 500,
    keep_requests: bool = True,
) -> ZooModel:
    """A gateway playing the zoo member called ``name`` (see ``zoo_behaviour``) on a window of
    ``window`` tokens. Raises ``ValueError`` for an unknown name."""
    return ZooModel(
        zoo_behaviour(name),
        seed=seed,
        window=window,
        max_output_tokens=max_output_tokens,
        keep_requests=keep_requests,
    )


# ---------------------------------------------------------------------------------------------
# the harness: drive sessions through the public API and check the promises after each step

ViolationKind: TypeAlias = Literal[
    "refused", "stopped", "orphan_call", "orphan_output", "grew", "replay", "prefix_break"
]
VIOLATION_KINDS: tuple[ViolationKind, ...] = (
    "refused",
    "stopped",
    "orphan_call",
    "orphan_output",
    "grew",
    "replay",
    "prefix_break",
)
#: how a turn may end without breaking a promise
FINE_STOPS = frozenset({"answered", "pending_approval", "interrupted"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """A broken promise: its kind, the session, and the figures that show it."""

    kind: ViolationKind
    session_id: str
    detail: str


@dataclass(slots=True)
class ZooFigures:
    """What a harness run did, summed over its sessions."""

    sessions: int = 0
    turns: int = 0
    rounds: int = 0
    full: int = 0
    fallback: int = 0
    micro: int = 0
    prefix_breaks: int = 0
    stopped: int = 0
    #: turns stopped as a real loop: what they read at once could not fit (not violations)
    loops: int = 0


def _turn_text(request: ModelRequest) -> str | None:
    """The newest user message of ``request``: the turn it belongs to."""
    users = [i.text for i in request.input if isinstance(i, UserMessage)]
    return users[-1] if users else None


def irreducible_tokens(request: ModelRequest) -> int:
    """Tokens of what no compaction can take out of ``request``: system and protected-state
    messages, the newest user message and the newest round (its calls and outputs), with the
    tool schemas. Raises nothing."""
    items = request.input
    last_user = max((n for n, i in enumerate(items) if isinstance(i, UserMessage)), default=-1)
    keep: list[Item] = [i for i in items if isinstance(i, SystemMessage)]
    if last_user >= 0:
        keep.append(items[last_user])
    start = len(items)
    while start - 1 > last_user and isinstance(items[start - 1], FunctionCallOutput):
        start -= 1
    while start - 1 > last_user and isinstance(items[start - 1], FunctionCall | AssistantMessage):
        start -= 1
    keep.extend(items[start:])
    return request_tokens(replace(request, input=tuple(keep)))


def breaks_prefix(previous: ModelRequest, current: ModelRequest) -> bool:
    """Whether ``current`` changed anything of ``previous`` but its appended tail (a provider's
    prompt cache misses from there on). Raises nothing."""
    head = previous.input
    return current.input[: len(head)] != head or current.tools != previous.tools


class ZooHarness:
    """One ``Runtime`` over a zoo gateway, its sessions, and the checks after every step.

    ``async with ZooHarness(gateway, settings) as h``; ``settings`` should name the window and
    output reserve the gateway enforces (``zoo_settings`` makes such settings). Each step
    method returns nothing: an outcome that breaks a promise is added to ``violations``.
    """

    def __init__(self, gateway: ZooModel, settings: Settings) -> None:
        self.gateway = gateway
        self.settings = settings
        self.violations: list[Violation] = []
        # turns that stopped since the last check: reported by the next one
        self._stops: list[Violation] = []
        #: sessions told usage at twice the gateway's own count at some point: stowage
        #: believes the provider, so its window holds half as much for them
        self._doubled: set[str] = set()
        self.figures = ZooFigures()
        self.runtime: Runtime | None = None
        self.sessions: dict[str, Session] = {}
        self._stack = contextlib.AsyncExitStack()
        self._tasks: TaskGroup | None = None
        # set to stop the runtime's host task, and by it once the runtime is closed
        self._stop: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        # per session: gateway request counts at each compaction event, and check progress
        self._marks: dict[str, list[int]] = {}
        self._checked: dict[str, int] = {}
        self._checked_seq: dict[str, int] = {}
        self._previous_round: dict[str, ZooRequest] = {}
        # a log that cannot be replayed stays so: say it once, not after every later step
        self._replay_reported: set[tuple[str, str]] = set()

    async def __aenter__(self) -> ZooHarness:
        self._tasks = await self._stack.enter_async_context(anyio.create_task_group())
        await self._start_runtime()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self._stop_runtime()
        finally:
            await self._stack.aclose()

    async def _start_runtime(self) -> Runtime:
        # the runtime lives in a task of its own, so that steps (and a restart) may come from
        # any task: a task group must be left in the task that entered it
        if self._tasks is None:
            raise SessionClosed("the zoo harness is not entered")
        self._stop = stop = anyio.Event()
        self._stopped = stopped = anyio.Event()
        await self._tasks.start(self._host, stop, stopped)
        return self._runtime()

    async def _host(
        self,
        stop: anyio.Event,
        stopped: anyio.Event,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            tools = zoo_tools(self.settings)
            async with Runtime(self.settings, gateway=self.gateway, tools=tools) as runtime:
                runtime.subscribe(self._on_event)
                self.runtime = runtime
                task_status.started()
                await stop.wait()
        finally:
            self.runtime = None
            stopped.set()

    async def _stop_runtime(self) -> None:
        if self._stop is not None and self._stopped is not None:
            self._stop.set()
            await self._stopped.wait()

    def _on_event(self, event: Event) -> None:
        if isinstance(event, HistoryCompacted | Microcompacted):
            self._marks.setdefault(event.session_id, []).append(self.gateway.count)

    def _runtime(self) -> Runtime:
        if self.runtime is None:
            raise SessionClosed("the zoo harness is not running")
        return self.runtime

    async def create(
        self,
        session_id: str,
        *,
        system: str | None = None,
        behaviour: ZooBehaviour | None = None,
    ) -> Session:
        """Start session ``session_id``, talking to ``behaviour`` (the gateway's own member
        when None). Raises what ``Runtime.create`` raises."""
        if behaviour is not None:
            self.gateway.assign(cache_key_for(self.settings, session_id), behaviour)
        session = await self._runtime().create(session_id, system=system)
        self.sessions[session_id] = session
        if self.behaviour_of(session_id).usage == "double":
            self._doubled.add(session_id)
        self.figures.sessions += 1
        return session

    async def send(self, session_id: str, text: str) -> TurnResult | None:
        """Run one turn (first deciding any pending approval: approve); None when it raised.
        Raises nothing of stowage's: a failed turn is checked, not raised."""
        await self.settle(session_id)
        session = self.sessions[session_id]
        try:
            result = await session.send(text)
        except StowageError as exc:
            self._ended(session_id, None, exc)
            return None
        self._ended(session_id, result, None)
        return result

    async def settle(self, session_id: str) -> None:
        """Approve every call that awaits approval, going on with its turn."""
        for _ in range(8):
            if not self.sessions[session_id].pending_approvals:
                return
            await self.decide(session_id, approve=True)

    async def decide(self, session_id: str, *, approve: bool) -> None:
        """Approve (or deny) the first call awaiting approval, if any; the turn goes on."""
        session = self.sessions[session_id]
        pending = session.pending_approvals
        if not pending:
            return
        call_id = pending[0].call_id
        try:
            if approve:
                result = await session.approve(call_id)
            else:
                result = await session.deny(call_id, reason="the zoo says no")
        except StowageError as exc:
            self._ended(session_id, None, exc, counted=False)
            return
        self._ended(session_id, result, None, counted=False)

    async def interrupt(self, session_id: str, text: str, *, after: int = 1) -> None:
        """Start a turn and stop it after ``after`` tool starts or committed rounds (the turn
        may answer first)."""
        await self.settle(session_id)
        session = self.sessions[session_id]
        seen = 0
        events = cast(AsyncGenerator[Event | TurnResult, None], session.stream(text))
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    if isinstance(event, TurnResult):
                        self._ended(session_id, event, None)
                        return
                    if isinstance(event, ToolStarted | RoundCommitted):
                        seen += 1
                        if seen >= after:
                            break
        except StowageError as exc:
            self._ended(session_id, None, exc)
            return
        self.figures.turns += 1

    async def compact(self, session_id: str) -> bool:
        """Compact by hand; False when nothing was compacted or it failed (a manual compaction
        may fail; no turn stops for it)."""
        try:
            return await self.sessions[session_id].compact()
        except StowageError:
            return False

    async def reopen(self, session_id: str) -> None:
        """Close one session and resume it from its log, in the same runtime."""
        runtime = self._runtime()
        await runtime.close(session_id)
        self.sessions[session_id] = await runtime.resume(session_id)

    async def restart(self) -> None:
        """Close the runtime and resume every session in a new one on the same store."""
        await self._stop_runtime()
        runtime = await self._start_runtime()
        for session_id in list(self.sessions):
            self.sessions[session_id] = await runtime.resume(session_id)

    def _ended(
        self,
        session_id: str,
        result: TurnResult | None,
        error: Exception | None,
        *,
        counted: bool = True,
    ) -> None:
        if counted:
            self.figures.turns += 1
        if result is not None and result.stopped in FINE_STOPS:
            return
        why = f"stopped={result.stopped}" if result is not None else f"{error!r}"
        irreducible, source = self._irreducible(session_id)
        if irreducible is not None and irreducible > self.gateway.limit:
            return  # the turn's own content cannot fit: stopping is the right answer
        churned = isinstance(error, CompactionLoop) or (
            result is not None and result.stopped == "round_limit"
        )
        if churned and (
            # doubled reports (tool schemas included) calibrate stowage down to its lowest
            # ratio, 1.5 chars a token against this gateway's 4: it believes the provider,
            # as its hard mark must (it uses the larger figure), so a turn that reads more
            # than a third of what this gateway would take stops, saying so with figures
            session_id in self._doubled
            # what the turn needs in view at once is above the compaction mark: every
            # compaction must take some of it (and it is read again), so no runtime could
            # finish it below the hard mark; the loop message gives the figures
            or self._needed_tokens(session_id) > self._content_limit(session_id)
        ):
            self.figures.loops += 1
            return
        self.figures.stopped += 1
        self._stops.append(
            Violation(
                kind="stopped",
                session_id=session_id,
                detail=(
                    f"turn stopped ({why}) while its irreducible content ({irreducible} tokens, "
                    f"from {source}) fits the {self.gateway.limit} a request may carry"
                ),
            )
        )

    def _irreducible(self, session_id: str) -> tuple[int | None, str]:
        rounds = [r for r in self.requests_of(session_id) if r.purpose == "round"]
        session = self.sessions[session_id]
        if rounds:
            last = rounds[-1].request
            from_request = irreducible_tokens(last)
            from_history = irreducible_tokens(replace(last, input=session.history))
            return min(from_request, from_history), "its last request and its history"
        return None, "no request"

    def _content_limit(self, session_id: str) -> float:
        """Tokens of history a session holds before it must compact: the window less the
        output reserve and the tool schemas (stowage's usable budget), at ``compact_mark``."""
        rounds = [r.request for r in self.requests_of(session_id) if r.purpose == "round"]
        tools = request_tokens(replace(rounds[-1], input=())) if rounds else 0
        return self.settings.compact_mark * (self.gateway.limit - tools)

    def _needed_tokens(self, session_id: str) -> int:
        """Tokens of history the turn in flight needs at once, as this gateway counts them:
        the irreducible rest of its last request (without the tool schemas) with every
        distinct call's largest output of the turn, as its requests carried them
        (compactions may have absorbed them since, and a stopped turn keeps no ledger)."""
        rounds = [r.request for r in self.requests_of(session_id) if r.purpose == "round"]
        if not rounds:
            return 0
        last = rounds[-1]
        base = irreducible_tokens(last) - request_tokens(replace(last, input=()))
        asked = _turn_text(last)
        largest: dict[tuple[str, str], int] = {}
        for request in rounds:
            if _turn_text(request) != asked:
                continue
            calls = {
                i.call_id: (i.name, i.arguments)
                for i in request.input
                if isinstance(i, FunctionCall)
            }
            for item in request.input:
                if isinstance(item, FunctionCallOutput) and item.call_id in calls:
                    key = calls[item.call_id]
                    largest[key] = max(largest.get(key, 0), len(item.output))
        return base + sum(largest.values()) // CHARS_PER_TOKEN

    def requests_of(self, session_id: str) -> list[ZooRequest]:
        """The requests the gateway received for session ``session_id``, in order."""
        return self.gateway.requests_for(cache_key_for(self.settings, session_id))

    def behaviour_of(self, session_id: str) -> ZooBehaviour:
        """The zoo member session ``session_id`` talks to."""
        return self.gateway.behaviour_for(cache_key_for(self.settings, session_id))

    def set_usage(self, session_id: str, usage: UsageMode) -> None:
        """From now on, report usage to session ``session_id`` as ``usage`` says."""
        key = cache_key_for(self.settings, session_id)
        if usage == "double":
            self._doubled.add(session_id)
        self.gateway.assign(key, replace(self.gateway.behaviour_for(key), usage=usage))

    async def check(self, session_id: str) -> list[Violation]:
        """Check what session ``session_id`` sent and logged since the last check (and the turns
        that stopped since); returns the new violations (also added to ``violations``). Raises
        ``StoreError`` when the log cannot be read."""
        found = [v for v in self._stops if v.session_id == session_id]
        self._stops = [v for v in self._stops if v.session_id != session_id]
        found.extend(self._check_requests(session_id))
        found.extend(await self._check_log(session_id))
        self.violations.extend(found)
        return found

    def _check_requests(self, session_id: str) -> list[Violation]:
        found: list[Violation] = []
        requests = self.requests_of(session_id)
        start = self._checked.get(session_id, 0)
        self._checked[session_id] = len(requests)
        marks = self._marks.get(session_id, [])
        for seen in requests[start:]:
            if seen.refused:
                irreducible = irreducible_tokens(seen.request)
                if irreducible <= seen.limit:
                    found.append(
                        Violation(
                            kind="refused",
                            session_id=session_id,
                            detail=(
                                f"{seen.purpose} request {seen.index} carried {seen.tokens} "
                                f"tokens, above the {seen.limit} allowed, though its "
                                f"irreducible content is {irreducible}"
                            ),
                        )
                    )
            for call_id in request_orphan_calls(seen.request):
                found.append(
                    Violation(
                        kind="orphan_call",
                        session_id=session_id,
                        detail=f"{seen.purpose} request {seen.index}: call {call_id} unanswered",
                    )
                )
            for call_id in request_orphan_outputs(seen.request):
                found.append(
                    Violation(
                        kind="orphan_output",
                        session_id=session_id,
                        detail=f"{seen.purpose} request {seen.index}: output {call_id} uncalled",
                    )
                )
            if seen.purpose != "round" or seen.refused:
                continue
            previous = self._previous_round.get(session_id)
            self._previous_round[session_id] = seen
            if previous is None or not breaks_prefix(previous.request, seen.request):
                continue
            self.figures.prefix_breaks += 1
            if not any(previous.index < mark <= seen.index for mark in marks):
                found.append(
                    Violation(
                        kind="prefix_break",
                        session_id=session_id,
                        detail=(
                            f"round request {seen.index} does not start with request "
                            f"{previous.index}'s input and no compaction came in between"
                        ),
                    )
                )
        self.figures.rounds += sum(
            1 for r in requests[start:] if r.purpose == "round" and not r.refused
        )
        return found

    async def _check_log(self, session_id: str) -> list[Violation]:
        found: list[Violation] = []
        store = self._runtime().store
        session = self.sessions[session_id]
        # a plan may land between reading the live history and the log: read until they agree
        for _ in range(5):
            live = session.history
            records = (await store.read(session_id)).records
            tail = (await store.read_tail(session_id)).records
            if session.history == live:
                break
        done = self._checked_seq.get(session_id, 0)
        for record in records:
            if record.seq <= done:
                continue
            if isinstance(record, CompactionRecord):
                if record.kind == "full":
                    self.figures.full += 1
                else:
                    self.figures.fallback += 1
            elif isinstance(record, MicrocompactRecord):
                self.figures.micro += 1
            else:
                continue
            before, after = record.tokens_before, record.tokens_after
            if before is not None and after is not None and after >= before:
                found.append(
                    Violation(
                        kind="grew",
                        session_id=session_id,
                        detail=(
                            f"{type(record).__name__} at seq {record.seq} went from {before} "
                            f"to {after} tokens"
                        ),
                    )
                )
        self._checked_seq[session_id] = records[-1].seq if records else 0
        for name, part in (("log", records), ("tail", tail)):
            try:
                replayed = replay(session_id, part).items
            except CorruptLogError as exc:
                detail = f"replay of the {name} fails: {exc}"
                if (session_id, detail) not in self._replay_reported:
                    self._replay_reported.add((session_id, detail))
                    found.append(Violation(kind="replay", session_id=session_id, detail=detail))
                continue
            if replayed != live:
                found.append(
                    Violation(
                        kind="replay",
                        session_id=session_id,
                        detail=(
                            f"replay of the {name} gives {len(replayed)} items, the live "
                            f"session has {len(live)}"
                        ),
                    )
                )
        return found


def zoo_tools(settings: Settings) -> ToolRegistry:
    """The workspace tools over ``settings.workspace`` and the ``guarded`` tool, which needs
    approval. Raises ``ToolError`` when the workspace is not a directory."""

    @tool(name=GUARDED_TOOL, needs_approval=True)
    async def guarded(note: str = "") -> str:
        """Do something a person must allow first."""
        return f"guarded ran {note}".strip()

    registry = workspace_tools(settings.workspace, settings=settings)
    registry.add(guarded)
    return registry


def zoo_settings(
    store: Path, workspace: Path, *, window: int = 6000, max_output_tokens: int = 500
) -> Settings:
    """Settings for a zoo run: the window and output reserve a zoo gateway enforces, no
    fsync, default compaction policy; a manual compaction that would not shrink history is
    skipped, as ``stowage compact`` does. Raises ``ConfigError`` for a window that is too
    small."""
    return Settings(
        model="zoo",
        store=store,
        workspace=workspace,
        context_window=window,
        max_output_tokens=max_output_tokens,
        durability="none",
    )
