"""The scripted model's brain: a pure, deterministic function from request to response.

It behaves enough like an agent to exercise the runtime: a few rounds of plausible tool calls
per user turn, then a short answer built from what the tools returned; and summaries that carry
every goal, error and earlier summary forward, so that facts survive repeated compaction and a
test can check they did. Asked for protected-state updates, it proposes them (see
``_proposals``). With ``loss`` it is deliberately lossy: each summary drops that fraction of its
facts, seeded, so the drift evaluation can show what repeated summaries do.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from stowage.core import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ModelRequest,
    ModelResponse,
    SystemMessage,
    ToolSpec,
    Usage,
    UserMessage,
    updates_block,
)

from ._proposals import asks_for_updates, drop_facts, propose_updates, protected_section

__all__ = [
    "SCRIPTED_RUNS",
    "ScriptedBrain",
    "is_summary_request",
    "scripted_usage",
    "transcript_items",
]

_GOAL_CHARS = 200
_NOTE_CHARS = 160
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_FILE = re.compile(r"[\w./-]*\w\.\w+")
_FILLER = " More detail follows to reach the requested size."
_SECTIONS = ("Goals", "Tools called", "Errors", "Done", "Pending", "Earlier notes")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_summary_request(request: ModelRequest) -> bool:
    """Whether ``request`` asks for a summary: by its purpose, else by its shape, as a server
    that sees only the wire must tell: ``tool_choice="none"`` with no tools, or with the
    session's tools and a user message (the summary instructions) last. Raises nothing."""
    if request.purpose == "summary":
        return True
    if request.tool_choice != "none":
        return False
    return not request.tools or bool(request.input and isinstance(request.input[-1], UserMessage))


def _item_chars(item: Item) -> int:
    match item:
        case FunctionCall(name=name, arguments=arguments):
            return len(name) + len(arguments)
        case FunctionCallOutput(output=output):
            return len(output)
        case _:
            return len(item.text)


