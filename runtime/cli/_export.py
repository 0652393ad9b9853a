"""``stowage export``: a session as Markdown (the whole log, or what the model sees now), as its
log's JSONL records, or as the history a provider's request would carry (``WIRE_FORMATS``).

The openai formats: a provider refuses a request that carries a tool call without its output, or an output without
its call. A sound log may still hold calls without an output: the calls of a round that waits
for a person's approval, and those of a round a stop left open (a resume gives them
"interrupted" outputs). The export leaves such a call out, so the file can be sent as it is,
and names each one it left out; the log, ``show`` and the markdown and jsonl exports keep them.

Markdown: the whole log keeps everything a compaction took out of the model's view (the log holds it, so
the export does too), with each compaction a marked section saying what it covered, why, the
figures and the summary the model read from then on. ``current`` renders the history as the
next request would carry it: the last summary, what was kept, and what came after.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import anyio
from stowage.core import (
    AssistantMessage,
    CompactionRecord,
    CompactionSummary,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ItemRecord,
    LogStore,
    MicrocompactRecord,
    MilestoneRecord,
    ProtectedRecord,
    Record,
    SystemMessage,
    TurnRecord,
    UserMessage,
    build_projection,
    identity_from_records,
    render,
    replay,
)
from stowage.storage import encode_record

from ._sessions import read_records
from ._store_args import reader_store

__all__ = [
    "EXPORT_FORMATS",
    "WIRE_FORMATS",
    "export_main",
    "export_text",
    "WireExport",
    "markdown_export",
    "paired_items",
    "wire_export",
]

#: the export formats that are a provider's request input
WIRE_FORMATS = ("openai-chat", "openai-responses")
EXPORT_FORMATS = ("markdown", "jsonl", *WIRE_FORMATS)


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


def export_text(
    session_id: str, records: Sequence[Record], fmt: str, *, current: bool = False
) -> str:
    """A session in format ``fmt`` (one of ``EXPORT_FORMATS``); markdown renders the whole log,
    or with ``current`` only what the model sees now."""
    if fmt == "jsonl":
        return "".join(encode_record(record).decode() for record in records)
    if fmt == "markdown":
        return markdown_export(session_id, records, current=current)
    return wire_export(session_id, records, fmt).text


async def export_main(args: argparse.Namespace, store: LogStore | None = None) -> int:
    """Write session ``args.session`` in ``args.format`` to stdout or ``args.output``."""
    store = store or reader_store(args)
    current = getattr(args, "current", False)
    if current and args.format != "markdown":
        from stowage.core import ConfigError

        raise ConfigError(
            f"--current applies to --format markdown (the openai formats are always what the "
            f"model sees now, jsonl always the whole log), not to --format {args.format}"
        )
    records = await read_records(store, args.session)
    if args.format in WIRE_FORMATS:
        # a valid request: calls without an output are left out, and said so
        wired = wire_export(args.session, records, args.format)
        text, notice = wired.text, wired.notice(args.session)
    else:
        text, notice = export_text(args.session, records, args.format, current=current), None
    if args.output:
        await anyio.Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if notice is not None:
        print(notice, file=sys.stderr)
    return 0
