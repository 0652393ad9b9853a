"""``stowage show`` and ``stowage check``: a session's log read back, as a transcript for people
(compactions with their figures) and as a verdict.

Both only read (no lease, no lock file; a torn last line is shown as it is and left alone),
except ``check --repair``, which takes the writer's lease to cut an incomplete last line.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Collection, Sequence

from stowage.core import (
    ApprovalRecord,
    AssistantMessage,
    CompactionRecord,
    CompactionSummary,
    CorruptLogError,
    ErrorRecord,
    ForkedFromRecord,
    FunctionCall,
    FunctionCallOutput,
    Item,
    ItemRecord,
    MicrocompactRecord,
    MilestoneRecord,
    ProgressRecord,
    ProtectedRecord,
    Record,
    RequestManifest,
    RewindRecord,
    RoundCommittedRecord,
    SessionRecord,
    SettingsChangedRecord,
    SystemMessage,
    TurnRecord,
    UserMessage,
    describe_manifest,
)
from stowage.facade import TokenFigure, token_figures
from stowage.policy import session_cache_figures

from ._sessions import turn_figures
from ._store_args import reader_store

__all__ = ["check_main", "render_transcript", "show_main"]

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


def _applied_at(figure: TokenFigure | None) -> list[str]:
    """Where a compaction was applied, as the console's card says it (none when unknown)."""
    if figure is None or not figure.usable:
        return []
    return [
        f"         applied at {figure.tokens:,} tokens in use ({figure.how}), "
        f"{figure.tokens / figure.usable:.0%} of usable ({figure.usable:,} tokens)"
    ]


def _manifest_line(manifest: RequestManifest) -> str:
    """What a round's request was built from, in one line: its hash, then each section."""
    return "         " + describe_manifest(manifest)


def render_transcript(
    session_id: str,
    records: Sequence[Record],
    *,
    requests: bool = False,
    discarded: Collection[int] = (),
) -> str:
    """Every record of a log as text, one line each; compactions in full with their summary."""
    lines: list[str] = []
    compactions = 0
    # tokens in use at each round and compaction: the figures the console and `list` show
    # (the branch a rewind discarded is not the session's history: left out of the fold)
    skipped = set(discarded)
    effective = [r for r in records if r.seq not in skipped]
    in_use_at = token_figures(session_id, effective)
    for record in records:
        start = len(lines)
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
                if usage and usage.cache_write_tokens:
                    figures += f" cache-written {usage.cache_write_tokens}"
                flag = " (interrupted, closed on resume)" if interrupted else ""
                after = in_use_at.get(record.seq)
                if after is not None:
                    figures += f"; in use {after.tokens:,} ({after.how})"
                lines.append(f"#{record.seq:<5} -- round {round_} committed{flag}: {figures}")
                if requests and record.manifest is not None:
                    lines.append(_manifest_line(record.manifest))
            case CompactionRecord():
                # numbered as ``list`` and ``context`` count them: a discarded one is not
                if record.seq in skipped:
                    number = "of the discarded branch"
                else:
                    compactions += 1
                    number = str(compactions)
                est = " (estimated)" if record.estimated else ""
                lines.append(
                    f"#{record.seq:<5} == compaction {number} ({record.kind}{', re-grounded' if record.regrounded else ''}) at round {record.round}: "
                    f"tokens {record.tokens_before} -> {record.tokens_after}{est}, covers through "
                    f"#{record.covers_through}, removed {record.removed}, retained {len(record.retained)}"
                )
                lines.append(f"         reason: {record.reason}")
                if record.focus is not None:
                    lines.append(f"         focus: {record.focus}")
                if record.check is not None:
                    lines.append(f"         checked: {record.check.line}")
                lines.extend(_applied_at(in_use_at.get(record.seq)))
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
                lines.extend(_applied_at(in_use_at.get(record.seq)))
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
            case ApprovalRecord(call_id=call_id, decision=decision, reason=reason, detail=detail):
                why = f": {reason}" if reason else ""
                lines.append(f"#{record.seq:<5} ** approval {decision} for call {call_id}{why}")
                lines.extend(f"           | {line}" for line in (detail or "").splitlines())
            case ProgressRecord(call_id=call_id, text=text):
                lines.append(
                    f"#{record.seq:<5} .. call {call_id} printed {len(text):,} characters so far"
                )
            case ForkedFromRecord(parent_id=parent_id, through_seq=through, through_round=round_):
                lines.append(
                    f"#{record.seq:<5} >> forked from session {parent_id} at round {round_}: "
                    f"the records through #{through} are its"
                )
            case RewindRecord(to_round=round_, to_seq=to_seq):
                lines.append(
                    f"#{record.seq:<5} << rewound to round {round_}: the session continues from "
                    f"#{to_seq}; the records after it up to here are a discarded branch"
                )
        if record.seq in discarded:
            lines[start:] = [f"discarded | {line}" for line in lines[start:]]
    cache = session_cache_figures(effective)
    if cache.requests:
        lines.append(cache.line())
    lines.extend(_in_use_now(session_id, effective))
    return "\n".join(lines) + "\n"


