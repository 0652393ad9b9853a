"""Log records: the durable, append-only source of truth of a session.

History, protected state and every derived figure are folds over these records (see
``runtime._replay``); nothing is ever rewritten or deleted. Each record carries its ``seq``
(strictly increasing from 1 within a session) and a wall-clock ``ts`` that replay ignores.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

from ._items import HistoryEntry, Item

__all__ = [
    "ApprovalRecord", "ManifestSection", "MilestoneRecord", "RequestManifest", "SectionName",
    "CompactionFigures", "SummaryCheck", "CompactionKind", "CompactionRecord", "ErrorRecord",
    "ForkedFromRecord", "ItemRecord", "MicrocompactRecord", "ProgressRecord", "ProtectedRecord",
    "Record", "RewindRecord", "RoundCommittedRecord", "SessionRecord", "SettingsChangedRecord",
    "TurnRecord", "Usage", "now_ts",
]  # fmt: skip


# the last stamp made, by the millisecond it names: every record gets one, and a round's
# records are made within the same millisecond, so most stamps are a look-up, not a format
_last_ts: tuple[int, str] = (-1, "")


def now_ts() -> str:
    """The current UTC time as an ISO-8601 string with milliseconds."""
    global _last_ts
    ms = time.time_ns() // 1_000_000
    if ms != _last_ts[0]:
        seconds, millis = divmod(ms, 1000)
        stamp = datetime.fromtimestamp(seconds, UTC).replace(microsecond=millis * 1000)
        _last_ts = (ms, stamp.isoformat(timespec="milliseconds"))
    return _last_ts[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token usage a provider reported for one model call."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    #: input tokens the provider served from its prompt cache (0 when it did not say)
    cached_tokens: int = 0
    #: input tokens the provider wrote to its prompt cache for later requests (Anthropic's
    #: ``cache_creation_input_tokens``; 0 when it did not say, or it caches on its own)
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        """Both calls' usage together (a summary that took more than one request)."""
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    """Always seq 1: what the session was opened with."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    model: str
    context_window: int | None = None
    tools: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemRecord:
    """One conversation item entering history."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    item: Item
    round: int | None = None


