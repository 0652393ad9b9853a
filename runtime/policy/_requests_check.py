"""``stowage check --requests``: does the log rebuild every request a round recorded sending?

A round's manifest (``RequestManifest``) says what its request was built from. Replaying the
log to the moment that round began (its first record) and projecting gives the input again;
its sections and input hash must equal the recorded ones. The tools and the request's
settings are not in the log: their hashes are reported as recorded, not rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stowage.core import (
    CorruptLogError,
    ItemRecord,
    ModelRequest,
    Record,
    RequestManifest,
    RoundCommittedRecord,
    SessionState,
    build_projection,
    render,
    request_manifest,
)

__all__ = ["RequestsReport", "check_requests"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestsReport:
    """How many rounds' requests were rebuilt and matched, how many had no manifest, and
    what differed (one line per round)."""

    session_id: str
    checked: int
    unrecorded: int
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def check_requests(session_id: str, records: Sequence[Record]) -> RequestsReport:
    """Rebuild the input of every round that recorded a manifest and compare.

    A round's request is rebuilt from the state before its first record (an item of the
    round, or its ``round_committed`` record when the response wrote no item).
    """
    state = SessionState(session_id=session_id)
    rebuilt: dict[int, RequestManifest] = {}
    checked = unrecorded = 0
    problems: list[str] = []
    try:
        for record in records:
            round_ = _round_of(record)
            if round_ is not None and round_ not in rebuilt:
                rebuilt[round_] = _manifest_now(state)
            if isinstance(record, RoundCommittedRecord):
                if record.manifest is None:
                    unrecorded += 1
                else:
                    checked += 1
                    problem = _compare(record.round, record.manifest, rebuilt.get(record.round))
                    if problem is not None:
                        problems.append(problem)
            state.apply(record)
    except CorruptLogError as exc:
        problems.append(f"replay failed: {exc}")
    return RequestsReport(
        session_id=session_id, checked=checked, unrecorded=unrecorded, problems=tuple(problems)
    )


def _round_of(record: Record) -> int | None:
    if isinstance(record, ItemRecord):
        return record.round
    if isinstance(record, RoundCommittedRecord):
        return record.round
    return None


def _manifest_now(state: SessionState) -> RequestManifest:
    protected = render(state.protected) or None
    items = build_projection(state.history, stubbed=state.stubbed, protected_text=protected)
    request = ModelRequest(model="", input=items)
    return request_manifest(request, state.history, has_protected=protected is not None)


def _compare(round_: int, recorded: RequestManifest, rebuilt: RequestManifest | None) -> str | None:
    if rebuilt is None:  # pragma: no cover - a commit always has a round number
        return f"round {round_}: no state to rebuild its request from"
    if recorded.input_sha256 == rebuilt.input_sha256:
        return None
    want = [s for s in recorded.sections if s.name != "tools"]
    have = list(rebuilt.sections)
    for n, (a, b) in enumerate(zip(want, have, strict=False)):
        if a != b:
            return (
                f"round {round_}: the request differs from what the log rebuilds at section "
                f"{n + 1} ({a.name}, seqs {a.first_seq}-{a.last_seq}, {a.items} items, "
                f"{a.sha256}); rebuilt: {b.name}, seqs {b.first_seq}-{b.last_seq}, "
                f"{b.items} items, {b.sha256}"
            )
    return (
        f"round {round_}: the request had {len(want)} input sections, the log rebuilds {len(have)}"
    )