def _in_use_now(session_id: str, effective: Sequence[Record]) -> list[str]:
    """The closing line: how full the next request is, the figure ``context`` and ``list``
    give (one computation, over the same records: a discarded branch is in neither)."""
    try:
        now = turn_figures(session_id, effective)
    except CorruptLogError:  # a damaged log is shown as it is, without the figure
        return []
    if now.tokens is None or not now.usable:
        return []
    est = " (estimated)" if now.estimated else ""
    return [
        f"in use now: {now.tokens:,} of {now.usable:,} tokens{est}, "
        f"{now.percent_of_usable:.0f}% of usable (as 'stowage context' counts them)"
    ]


async def show_main(args: argparse.Namespace) -> int:
    from stowage.core import lineage_store, validate_session_id

    store = lineage_store(reader_store(args))
    try:
        # a reader: no lease, no lock file, a torn last line shown as it is and left alone;
        # a fork is shown with its parents' records, a rewind with the branch it discarded
        lineage = await store.lineage(validate_session_id(args.session))
    finally:
        await store.aclose()
    read = lineage.read
    if read.torn_tail is not None:
        torn = read.torn_tail
        print(
            f"[torn last line: {torn.bytes_removed} bytes at {torn.path}:{torn.line}, not shown; "
            f"'stowage check {args.session} --repair' cuts it]",
            file=sys.stderr,
        )
    if args.json:
        from stowage.storage import encode_record

        for record in read.records:
            sys.stdout.write(encode_record(record).decode())
    else:
        sys.stdout.write(
            render_transcript(
                args.session, lineage.records, requests=args.requests, discarded=lineage.discarded
            )
        )
    return 0


async def check_main(args: argparse.Namespace) -> int:
    from stowage.core import CorruptLogError, validate_session_id
    from stowage.policy import check_log

    from ._exits import EXIT_CHECK_FAILED, EXIT_OK

    session_id = validate_session_id(args.session)
    store = reader_store(args)
    try:
        if args.repair:
            # the writer's lease: only its holder may cut; SessionBusy if another holds it
            async with await store.acquire(session_id) as lease:
                if lease.repaired is not None:
                    cut = lease.repaired
                    print(
                        f"repaired: cut an incomplete last line ({cut.bytes_removed} bytes) "
                        f"at {cut.path}:{cut.line}"
                    )
                else:
                    print("repair: nothing to cut, the last line is whole")
                full = await store.read(session_id, repair=False)
                tail = await store.read_tail(session_id, repair=False)
        else:
            full = await store.read(session_id, repair=False)
            tail = await store.read_tail(session_id, repair=False)
    except CorruptLogError as exc:
        print(f"{session_id}: corrupt log: {exc}")
        print("NOT OK")
        return EXIT_CHECK_FAILED
    finally:
        await store.aclose()
    report = check_log(session_id, full.records, tail.records)
    print(
        f"{session_id}: {report.records} records, {report.compactions} compactions, "
        f"{report.history_items} items in history"
    )
    for note in report.notes:
        print(f"note: {note}")
    problems = list(report.problems)
    if full.torn_tail is not None:
        torn = full.torn_tail
        problems.append(
            f"torn last line: {torn.bytes_removed} bytes at {torn.path}:{torn.line} (a write cut "
            f"short by a crash), left as it is; 'stowage check {session_id} --repair' cuts it"
        )
    if args.requests:
        from stowage.policy import check_requests

        requests = check_requests(session_id, full.records)
        print(
            f"requests: {requests.checked} rebuilt from the log and matched their manifests"
            if requests.ok
            else f"requests: {requests.checked} with manifests, {len(requests.problems)} differ"
        )
        if requests.unrecorded:
            print(
                f"note: {requests.unrecorded} round(s) have no manifest (recovered rounds, "
                "rounds an approval resumed, or rounds logged before manifests)"
            )
        problems += requests.problems
    for problem in problems:
        print(f"problem: {problem}")
    ok = not problems
    print("ok" if ok else "NOT OK")
    return EXIT_OK if ok else EXIT_CHECK_FAILED
