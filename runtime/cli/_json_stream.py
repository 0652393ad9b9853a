"""``--json`` of ``run``, ``resume`` and ``send --wait``: a turn as JSON lines on stdout.

One JSON object per line, each flushed as it happens, so a script can follow a turn with
``for line in proc.stdout``. The schema is stable and versioned: every object has ``"v": 1``
and a ``"type"``; a field is never removed or changed in meaning within a version, new fields
and new types may be added (a reader skips what it does not know). Figures are the runtime's
own: the events of the turn (``run``, ``resume``) or the records of its log (``send --wait``,
whose turn ran in a worker); the turn's closing figures are those ``stowage context`` prints.

The types and their fields are listed in docs/guides/sessions.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from stowage.core import (
    AssistantMessage,
    AttemptAbandoned,
    CompactionLoop,
    CompactionRecord,
    ContextLengthExceeded,
    ErrorRecord,
    Event,
    FunctionCall,
    FunctionCallOutput,
    HistoryCompacted,
    Item,
    ItemRecord,
    Microcompacted,
    MicrocompactRecord,
    Record,
    RoundCommitted,
    RoundCommittedRecord,
    StowageError,
    ToolFinished,
    ToolStarted,
    TurnRecord,
    Usage,
    UserMessage,
)

from ._sessions import TurnFigures

__all__ = [
    "PREVIEW_CHARS",
    "SCHEMA_VERSION",
    "JsonTurn",
    "error_text",
    "record_lines",
    "stopped_reason",
]

SCHEMA_VERSION = 1
#: characters of a tool's output a ``tool_output`` line carries
PREVIEW_CHARS = 500


def _line(line_type: str, session_id: str, /, **fields: Any) -> dict[str, Any]:
    return {"v": SCHEMA_VERSION, "type": line_type, "session": session_id, **fields}


def _fields(source: object, *names: str) -> dict[str, Any]:
    """``names`` and their values on ``source``, in that order (None for every one without it)."""
    return {name: getattr(source, name, None) for name in names}


def _usage(usage: Usage | None) -> dict[str, int | None]:
    return _fields(usage, "input_tokens", "output_tokens", "cached_tokens")


def _round_line(
    session_id: str, round_: int, calls: int, truncated: bool, usage: Usage | None
) -> dict[str, Any]:
    return _line(
        "round", session_id, round=round_, calls=calls, truncated=truncated, **_usage(usage)
    )


def _tool_call(
    session_id: str, round_: int | None, call_id: str, name: str, arguments: Any
) -> dict[str, Any]:
    return _line(
        "tool_call", session_id, round=round_, call_id=call_id, name=name, arguments=arguments
    )


def _compaction(
    session_id: str,
    compaction: HistoryCompacted | CompactionRecord,
    *,
    retained: int,
    decided_tokens: int | None,
) -> dict[str, Any]:
    """A ``compaction`` line, from the live event or the log's record of it."""
    figures = ("round", "kind", "tokens_before", "tokens_after", "estimated", "removed")
    return _line(
        "compaction",
        session_id,
        **_fields(compaction, *figures),
        retained=retained,
        decided_tokens=decided_tokens,
        reason=compaction.reason,
    )


def _microcompaction(
    session_id: str, micro: Microcompacted | MicrocompactRecord, *, stubbed: int
) -> dict[str, Any]:
    """A ``microcompaction`` line, from the live event or the log's record of it."""
    figures = _fields(micro, "tokens_before", "tokens_after", "estimated", "reason")
    return _line("microcompaction", session_id, stubbed=stubbed, **figures)


def _tool_output(
    session_id: str, round_: int, name: str, output: FunctionCallOutput | None, chars: int
) -> dict[str, Any]:
    text = output.output if output is not None else None
    return _line(
        "tool_output",
        session_id,
        round=round_,
        call_id=output.call_id if output is not None else None,
        name=name,
        is_error=bool(output.is_error) if output is not None else False,
        chars=len(text) if text is not None else chars,
        preview=text[:PREVIEW_CHARS] if text is not None else None,
        cut=text is None or len(text) > PREVIEW_CHARS,
    )


def stopped_reason(error: BaseException | None, stopped: str | None) -> str:
    """The ``stopped`` word of ``turn_ended``: the turn result's, or what the error that
    ended the turn was. Raises nothing."""
    if error is None:
        return stopped or "answered"
    if isinstance(error, CompactionLoop):
        return "compaction_loop"
    if isinstance(error, ContextLengthExceeded):
        return "cannot_fit"
    return "error"


def _ended(
    session_id: str,
    turn: int,
    *,
    stopped: str,
    rounds: int | None,
    figures: TurnFigures | None,
    exit_status: int,
    error: str | None,
) -> dict[str, Any]:
    return _line(
        "turn_ended",
        session_id,
        turn=turn,
        stopped=stopped,
        rounds=rounds,
        tokens_in_use=figures.tokens if figures else None,
        **_fields(figures, "usable", "percent_of_usable"),
        estimated=figures.estimated if figures else False,
        compactions=figures.compactions if figures else 0,
        exit_status=exit_status,
        error=error,
    )


