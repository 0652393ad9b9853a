"""A session as Markdown: the whole log by default, or only what the model sees now."""

from __future__ import annotations

import json
from collections.abc import Sequence

from stowage.core import (
    AssistantMessage,
    CompactionRecord,
    CompactionSummary,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ItemRecord,
    MicrocompactRecord,
    MilestoneRecord,
    ProtectedRecord,
    Record,
    SystemMessage,
    TurnRecord,
    UserMessage,
    identity_from_records,
    render,
    replay,
)

__all__ = ["markdown_export"]


def _fence(text: str, lang: str = "") -> list[str]:
    """``text`` in a code fence longer than any run of backticks inside it."""
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, text, fence, ""]


def _item(item: Item, *, stubbed: bool = False) -> list[str]:
    match item:
        case SystemMessage(text=text):
            return ["## System", "", text, ""]
        case UserMessage(text=text, pinned=pinned):
            return ["## User (pinned)" if pinned else "## User", "", text, ""]
        case AssistantMessage(text=text):
            return ["## Assistant", "", text, ""]
        case CompactionSummary(text=text):
            return ["## Summary of earlier history", "", text, ""]
        case FunctionCall(name=name, arguments=arguments, call_id=call_id):
            return [f"**call** `{name}` ({call_id})", "", *_fence(arguments, "json")]
        case FunctionCallOutput(output=output, call_id=call_id, is_error=is_error):
            kind = "error" if is_error else "output"
            note = " (stubbed in requests)" if stubbed else ""
            return [f"**{kind}** ({call_id}){note}", "", *_fence(output)]
    return [f"*{type(item).__name__}*", ""]


def _compaction(record: CompactionRecord, number: int) -> list[str]:
    figures = f"tokens {record.tokens_before} → {record.tokens_after}" + (
        " (estimated)" if record.estimated else ""
    )
    regrounded = ", re-grounded from the log" if record.regrounded else ""
    return [
        "---",
        "",
        f"### Compaction {number} ({record.kind}{regrounded}), record #{record.seq}, "
        f"round {record.round}",
        "",
        f"Covers the log through #{record.covers_through}: {record.removed} items left the "
        f"model's view, {len(record.retained)} kept; {figures}.",
        "",
        f"Reason: {record.reason}",
        "",
        "From here on the model read this summary instead of what it covers (everything "
        "above stays in the log and in this export):",
        "",
        *(f"> {line}" if line else ">" for line in record.summary.splitlines()),
        "",
        "---",
        "",
    ]


def _whole_log(records: Sequence[Record]) -> list[str]:
    stubbed = {seq for r in records if isinstance(r, MicrocompactRecord) for seq in r.stubbed}
    out: list[str] = []
    compactions = 0
    for record in records:
        match record:
            case ItemRecord(item=item):
                out += _item(item, stubbed=record.seq in stubbed)
            case TurnRecord(turn=turn, phase="started"):
                out += [f"### Turn {turn}", ""]
            case TurnRecord(turn=turn, phase="interrupted"):
                out += [f"*turn {turn} interrupted*", ""]
            case CompactionRecord():
                compactions += 1
                out += _compaction(record, compactions)
            case MicrocompactRecord(stubbed=seqs, reason=reason):
                out += [
                    f"*microcompaction (record #{record.seq}): {len(seqs)} tool outputs stubbed "
                    f"in requests from here on ({reason})*",
                    "",
                ]
            case ProtectedRecord(ops=ops, source=source):
                changes = "; ".join(json.dumps(op, sort_keys=True) for op in ops)
                out += [f"*protected state ({source}): {changes}*", ""]
            case MilestoneRecord(name=name, note=note):
                out += [f"### Milestone: {name}", "", *([note, ""] if note else [])]
            case ErrorRecord(kind=kind, message=message):
                out += [f"> **error** ({kind}): {message}", ""]
    return out


def _current(session_id: str, records: Sequence[Record]) -> list[str]:
    state = replay(session_id, records)
    out: list[str] = []
    protected = render(state.protected)
    for index, entry in enumerate(state.history):
        out += _item(entry.item, stubbed=entry.seq in state.stubbed)
        if index == 0 and protected:
            out += ["## Protected state", "", protected, ""]
    return out


def markdown_export(session_id: str, records: Sequence[Record], *, current: bool = False) -> str:
    """Session ``session_id`` as Markdown: the whole log, or with ``current`` only what the
    model sees now. Raises ``CorruptLogError`` when the log does not replay."""
    model = identity_from_records(records).model
    view = "what the model sees now" if current else "the whole log"
    out = [f"# Session {session_id}", "", f"model: {model} · {view}", ""]
    out += _current(session_id, records) if current else _whole_log(records)
    return "\n".join(out)