SectionName: TypeAlias = Literal["system", "protected", "summary", "history", "tools"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestSection:
    """One part of a request: its kind, the log seqs it came from (history entries; None for
    protected state and tools), how many items, their hash and estimated tokens."""

    name: SectionName
    first_seq: int | None
    last_seq: int | None
    items: int
    sha256: str
    tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestManifest:
    """What one request was built from (``core._manifest`` makes it)."""

    #: sha256 of the request's canonical bytes (``request_bytes``)
    sha256: str
    #: sha256 of the input items' lines alone: what the log determines
    input_sha256: str
    sections: tuple[ManifestSection, ...]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.sections)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundCommittedRecord:
    """Closes a round: every call of it has its output, and ``usage`` is what was reported."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    round: int
    usage: Usage | None
    first_seq: int
    last_seq: int
    interrupted: bool = False
    #: the response was stopped by the output limit (``finish_reason: "length"``)
    truncated: bool = False
    #: usage the provider reported but that cannot be true (zero, or far below what the
    #: request's own size allows): kept for audit, while ``usage`` is None and estimates stand
    reported_usage: Usage | None = None
    #: what the request the round sent was built from (None: a round no request made, as a
    #: recovered one, or a log older than manifests)
    manifest: RequestManifest | None = None
    #: the round's request was the first one sent after the session was opened from a log
    #: that held rounds already (a resume, or a rehydration after hibernating): its cached
    #: tokens say whether the provider's prompt cache outlived the pause
    resumed: bool = False


CompactionKind: TypeAlias = Literal["full", "fallback"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionFigures:
    """The figures of a compaction's decision and application that every view reads, so
    none recomputes them: the tokens in use it was decided on, the usable budget and tool
    schemas then (None without a known window), and the hard mark."""

    decided_tokens: int | None = None
    usable: int | None = None
    tool_tokens: int = 0
    hard: float | None = None

    def share(self, tokens: int | None) -> float | None:
        """``tokens`` as a share of usable (None without a window or a figure)."""
        if tokens is None or not self.usable:
            return None
        return tokens / self.usable


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryCheck:
    """How a summary fared against its probes (``stowage.policy``'s checked summaries): the
    probes it was checked against (carried to the next compaction), those the first summary
    missed, whether it was asked for once more, and those appended as a section of their own
    because the summary still missed them."""

    probes: tuple[str, ...] = ()
    missed_first: tuple[str, ...] = ()
    asked_again: bool = False
    appended: tuple[str, ...] = ()
    #: those it still missed that the window had no room to append (named here, not lost)
    left_out: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """How the summary fared, in one line (``show``, the console)."""
        probes = len(self.probes)
        if not self.missed_first:
            return f"kept all {probes} probes (the user's instructions and corrections it absorbed)"
        line = f"the summary missed {len(self.missed_first)} of {probes} probes; asked once more"
        if self.left_out:
            line += (
                f"; {len(self.appended) + len(self.left_out)} still missing, "
                f"{len(self.appended)} appended, {len(self.left_out)} left out for room "
                "(named on the compaction record)"
            )
            return line
        if self.appended:
            return line + f"; {len(self.appended)} still missing, appended as their own section"
        return line + "; the second summary kept them all"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionRecord:
    """History replaced: system + retained entries + summary, then every entry after
    ``covers_through``.

    ``retained`` holds the kept entries themselves (not only their seqs) so that resume can start
    at this record and never read the log before ``covers_through``.
    """

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    kind: CompactionKind = "full"
    summary: str
    covers_through: int
    retained: tuple[HistoryEntry, ...]
    reason: str
    tokens_before: int | None
    tokens_after: int | None
    removed: int
    round: int
    turn: int = 0
    #: the turn was open when it compacted: a resume reads the log from this record on, past
    #: the turn's "started" record, and learns from here that the turn is still to be finished
    turn_open: bool = False
    #: the user-message budget this compaction used (so a check can re-run it exactly)
    user_budget_chars: int | None = None
    protected: dict[str, Any] | None = None
    estimated: bool = False
    #: the session's calibrated chars per token when it compacted; resume starts here, so the
    #: calibration is carried in the record rather than rebuilt from the log before it
    chars_per_token: float | None = None
    #: seconds a request was held back for this compaction (0: it landed in the background;
    #: None in logs written before it was recorded)
    waited: float | None = None
    #: seqs of the current turn's tool steps kept among ``retained`` although the compaction
    #: covers them (what the turn most recently read; see ``apply_compaction``)
    reattached: tuple[int, ...] = ()
    #: the summary was made from the log's original records since the last re-grounded
    #: compaction (``reground_every``), not from the summary before it
    regrounded: bool = False
    #: what the summary was told to cover in full detail (``stowage compact --focus``, a
    #: before-compaction hook's text); None: no focus
    focus: str | None = None
    #: the compaction item of a provider-native compaction (``compaction = "provider"``),
    #: exactly as the endpoint returned it: the summary item carries it, and the Responses
    #: wire sends it back verbatim; ``summary`` is then a readable line. None: a local one
    provider_item: dict[str, Any] | None = field(default=None, hash=False)
    #: the figures of its decision and application (None in logs written before them)
    figures: CompactionFigures | None = None
    #: what the summary request reported, summed over the requests that made this summary
    #: (None: no model call, as a fallback digest, no usage reported, or an older log)
    usage: Usage | None = None
    #: the summary's check against its probes (None: not checked, e.g. a fallback digest)
    check: SummaryCheck | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MicrocompactRecord:
    """Outputs at ``stubbed`` seqs are shown as stubs in every later projection."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    stubbed: tuple[int, ...]
    reason: str
    tokens_before: int | None
    tokens_after: int | None
    estimated: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedRecord:
    """A change to protected state; ``source`` is ``user``, ``summarizer``, or ``tools`` (the
    trail of files touched, written by the runtime from a round's calls)."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    ops: tuple[dict[str, Any], ...]
    source: Literal["user", "summarizer", "tools"] = "user"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    """A turn boundary: ``started`` after the user's input, ``finished`` on a final answer,
    ``interrupted`` when its caller stopped it, ``stopped`` when the runtime did (a
    compaction loop, a request nothing could bring under the limit, the round limit); the
    last two close the turn without an answer."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    turn: int
    phase: Literal["started", "finished", "interrupted", "stopped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingsChangedRecord:
    """The session continues with other settings than its session record (an explicit override).

    ``changes`` maps each changed ``Settings`` field to ``[old, new]`` (no secrets: URLs are
    redacted); the session's identity is its session record's with every change folded in.
    """

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    changes: dict[str, Any]
    source: str = "user"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord:
    """A call of the open round needs a person's word (``requested``, written after the call
    is durable and before anything of the round runs), or got it (``approved``/``denied``)."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    call_id: str
    decision: Literal["requested", "approved", "denied"]
    #: why: the policy's reason for asking, or the person's for denying
    reason: str | None = None
    #: what the call will do, as a person approves it (the diff of an edit, the full command
    #: line), made when it was requested: every view shows the same
    detail: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressRecord:
    """A piece of what a call that is still running printed (a command's output, written as
    it comes): what a resume shows of a call the process was killed in, never history."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    call_id: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorRecord:
    """Something went wrong and the session kept (or lost) its footing; for audit."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    kind: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MilestoneRecord:
    """A phase of the work ended: ``name`` (and a ``note``), said by the user or the model.
    Above the soft mark it is the preferred place for a full compaction, whose summary is
    told the phase that ended."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    name: str
    note: str | None = None
    source: Literal["user", "model"] = "user"


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkedFromRecord:
    """Always seq 1 of a forked log: its history starts as ``parent_id``'s did at
    ``through_seq`` (the end of round ``through_round``), read from the parent's log, not copied.

    A forked log numbers its own lines from 1, as every store does; in the session's lineage
    (``core._lineage``) this record stands at ``through_seq + 1`` and each later one as many
    seqs on, and every seq a record refers to (``covers_through``, retained entries, stubbed
    outputs, round ranges, manifests) is such a lineage seq.
    """

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    parent_id: str
    through_seq: int
    through_round: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RewindRecord:
    """The session continues from round ``to_round`` (whose end is ``to_seq``): the records
    between ``to_seq`` and this one stay in the log as a discarded branch that replay skips."""

    seq: int
    ts: str = field(default_factory=now_ts, compare=False)
    to_round: int
    to_seq: int


Record: TypeAlias = (
    SessionRecord
    | ItemRecord
    | RoundCommittedRecord
    | CompactionRecord
    | MicrocompactRecord
    | ProtectedRecord
    | TurnRecord
    | ErrorRecord
    | SettingsChangedRecord
    | ApprovalRecord
    | ProgressRecord
    | MilestoneRecord
    | ForkedFromRecord
    | RewindRecord
)