def scripted_usage(
    request: ModelRequest, items: Sequence[AssistantMessage | FunctionCall]
) -> Usage:
    """Usage at four characters a token: input items and tool specs in, output items out."""
    specs = (
        json.dumps(
            [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in request.tools
            ],
            sort_keys=True,
        )
        if request.tools
        else ""
    )
    input_tokens = math.ceil((sum(_item_chars(i) for i in request.input) + len(specs)) / 4)
    output_tokens = math.ceil(sum(_item_chars(i) for i in items) / 4)
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedBrain:
    """Deterministic request → response; see the module docstring."""

    tool_rounds: int = 2
    answer_chars: int = 0
    report_usage: bool = True
    #: fraction of the facts each summary drops (0: none), drawn with ``seed``
    loss: float = 0.0
    seed: int = 0

    def __call__(self, request: ModelRequest) -> ModelResponse:
        """The response to ``request``; the same request always gets the same response."""
        if is_summary_request(request):
            items: tuple[AssistantMessage | FunctionCall, ...] = (
                AssistantMessage(text=self._summary(request)),
            )
        else:
            items = self._round(request)
        usage = scripted_usage(request, items) if self.report_usage else None
        return ModelResponse(items=items, usage=usage, model=request.model)

    def _summary(self, request: ModelRequest) -> str:
        transcript = transcript_items(request.input)
        text = scripted_summary(transcript, loss=self.loss, seed=self.seed)
        if asks_for_updates(request):
            ops = propose_updates(transcript, protected_section(request))
            text += "\n\n" + updates_block(ops)
        return text

    def _round(self, request: ModelRequest) -> tuple[AssistantMessage | FunctionCall, ...]:
        start = _last_user_index(request.input)
        turn = request.input[start + 1 :]
        first = request.input[start] if start >= 0 else None
        user_text = first.text if isinstance(first, UserMessage) else ""
        rounds_done = _count_rounds(turn)
        if _worked_on_before_summary(request.input, user_text):
            # a compaction absorbed this turn's earlier rounds: like an agent that reads its
            # summary, answer from it instead of starting the turn's tool work over again
            rounds_done = self.tool_rounds
        if request.tools and rounds_done < self.tool_rounds:
            return tuple(_calls(request, turn, user_text, rounds_done))
        return (AssistantMessage(text=self._answer(user_text, turn)),)

    def _answer(self, user_text: str, turn: Sequence[Item]) -> str:
        names = {i.call_id: i.name for i in turn if isinstance(i, FunctionCall)}
        seen = [
            f"{names.get(i.call_id, 'tool')} -> {_clip(i.output, 40)}"
            for i in turn
            if isinstance(i, FunctionCallOutput)
        ]
        text = f"Answer to: {_clip(user_text, 80) or '(no request)'}."
        if seen:
            text += " Tools: " + "; ".join(seen[-3:]) + "."
        else:
            text += " No tools were needed."
        if len(text) < self.answer_chars:
            text = (text + _FILLER * (1 + self.answer_chars // len(_FILLER)))[: self.answer_chars]
        return text


def _last_user_index(items: Sequence[Item]) -> int:
    for index in range(len(items) - 1, -1, -1):
        if isinstance(items[index], UserMessage):
            return index
    return -1


def _worked_on_before_summary(items: Sequence[Item], user_text: str) -> bool:
    """Whether a summary in ``items`` lists ``user_text`` as the pending work."""
    if not user_text:
        return False
    pending = _clip(user_text, _GOAL_CHARS)
    return any(
        isinstance(i, CompactionSummary) and pending in _previous(i.text).get("Pending", [])
        for i in items
    )


def _count_rounds(turn: Sequence[Item]) -> int:
    rounds, previous_was_call = 0, False
    for item in turn:
        is_call = isinstance(item, FunctionCall)
        if is_call and not previous_was_call:
            rounds += 1
        previous_was_call = is_call
    return rounds


def _calls(
    request: ModelRequest, turn: Sequence[Item], user_text: str, round_index: int
) -> list[FunctionCall]:
    tools = _asked_to_act(request.tools, user_text) or request.tools
    calls_so_far = sum(isinstance(i, FunctionCall) for i in turn)
    count = min(len(tools), 1 + round_index % 2)
    calls = []
    for n in range(count):
        tool = tools[(calls_so_far + n) % len(tools)]
        mark = hashlib.sha1(f"{user_text}|{round_index}|{n}".encode()).hexdigest()[:8]
        arguments = json.dumps(_arguments(tool, request.input, user_text, mark), sort_keys=True)
        digest = hashlib.sha1(
            f"{user_text}|{round_index}|{n}|{tool.name}|{arguments}".encode()
        ).hexdigest()[:8]
        calls.append(
            FunctionCall(
                call_id=f"call_{round_index}_{n}_{digest}", name=tool.name, arguments=arguments
            )
        )
    return calls


def _asked_to_act(tools: Sequence[ToolSpec], user_text: str) -> list[ToolSpec]:
    """The acting tools the user's words ask for ("write", "edit", "run"), in turn order:
    like an agent, the scripted model acts only when asked to and when it may."""
    words = set(_WORD.findall(user_text.lower()))
    return [t for t in tools if t.name in _ACTING and t.name.split("_")[0] in words]


#: the acting tools the scripted model uses when asked to (see ``_acting_arguments``)
_ACTING = ("write_file", "edit_file", "run_command")
#: the file the scripted model's commands append to: one line per command that ran
SCRIPTED_RUNS = "scripted-runs.log"


def _acting_arguments(name: str, items: Sequence[Item], mark: str) -> dict[str, str]:
    """A write of a note named by ``mark``; an edit of the newest note this turn wrote (or
    of one that is not there); a command that appends ``mark`` to ``SCRIPTED_RUNS``: each
    call's effect is its own, so a test can count it."""
    if name == "write_file":
        return {"path": f"notes/{mark}.md", "content": f"note {mark}\nwritten by the model\n"}
    if name == "edit_file":
        written = [
            _path_argument(i.arguments)
            for i in items
            if isinstance(i, FunctionCall) and i.name == "write_file"
        ]
        path = next((p for p in reversed(written) if p), "notes/none.md")
        old = f"note {path.rsplit('/', 1)[-1].removesuffix('.md')}"
        return {"path": path, "old": old, "new": f"edited by {mark}"}
    return {"command": f"echo {mark} >> {SCRIPTED_RUNS} && echo ran {mark}"}


def _arguments(tool: ToolSpec, items: Sequence[Item], user_text: str, mark: str) -> dict[str, str]:
    if tool.name in _ACTING:
        return _acting_arguments(tool.name, items, mark)
    if tool.name == "list_dir":
        return {"path": "."}
    if tool.name == "read_file":
        return {"path": _file_to_read(items, user_text)}
    if tool.name == "search_text":
        words = _WORD.findall(user_text)
        return {"pattern": str(max(words, key=len)) if words else "TODO"}
    return {}


def _file_to_read(items: Sequence[Item], user_text: str = "") -> str:
    """A file the user named (not read yet), else one a listing showed, else README.md."""
    listings = {i.call_id for i in items if isinstance(i, FunctionCall) and i.name == "list_dir"}
    read = {
        _path_argument(i.arguments)
        for i in items
        if isinstance(i, FunctionCall) and i.name == "read_file"
    }
    candidates: list[str] = [
        name
        for i in items
        if isinstance(i, FunctionCallOutput) and i.call_id in listings
        for name in _FILE.findall(i.output)
    ]
    named = [name for name in _FILE.findall(user_text) if name not in read]
    unread = [c for c in candidates if c not in read]
    return (named or unread or candidates or ["README.md"])[0]


def _path_argument(arguments: str) -> str | None:
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    path = value.get("path") if isinstance(value, dict) else None
    return path if isinstance(path, str) else None


def _previous(text: str) -> dict[str, list[str]]:
    """Parse a summary of our own format back into its sections; other text is one note."""
    sections: dict[str, list[str]] = {name: [] for name in _SECTIONS}
    current: str | None = None
    for line in text.splitlines():
        header = line.rstrip(":")
        if line.endswith(":") and header in sections:
            current = header
        elif current and line.startswith("- "):
            sections[current].append(line[2:])
    if not any(sections.values()) and text.strip():
        sections["Earlier notes"].append(_clip(text, 2000))
    return sections


def transcript_items(items: Sequence[Item]) -> list[Item]:
    """The conversation a summary request asks to summarize: its input without the instruction
    message that ends it (a summary request is the session's own request with one user message after
    it)."""
    if items and isinstance(items[-1], UserMessage):
        return list(items[:-1])
    return list(items)


def scripted_summary(items: Sequence[Item], *, loss: float = 0.0, seed: int = 0) -> str:
    """A deterministic summary of ``items`` that keeps every fact of earlier summaries, or
    with ``loss`` drops that fraction of them (goals, errors, done, notes), seeded."""
    body = list(items)
    merged: dict[str, list[str]] = {name: [] for name in _SECTIONS}
    tools: Counter[str] = Counter()

    def add(section: str, entry: str) -> None:
        if entry not in merged[section]:
            merged[section].append(entry)

    last_answer = ""
    pending = ""
    for item in body:
        match item:
            case CompactionSummary(text=text):
                for section, entries in _previous(text).items():
                    if section == "Tools called":
                        for entry in entries:
                            name, _, times = entry.rpartition(" x")
                            tools[name] += int(times) if times.isdigit() else 1
                    elif section != "Pending":
                        for entry in entries:
                            add(section, entry)
                    elif entries:
                        pending = entries[-1]
            case UserMessage(text=text):
                add("Goals", _clip(text, _GOAL_CHARS))
                pending = _clip(text, _GOAL_CHARS)
            case FunctionCall(name=name):
                tools[name] += 1
            case FunctionCallOutput(output=output, is_error=is_error):
                if is_error or output.lower().startswith("error"):
                    add("Errors", _clip(output, _NOTE_CHARS))
            case AssistantMessage(text=text):
                last_answer = _clip(text, _NOTE_CHARS)
                if pending:
                    add("Done", f"{pending[:80]} -> {last_answer}")
                    pending = ""
            case SystemMessage():
                pass
    merged["Tools called"] = [f"{name} x{count}" for name, count in sorted(tools.items())]
    for section in ("Goals", "Errors", "Done", "Earlier notes"):
        context = section + "\n" + "\n".join(merged[section])
        merged[section] = drop_facts(merged[section], loss, seed, context)
    merged["Pending"] = [pending] if pending else []
    lines = ["Summary of the session so far."]
    for section in _SECTIONS:
        if merged[section]:
            lines.append(f"{section}:")
            lines.extend(f"- {entry}" for entry in merged[section])
    return "\n".join(lines)
