"""The record codec: one record, one JSON line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

import orjson
from stowage.core import (
    ApprovalRecord,
    CompactionFigures,
    CompactionKind,
    CompactionRecord,
    ErrorRecord,
    ForkedFromRecord,
    HistoryEntry,
    ItemRecord,
    ManifestSection,
    MicrocompactRecord,
    MilestoneRecord,
    ProgressRecord,
    ProtectedRecord,
    Record,
    RequestManifest,
    RewindRecord,
    RoundCommittedRecord,
    SectionName,
    SessionRecord,
    SettingsChangedRecord,
    SummaryCheck,
    TurnRecord,
    Usage,
    item_from_dict,
    item_to_dict,
)

__all__ = ["FORMAT_VERSION", "decode_record", "encode_record"]

T = TypeVar("T")

FORMAT_VERSION = 1
"""The ``v`` every line carries; a reader refuses any other."""


# -- encoding ---------------------------------------------------------------------------------


def _head(r: Record, kind: str) -> dict[str, Any]:
    """What every line starts with: the format version, seq, ts and the record type."""
    return {"v": FORMAT_VERSION, "seq": r.seq, "ts": r.ts, "type": kind}


def _usage_out(usage: Usage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    out = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.cached_tokens:
        out["cached_tokens"] = usage.cached_tokens
    if usage.cache_write_tokens:
        out["cache_write_tokens"] = usage.cache_write_tokens
    return out


def _enc_session(r: SessionRecord) -> dict[str, Any]:
    return {
        **_head(r, "session"), "model": r.model, "context_window": r.context_window,
        "tools": list(r.tools), "settings": r.settings,
    }  # fmt: skip


def _enc_item(r: ItemRecord) -> dict[str, Any]:
    out = _head(r, "item")
    out["item"] = item_to_dict(r.item)
    if r.round is not None:
        out["round"] = r.round
    return out


def _enc_round_committed(r: RoundCommittedRecord) -> dict[str, Any]:
    out = {
        **_head(r, "round_committed"), "round": r.round, "usage": _usage_out(r.usage),
        "first_seq": r.first_seq, "last_seq": r.last_seq, "interrupted": r.interrupted,
        "truncated": r.truncated, "reported_usage": _usage_out(r.reported_usage),
    }  # fmt: skip
    if r.manifest is not None:
        out["manifest"] = _manifest_out(r.manifest)
    if r.resumed:  # only then: other rounds stay byte-identical
        out["resumed"] = True
    return out


def _manifest_out(m: RequestManifest) -> dict[str, Any]:
    return {
        "sha256": m.sha256,
        "input_sha256": m.input_sha256,
        # one row per section: [name, first_seq, last_seq, items, sha256, tokens]
        "sections": [
            [s.name, s.first_seq, s.last_seq, s.items, s.sha256, s.tokens] for s in m.sections
        ],
    }


def _enc_compaction(r: CompactionRecord) -> dict[str, Any]:
    out = _enc_compaction_fields(r)
    if r.focus is not None:
        out["focus"] = r.focus
    if r.provider_item is not None:  # only then: local compactions stay byte-identical
        out["provider_item"] = r.provider_item
    if r.turn_open:  # only then: a compaction between turns stays byte-identical
        out["turn_open"] = True
    if r.figures is not None:
        f = r.figures
        out["figures"] = {
            "decided_tokens": f.decided_tokens, "usable": f.usable,
            "tool_tokens": f.tool_tokens, "hard": f.hard,
        }  # fmt: skip
    if r.usage is not None:
        out["usage"] = _usage_out(r.usage)
    if r.check is not None:
        c = r.check
        out["check"] = {
            "probes": list(c.probes), "missed_first": list(c.missed_first),
            "asked_again": c.asked_again, "appended": list(c.appended),
        }  # fmt: skip
        if c.left_out:  # only then: a check that appended all stays as it was written
            out["check"]["left_out"] = list(c.left_out)
    return out


def _enc_compaction_fields(r: CompactionRecord) -> dict[str, Any]:
    return {
        **_head(r, "compaction"),
        "kind": r.kind, "summary": r.summary, "covers_through": r.covers_through,
        "retained": [{"seq": e.seq, "item": item_to_dict(e.item)} for e in r.retained],
        "reason": r.reason, "tokens_before": r.tokens_before, "tokens_after": r.tokens_after,
        "removed": r.removed, "round": r.round, "turn": r.turn,
        "user_budget_chars": r.user_budget_chars, "protected": r.protected,
        "estimated": r.estimated, "chars_per_token": r.chars_per_token, "waited": r.waited,
        "reattached": list(r.reattached), "regrounded": r.regrounded,
    }  # fmt: skip


def _enc_microcompact(r: MicrocompactRecord) -> dict[str, Any]:
    return {
        **_head(r, "microcompact"), "stubbed": list(r.stubbed), "reason": r.reason,
        "tokens_before": r.tokens_before, "tokens_after": r.tokens_after,
        "estimated": r.estimated,
    }  # fmt: skip


def _enc_protected(r: ProtectedRecord) -> dict[str, Any]:
    return {
        **_head(r, "protected"), "ops": list(r.ops), "source": r.source,
    }  # fmt: skip


def _enc_turn(r: TurnRecord) -> dict[str, Any]:
    return {
        **_head(r, "turn"), "turn": r.turn, "phase": r.phase,
    }  # fmt: skip


def _enc_error(r: ErrorRecord) -> dict[str, Any]:
    return {
        **_head(r, "error"), "kind": r.kind, "message": r.message,
    }  # fmt: skip


def _enc_approval(r: ApprovalRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        **_head(r, "approval"), "call_id": r.call_id, "decision": r.decision,
    }  # fmt: skip
    if r.reason is not None:
        out["reason"] = r.reason
    if r.detail is not None:
        out["detail"] = r.detail
    return out


def _enc_progress(r: ProgressRecord) -> dict[str, Any]:
    return {
        **_head(r, "progress"), "call_id": r.call_id, "text": r.text,
    }  # fmt: skip


def _enc_milestone(r: MilestoneRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        **_head(r, "milestone"), "name": r.name, "source": r.source,
    }  # fmt: skip
    if r.note is not None:
        out["note"] = r.note
    return out


def _enc_settings_changed(r: SettingsChangedRecord) -> dict[str, Any]:
    return {
        **_head(r, "settings_changed"), "changes": r.changes, "source": r.source,
    }  # fmt: skip


def _enc_forked_from(r: ForkedFromRecord) -> dict[str, Any]:
    return {
        **_head(r, "forked_from"), "parent_id": r.parent_id,
        "through_seq": r.through_seq, "through_round": r.through_round,
    }  # fmt: skip


def _enc_rewind(r: RewindRecord) -> dict[str, Any]:
    return {
        **_head(r, "rewind"), "to_round": r.to_round, "to_seq": r.to_seq,
    }  # fmt: skip


_ENCODERS: dict[type[Any], Callable[[Any], dict[str, Any]]] = {
    SessionRecord: _enc_session,
    ItemRecord: _enc_item,
    RoundCommittedRecord: _enc_round_committed,
    CompactionRecord: _enc_compaction,
    MicrocompactRecord: _enc_microcompact,
    ProtectedRecord: _enc_protected,
    TurnRecord: _enc_turn,
    ErrorRecord: _enc_error,
    SettingsChangedRecord: _enc_settings_changed,
    ApprovalRecord: _enc_approval,
    ProgressRecord: _enc_progress,
    MilestoneRecord: _enc_milestone,
    ForkedFromRecord: _enc_forked_from,
    RewindRecord: _enc_rewind,
}


def encode_record(record: Record) -> bytes:
    """One JSON line for ``record``, ending in ``\\n``.

    Raises ``TypeError`` when ``record`` is not a record, or holds a value JSON cannot carry
    (``settings``, ``protected`` and ``ops`` must be JSON values with string keys; tuples inside
    them come back as lists).
    """
    encoder = _ENCODERS.get(type(record))
    if encoder is None:
        raise TypeError(f"not a record: {record!r}")
    return orjson.dumps(encoder(record), option=orjson.OPT_APPEND_NEWLINE)


# -- decoding ---------------------------------------------------------------------------------
# Field readers raise KeyError for a missing field and ValueError for a wrong type; the caller
# turns both into one message naming the record type.


def _int(d: dict[str, Any], key: str) -> int:
    value = d[key]
    if type(value) is not int:  # bool is an int subclass and not a seq
        raise ValueError(f"field {key!r} must be an integer, got {value!r}")
    return value


def _opt_int(d: dict[str, Any], key: str) -> int | None:
    value = d.get(key)
    return None if value is None else _int(d, key)


def _str(d: dict[str, Any], key: str) -> str:
    value = d[key]
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} must be a string, got {value!r}")
    return value


def _bool(d: dict[str, Any], key: str) -> bool:
    value = d.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"field {key!r} must be a boolean, got {value!r}")
    return value


def _opt_dict(d: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = d.get(key)
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"field {key!r} must be an object or null, got {value!r}")
    return value


def _list(d: dict[str, Any], key: str) -> list[Any]:
    value = d[key]
    if not isinstance(value, list):
        raise ValueError(f"field {key!r} must be a list, got {value!r}")
    return value


def _ints(values: list[Any], key: str) -> tuple[int, ...]:
    if any(type(v) is not int for v in values):
        raise ValueError(f"field {key!r} must be a list of integers")
    return tuple(values)


def _item(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"an item must be an object, got {value!r}")
    return item_from_dict(value)


def _usage_in(d: dict[str, Any]) -> Usage | None:
    value = d.get("usage")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"field 'usage' must be an object or null, got {value!r}")
    return Usage(
        input_tokens=_int(value, "input_tokens"),
        output_tokens=_int(value, "output_tokens"),
        total_tokens=_int(value, "total_tokens"),
        cached_tokens=_int(value, "cached_tokens") if "cached_tokens" in value else 0,
        cache_write_tokens=(
            _int(value, "cache_write_tokens") if "cache_write_tokens" in value else 0
        ),
    )


_KINDS: tuple[CompactionKind, ...] = ("full", "fallback")
_SOURCES: tuple[Literal["user", "summarizer", "tools"], ...] = ("user", "summarizer", "tools")
_PHASES: tuple[Literal["started", "finished", "interrupted", "stopped"], ...] = (
    "started",
    "finished",
    "interrupted",
    "stopped",
)
_DECISIONS: tuple[Literal["requested", "approved", "denied"], ...] = (
    "requested",
    "approved",
    "denied",
)
_MILESTONE_SOURCES: tuple[Literal["user", "model"], ...] = ("user", "model")


def _choice(value: Any, key: str, choices: tuple[T, ...]) -> T:
    """``value`` as the one of ``choices`` it equals; ``ValueError`` naming them otherwise."""
    for choice in choices:
        if value == choice:
            return choice
    named = " or ".join((", ".join(map(repr, choices[:-1])), repr(choices[-1])))
    raise ValueError(f"field {key!r} must be {named}, got {value!r}")


def _dec_session(d: dict[str, Any]) -> SessionRecord:
    settings = _opt_dict(d, "settings")
    return SessionRecord(
        seq=_int(d, "seq"),
        ts=_str(d, "ts"),
        model=_str(d, "model"),
        context_window=_opt_int(d, "context_window"),
        tools=tuple(str(t) for t in d.get("tools", ())),
        settings={} if settings is None else settings,
    )


def _dec_item(d: dict[str, Any]) -> ItemRecord:
    return ItemRecord(
        seq=_int(d, "seq"), ts=_str(d, "ts"), item=_item(d["item"]), round=_opt_int(d, "round")
    )


def _dec_round_committed(d: dict[str, Any]) -> RoundCommittedRecord:
    return RoundCommittedRecord(
        seq=_int(d, "seq"),
        ts=_str(d, "ts"),
        round=_int(d, "round"),
        usage=_usage_in(d),
        first_seq=_int(d, "first_seq"),
        last_seq=_int(d, "last_seq"),
        interrupted=_bool(d, "interrupted"),
        truncated=_bool(d, "truncated"),
        reported_usage=_usage_in({"usage": d.get("reported_usage")}),
        manifest=_manifest_in(d.get("manifest")),
        resumed=_bool(d, "resumed"),
    )


_SECTION_NAMES: dict[Any, SectionName] = {
    "system": "system",
    "protected": "protected",
    "summary": "summary",
    "history": "history",
    "tools": "tools",
}


def _manifest_in(value: Any) -> RequestManifest | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"field 'manifest' must be an object or null, got {value!r}")
    sections = []
    for row in _list(value, "sections"):
        if not (isinstance(row, list) and len(row) == 6 and row[0] in _SECTION_NAMES):
            raise ValueError(
                f"a manifest section must be [name, first, last, items, sha, tokens], got {row!r}"
            )
        name, first, last, items, sha, tokens = row
        if not (
            (first is None or type(first) is int)
            and (last is None or type(last) is int)
            and type(items) is int
            and isinstance(sha, str)
            and type(tokens) is int
        ):
            raise ValueError(f"a manifest section has a bad field: {row!r}")
        sections.append(
            ManifestSection(
                name=_SECTION_NAMES[name], first_seq=first, last_seq=last, items=items,
                sha256=sha, tokens=tokens,
            )
        )  # fmt: skip
    return RequestManifest(
        sha256=_str(value, "sha256"),
        input_sha256=_str(value, "input_sha256"),
        sections=tuple(sections),
    )


def _entry(value: Any) -> HistoryEntry:
    if not isinstance(value, dict):
        raise ValueError(f"a retained entry must be an object, got {value!r}")
    return HistoryEntry(seq=_int(value, "seq"), item=_item(value["item"]))


def _dec_compaction(d: dict[str, Any]) -> CompactionRecord:
    return CompactionRecord(
        seq=_int(d, "seq"),
        ts=_str(d, "ts"),
        kind=_choice(d.get("kind", "full"), "kind", _KINDS),
        summary=_str(d, "summary"),
        covers_through=_int(d, "covers_through"),
        retained=tuple(_entry(e) for e in _list(d, "retained")),
        reason=_str(d, "reason"),
        tokens_before=_opt_int(d, "tokens_before"),
        tokens_after=_opt_int(d, "tokens_after"),
        removed=_int(d, "removed"),
        round=_int(d, "round"),
        turn=_int(d, "turn") if "turn" in d else 0,
        turn_open=_bool(d, "turn_open"),
        user_budget_chars=_opt_int(d, "user_budget_chars"),
        protected=_opt_dict(d, "protected"),
        estimated=_bool(d, "estimated"),
        chars_per_token=_opt_float(d, "chars_per_token"),
        waited=_opt_float(d, "waited"),
        reattached=_ints(d.get("reattached") or [], "reattached"),
        regrounded=_bool(d, "regrounded"),
        focus=_str(d, "focus") if d.get("focus") is not None else None,
        provider_item=_opt_dict(d, "provider_item"),
        figures=_compaction_figures(d.get("figures")),
        usage=_usage_in(d),
        check=_summary_check(d.get("check")),
    )


def _summary_check(value: Any) -> SummaryCheck | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"field 'check' must be an object, got {value!r}")
    return SummaryCheck(
        probes=_strs(value, "probes"),
        missed_first=_strs(value, "missed_first"),
        asked_again=_bool(value, "asked_again"),
        appended=_strs(value, "appended"),
        left_out=_strs(value, "left_out"),
    )


def _strs(d: dict[str, Any], key: str) -> tuple[str, ...]:
    value = d.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key!r} must be a list of strings, got {value!r}")
    return tuple(value)


def _compaction_figures(value: Any) -> CompactionFigures | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"field 'figures' must be an object, got {value!r}")
    return CompactionFigures(
        decided_tokens=_opt_int(value, "decided_tokens"),
        usable=_opt_int(value, "usable"),
        tool_tokens=_int(value, "tool_tokens") if "tool_tokens" in value else 0,
        hard=_opt_float(value, "hard"),
    )


def _opt_float(d: dict[str, Any], key: str) -> float | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key!r} must be a number or null, got {value!r}")
    return float(value)


def _dec_microcompact(d: dict[str, Any]) -> MicrocompactRecord:
    return MicrocompactRecord(
        seq=_int(d, "seq"),
        ts=_str(d, "ts"),
        stubbed=_ints(_list(d, "stubbed"), "stubbed"),
        reason=_str(d, "reason"),
        tokens_before=_opt_int(d, "tokens_before"),
        tokens_after=_opt_int(d, "tokens_after"),
        estimated=_bool(d, "estimated"),
    )


def _dec_protected(d: dict[str, Any]) -> ProtectedRecord:
    ops = _list(d, "ops")
    if not all(isinstance(op, dict) for op in ops):
        raise ValueError("field 'ops' must be a list of objects")
    source = _choice(d.get("source", "user"), "source", _SOURCES)
    return ProtectedRecord(seq=_int(d, "seq"), ts=_str(d, "ts"), ops=tuple(ops), source=source)


def _dec_turn(d: dict[str, Any]) -> TurnRecord:
    phase = _choice(d["phase"], "phase", _PHASES)
    return TurnRecord(seq=_int(d, "seq"), ts=_str(d, "ts"), turn=_int(d, "turn"), phase=phase)


def _dec_error(d: dict[str, Any]) -> ErrorRecord:
    return ErrorRecord(
        seq=_int(d, "seq"), ts=_str(d, "ts"), kind=_str(d, "kind"), message=_str(d, "message")
    )


def _dec_approval(d: dict[str, Any]) -> ApprovalRecord:
    decision = _choice(d["decision"], "decision", _DECISIONS)
    reason, detail = d.get("reason"), d.get("detail")
    for name, value in (("reason", reason), ("detail", detail)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"field {name!r} must be a string, got {type(value).__name__}")
    return ApprovalRecord(
        seq=_int(d, "seq"), ts=_str(d, "ts"), call_id=_str(d, "call_id"), decision=decision,
        reason=reason, detail=detail,
    )  # fmt: skip


def _dec_progress(d: dict[str, Any]) -> ProgressRecord:
    return ProgressRecord(
        seq=_int(d, "seq"), ts=_str(d, "ts"), call_id=_str(d, "call_id"), text=_str(d, "text")
    )


def _dec_milestone(d: dict[str, Any]) -> MilestoneRecord:
    source = _choice(d.get("source", "user"), "source", _MILESTONE_SOURCES)
    note = d.get("note")
    if note is not None and not isinstance(note, str):
        raise ValueError(f"field 'note' must be a string, got {type(note).__name__}")
    return MilestoneRecord(
        seq=_int(d, "seq"), ts=_str(d, "ts"), name=_str(d, "name"), note=note, source=source
    )


def _dec_settings_changed(d: dict[str, Any]) -> SettingsChangedRecord:
    changes = d["changes"]
    if not isinstance(changes, dict):
        raise ValueError(f"changes must be an object, got {type(changes).__name__}")
    return SettingsChangedRecord(
        seq=_int(d, "seq"), ts=_str(d, "ts"), changes=changes, source=_str(d, "source")
    )


def _dec_forked_from(d: dict[str, Any]) -> ForkedFromRecord:
    return ForkedFromRecord(
        seq=_int(d, "seq"), ts=_str(d, "ts"), parent_id=_str(d, "parent_id"),
        through_seq=_int(d, "through_seq"), through_round=_int(d, "through_round"),
    )  # fmt: skip


def _dec_rewind(d: dict[str, Any]) -> RewindRecord:
    return RewindRecord(
        seq=_int(d, "seq"), ts=_str(d, "ts"), to_round=_int(d, "to_round"),
        to_seq=_int(d, "to_seq"),
    )  # fmt: skip


_DECODERS: dict[str, Callable[[dict[str, Any]], Record]] = {
    "session": _dec_session,
    "item": _dec_item,
    "round_committed": _dec_round_committed,
    "compaction": _dec_compaction,
    "microcompact": _dec_microcompact,
    "protected": _dec_protected,
    "turn": _dec_turn,
    "error": _dec_error,
    "progress": _dec_progress,
    "settings_changed": _dec_settings_changed,
    "approval": _dec_approval,
    "milestone": _dec_milestone,
    "forked_from": _dec_forked_from,
    "rewind": _dec_rewind,
}


def decode_record(line: bytes | str) -> Record:
    """The record one line holds (a trailing newline is allowed).

    Raises ``ValueError`` naming the problem: not JSON, not an object, an unknown ``v``, an
    unknown ``type``, a missing field or a field of the wrong type.
    """
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"record is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"record is not a JSON object: {data!r:.80}")
    version = data.get("v")
    if type(version) is not int or version != FORMAT_VERSION:
        raise ValueError(f"unknown record version {version!r}; this build reads v={FORMAT_VERSION}")
    kind = data.get("type")
    decoder = _DECODERS.get(kind) if isinstance(kind, str) else None
    if decoder is None:
        raise ValueError(f"unknown record type {kind!r}")
    try:
        return decoder(data)
    except KeyError as exc:
        raise ValueError(f"{kind} record lacks field {exc.args[0]!r}") from None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{kind} record: {exc}") from None
