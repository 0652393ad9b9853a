"""``stowage show``: a log as a readable transcript, compactions with their figures."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from stowage.core import (
    ApprovalRecord,
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
    RequestManifest,
    RoundCommittedRecord,
    SessionRecord,
    SettingsChangedRecord,
    SystemMessage,
    TurnRecord,
    UserMessage,
)
from stowage.facade import recorded_usable
from stowage.policy import session_cache_figures

__all__ = ["render_transcript"]

_CLIP = 300


def _clip(text: str, limit: int = _CLIP) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def _item_line(item: Item) -> str:
    match item:
        case SystemMessage(text=text):
            return f"[system] {_clip(text)}"
        case UserMessage(text=text, pinned=pinned):
            return f"[user{' pinned' if pinned else ''}] {_clip(text)}"
        case AssistantMessage(text=text):
            return f"[assistant] {_clip(text)}"
        case FunctionCall(call_id=call_id, name=name, arguments=arguments):
            return f"[call {call_id}] {name}({_clip(arguments, 120)})"
        case FunctionCallOutput(call_id=call_id, output=output, is_error=is_error):
            return f"[{'error' if is_error else 'output'} {call_id}] {_clip(output)}"
        case CompactionSummary(text=text):
            return f"[summary] {_clip(text)}"
    return repr(item)  # pragma: no cover


def _applied_at(tokens_before: int | None, usable: int | None) -> list[str]:
    """Where a compaction was applied, as the console's card says it (none when unknown)."""
    if not usable or tokens_before is None:
        return []
    return [f"         applied at {tokens_before / usable:.0%} of usable ({usable:,} tokens)"]


def _manifest_line(manifest: RequestManifest) -> str:
    """What a round's request was built from, in one line: its hash, then each section."""
    parts = []
    for section in manifest.sections:
        seqs = ""
        if section.first_seq is not None:
            seqs = (
                f" #{section.first_seq}"
                if section.first_seq == section.last_seq
                else f" #{section.first_seq}-{section.last_seq}"
            )
        parts.append(f"{section.name}{seqs} ({section.items}, ~{section.tokens:,})")
    return f"         request {manifest.sha256[:12]} ~{manifest.tokens:,} tokens: " + ", ".join(
        parts
    )


def render_transcript(session_id: str, records: Sequence[Record], *, requests: bool = False) -> str:
    """Every record of a log as text, one line each; compactions in full with their summary.
    ``requests``: under each round, what its request was built from (its manifest)."""
    lines: list[str] = []
    compactions = 0
    has_stubs = any(isinstance(r, MicrocompactRecord) for r in records)
    usable: int | None = None  # the budget as the session had it, as the console figures it
    for index, record in enumerate(records):
        if isinstance(record, SessionRecord | SettingsChangedRecord):
            usable = recorded_usable(records[: index + 1], has_stubs=has_stubs)
        match record:
            case SessionRecord(model=model, tools=tools):
                lines.append(
                    f"session {session_id}  model {model}  tools {', '.join(tools) or '-'}"
                )
                endpoint = record.settings.get("base_url")
                window = record.context_window or record.settings.get("context_window")
                source = record.settings.get("window_source")
                lines.append(
                    f"         endpoint {endpoint or '-'}  wire {record.settings.get('wire_api', 'chat')}"
                    f"  window {window or '-'}{f' ({source})' if source else ''}"
                )
            case ItemRecord(item=item):
                lines.append(f"#{record.seq:<5} {_item_line(item)}")
            case RoundCommittedRecord(round=round_, usage=usage, interrupted=interrupted):
                figures = (
                    f"usage in {usage.input_tokens} out {usage.output_tokens} total {usage.total_tokens}"
                    if usage
                    else "no usage reported"
                )
                if usage and usage.cached_tokens:
                    figures += f" cached {usage.cached_tokens}"
                flag = " (interrupted, closed on resume)" if interrupted else ""
                lines.append(f"#{record.seq:<5} -- round {round_} committed{flag}: {figures}")
                if requests and record.manifest is not None:
                    lines.append(_manifest_line(record.manifest))
            case CompactionRecord():
                compactions += 1
                est = " (estimated)" if record.estimated else ""
                lines.append(
                    f"#{record.seq:<5} == compaction {compactions} ({record.kind}{', re-grounded' if record.regrounded else ''}) at round {record.round}: "
                    f"tokens {record.tokens_before} -> {record.tokens_after}{est}, covers through "
                    f"#{record.covers_through}, removed {record.removed}, retained {len(record.retained)}"
                )
                lines.append(f"         reason: {record.reason}")
                lines.extend(_applied_at(record.tokens_before, usable))
                if record.waited is not None:
                    held = (
                        f"a request waited {record.waited:.2f}s for it"
                        if record.waited
                        else "landed in the background (no request waited)"
                    )
                    lines.append(f"         {held}")
                lines.append("         summary:")
                lines.extend(
                    textwrap.indent(textwrap.fill(p, 96) if p else "", "           ")
                    for p in record.summary.splitlines()
                )
            case MicrocompactRecord():
                est = " (estimated)" if record.estimated else ""
                lines.append(
                    f"#{record.seq:<5} ~~ microcompaction: {len(record.stubbed)} outputs stubbed, tokens "
                    f"{record.tokens_before} -> {record.tokens_after}{est}; {record.reason}"
                )
                lines.extend(_applied_at(record.tokens_before, usable))
            case ProtectedRecord(ops=ops, source=source):
                lines.append(
                    f"#{record.seq:<5} ** protected state ({source}): {len(ops)} change(s)"
                )
                lines.extend(f"           {op}" for op in ops)
            case TurnRecord(turn=turn, phase=phase):
                lines.append(f"#{record.seq:<5} -- turn {turn} {phase}")
            case ErrorRecord(kind=kind, message=message):
                lines.append(f"#{record.seq:<5} !! {kind}: {message}")
            case SettingsChangedRecord(changes=changes, source=source):
                figures = ", ".join(
                    f"{name} {change[0]!r} -> {change[-1]!r}" for name, change in changes.items()
                )
                lines.append(f"#{record.seq:<5} ** settings changed ({source}): {figures}")
            case MilestoneRecord(name=name, note=note, source=source):
                said = f": {note}" if note else ""
                lines.append(f"#{record.seq:<5} ** milestone ({source}) {name!r}{said}")
            case ApprovalRecord(call_id=call_id, decision=decision, reason=reason):
                why = f": {reason}" if reason else ""
                lines.append(f"#{record.seq:<5} ** approval {decision} for call {call_id}{why}")
    cache = session_cache_figures(records)
    if cache.requests:
        lines.append(cache.line())
    return "\n".join(lines) + "\n"