@dataclass(eq=False)
class JsonTurn:
    """A live turn's lines, from its events; ``history`` is the session's live history (the
    arguments of a call, the output of a finished one)."""

    out: TextIO
    session_id: str
    history: Callable[[], Sequence[Item]]
    turn: int = 0
    _finished: list[ToolFinished] = field(default_factory=list)

    def emit(self, data: dict[str, Any]) -> None:
        self.out.write(json.dumps(data, ensure_ascii=False) + "\n")
        self.out.flush()

    def begin(self, turn: int) -> None:
        self.turn = turn
        self.emit(_line("turn_started", self.session_id, turn=turn))

    def on_event(self, event: Event) -> None:
        if getattr(event, "session_id", self.session_id) != self.session_id:
            return
        match event:
            case AttemptAbandoned():
                said = ("round", "attempt", "error", "reason", "streamed_chars", "next")
                self.emit(_line("attempt_abandoned", self.session_id, **_fields(event, *said)))
            case ToolStarted(round=round_, call_id=call_id, name=name):
                call = self._find(FunctionCall, call_id)
                arguments = call.arguments if isinstance(call, FunctionCall) else None
                self.emit(_tool_call(self.session_id, round_, call_id, name, arguments))
            case ToolFinished():
                self._finished.append(event)
            case RoundCommitted(round=round_, usage=usage, calls=calls, truncated=truncated):
                for done in self._finished:  # durable now: the outputs are in history
                    output = self._find(FunctionCallOutput, done.call_id)
                    self.emit(
                        _tool_output(
                            self.session_id,
                            done.round,
                            done.name,
                            output if isinstance(output, FunctionCallOutput) else None,
                            done.output_chars,
                        )
                    )
                self._finished.clear()
                self.emit(_round_line(self.session_id, round_, calls, truncated, usage))
            case HistoryCompacted():
                self.emit(
                    _compaction(
                        self.session_id,
                        event,
                        retained=event.retained,
                        decided_tokens=event.decided_tokens,
                    )
                )
            case Microcompacted():
                self.emit(_microcompaction(self.session_id, event, stubbed=event.stubbed))

    def _find(self, kind: type, call_id: str) -> Item | None:
        for item in reversed(self.history()):
            if isinstance(item, kind) and getattr(item, "call_id", None) == call_id:
                return item
        return None

    def finish(
        self,
        *,
        stopped: str,
        figures: TurnFigures | None,
        exit_status: int,
        text: str = "",
        rounds: int | None = None,
        error: str | None = None,
    ) -> None:
        """The turn's ``answer`` (when it has one) and ``turn_ended`` lines."""
        if text:
            self.emit(_line("answer", self.session_id, turn=self.turn, text=text))
        self.emit(
            _ended(
                self.session_id,
                self.turn,
                stopped=stopped,
                rounds=rounds,
                figures=figures,
                exit_status=exit_status,
                error=error,
            )
        )


#: the ``stopped`` word for the error record that stopped a turn, by its kind
_STOP_WORDS = {"round_limit": "round_limit", "compaction_loop": "compaction_loop"}


def _exit_for(phase: str) -> int:
    # the statuses of ``_exits``: a turn stopped without an answer is 6, interrupted 130
    return {"stopped": 6, "interrupted": 130}.get(phase, 0)


def record_lines(
    session_id: str, records: Sequence[Record], message_id: str, figures: TurnFigures | None
) -> list[dict[str, Any]]:
    """The lines of the turn that answered message ``message_id``, from the session's log (``send
    --wait --json``: a worker ran the turn). Raises nothing."""
    start = next(
        (
            index
            for index, r in enumerate(records)
            if isinstance(r, ItemRecord)
            and isinstance(r.item, UserMessage)
            and r.item.message_id == message_id
        ),
        None,
    )
    if start is None:
        return []
    lines: list[dict[str, Any]] = []
    turn = 0
    calls: dict[str, str] = {}
    round_calls = 0
    answer: list[str] = []
    rounds = 0
    error: ErrorRecord | None = None
    for record in records[start + 1 :]:
        match record:
            case TurnRecord(phase="started", turn=number):
                turn = number
                lines.append(_line("turn_started", session_id, turn=turn))
            case ItemRecord(item=FunctionCall() as call, round=round_):
                calls[call.call_id] = call.name
                round_calls += 1
                lines.append(
                    _tool_call(session_id, round_, call.call_id, call.name, call.arguments)
                )
            case ItemRecord(item=FunctionCallOutput() as output, round=round_):
                name = calls.get(output.call_id, "")
                lines.append(_tool_output(session_id, round_ or 0, name, output, 0))
            case ItemRecord(item=AssistantMessage() as said):
                answer.append(said.text)
            case RoundCommittedRecord():
                rounds += 1
                lines.append(
                    _round_line(
                        session_id, record.round, round_calls, record.truncated, record.usage
                    )
                )
                if round_calls:
                    answer.clear()  # a round with calls: its text was not the answer
                round_calls = 0
            case CompactionRecord():
                lines.append(
                    _compaction(
                        session_id,
                        record,
                        retained=len(record.retained),
                        decided_tokens=(
                            record.figures.decided_tokens if record.figures is not None else None
                        ),
                    )
                )
            case MicrocompactRecord():
                lines.append(_microcompaction(session_id, record, stubbed=len(record.stubbed)))
            case ErrorRecord():
                error = record
            case TurnRecord(phase=phase) if phase != "started":
                text = "".join(answer) if phase == "finished" else ""
                if text:
                    lines.append(_line("answer", session_id, turn=turn, text=text))
                stopped: str = "answered" if phase == "finished" else phase
                if phase == "stopped":
                    stopped = _STOP_WORDS.get(error.kind if error else "", "cannot_fit")
                lines.append(
                    _ended(
                        session_id,
                        turn,
                        stopped=stopped,
                        rounds=rounds,
                        figures=figures,
                        exit_status=_exit_for(phase),
                        error=error_text(error.message) if phase == "stopped" and error else None,
                    )
                )
                return lines
    return lines


def error_text(error: StowageError | str) -> str:
    """The error as ``turn_ended`` carries it: its own words, on one line."""
    return " ".join(str(error).split())
