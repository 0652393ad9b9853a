"""``stowage export --format openai-chat|openai-responses``: the history as a request a provider
accepts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stowage.core import (
    FunctionCall,
    FunctionCallOutput,
    Item,
    Record,
    build_projection,
    render,
    replay,
)

__all__ = ["WIRE_FORMATS", "WireExport", "paired_items", "wire_export"]

#: the export formats that are a provider's request input
WIRE_FORMATS = ("openai-chat", "openai-responses")


@dataclass(frozen=True, slots=True, kw_only=True)
class WireExport:
    """One wire export: its text, and what it left out to be a valid request."""

    text: str
    #: calls without an output, in log order
    calls_left_out: tuple[FunctionCall, ...] = ()
    #: ids of the outputs left out because their call is not in the history
    outputs_left_out: tuple[str, ...] = ()
    #: ids of the calls that wait for a person's approval (their round's other calls run
    #: once they are answered)
    awaiting_approval: frozenset[str] = frozenset()
    #: ids of the open round's calls (waiting for approval, or left open by a stop)
    open_round: frozenset[str] = frozenset()

    def notice(self, session_id: str) -> str | None:
        """One line for stderr saying what was left out and why; None when nothing was."""
        parts = []
        calls = [c.call_id for c in self.calls_left_out if c.call_id in self.open_round]
        unanswered = [c.call_id for c in self.calls_left_out if c.call_id not in self.open_round]
        if calls and self.awaiting_approval:
            waiting = sorted(self.awaiting_approval)
            call_id = waiting[0] if len(waiting) == 1 else "CALL_ID"
            parts.append(
                f"{_calls(calls)} of a round that waits for approval of {', '.join(waiting)} "
                f"('stowage approve {session_id} {call_id}' or 'deny' answers it, then the "
                "round's calls run)"
            )
        elif calls:
            parts.append(
                f"{_calls(calls)} of a round a stop left open (a resume gives "
                f"{'them' if len(calls) > 1 else 'it'} an 'interrupted' output)"
            )
        if unanswered:
            parts.append(
                f"{_calls(unanswered)} whose output is not in the history ('stowage check "
                f"{session_id}' says more)"
            )
        if self.outputs_left_out:
            parts.append(
                f"the output of {_calls(list(self.outputs_left_out))} whose call is not in the "
                f"history ('stowage check {session_id}' says more)"
            )
        if not parts:
            return None
        return (
            f"stowage: export left out {'; and '.join(parts)}: a provider refuses a call "
            "without its output; the log keeps every call"
        )


def _calls(ids: list[str]) -> str:
    return f"call{'s' if len(ids) > 1 else ''} {', '.join(ids)}"


def paired_items(items: Iterable[Item]) -> tuple[list[Item], list[FunctionCall], list[str]]:
    """``items`` without the calls that have no output after them and the outputs that have
    no call before them; then the calls and the output ids left out, in order. Pure."""
    given = list(items)
    called: set[str] = set()
    answered: set[str] = set()  # calls with an output after them
    for item in given:
        if isinstance(item, FunctionCall):
            called.add(item.call_id)
        elif isinstance(item, FunctionCallOutput) and item.call_id in called:
            answered.add(item.call_id)
    kept: list[Item] = []
    calls_left: list[FunctionCall] = []
    outputs_left: list[str] = []
    kept_calls: set[str] = set()
    for item in given:
        if isinstance(item, FunctionCall):
            if item.call_id not in answered:
                calls_left.append(item)
                continue
            kept_calls.add(item.call_id)
        elif isinstance(item, FunctionCallOutput) and item.call_id not in kept_calls:
            outputs_left.append(item.call_id)
            continue
        kept.append(item)
    return kept, calls_left, outputs_left


def wire_export(session_id: str, records: Sequence[Record], fmt: str) -> WireExport:
    """The history of ``records`` as the next request would send it, in ``fmt`` (one of
    ``WIRE_FORMATS``), every call with its output. Raises ``CorruptLogError``."""
    state = replay(session_id, records)
    projection = build_projection(
        state.history, stubbed=state.stubbed, protected_text=render(state.protected) or None
    )
    items, calls_left, outputs_left = paired_items(projection)
    # the model's wire formats only for this export: ``list`` and ``context`` never load them
    from stowage.model import chat_messages, responses_input

    wire = chat_messages(items) if fmt == "openai-chat" else responses_input(items)
    return WireExport(
        text=json.dumps(wire, indent=2, ensure_ascii=False) + "\n",
        calls_left_out=tuple(calls_left),
        outputs_left_out=tuple(outputs_left),
        awaiting_approval=frozenset(c.call_id for c in state.awaiting_approval),
        open_round=frozenset(state.open_calls),
    )
