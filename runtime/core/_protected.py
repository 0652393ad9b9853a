"""Protected state: the facts no compaction may drop, kept outside the summary.

A summary is a lossy paraphrase; repeated summaries of summaries drift. So the user's objective
and constraints, and what the session learned that must not be relearned (decisions, failed
attempts, artifacts, pending and completed work), are typed entries with stable ids, changed
only by explicit ops that the log records (``ProtectedRecord.ops``), rendered verbatim into
every request, and checked after every compaction.

Who may do what is part of the value, not of the caller: the user may do anything; the
summarizer may only append (decisions, failed attempts, artifacts, pending) and move pending to
completed. It can never touch the objective or a constraint.

Ops are plain JSON dicts, because they are logged as they are:

=====================  ==========================  =========================
op                     fields                      who
=====================  ==========================  =========================
``set_objective``      ``text``                    user
``add_constraint``     ``text``                    user
``drop_constraint``    ``id``                      user
``add_decision``       ``text``                    user, summarizer
``add_failed_attempt`` ``what``, ``why``           user, summarizer
``add_artifact``       ``ref``, ``note`` (opt.)    user, summarizer
``add_pending``        ``text``                    user, summarizer
``complete_pending``   ``id``                      user, summarizer
``touch``              ``kind``, ``target``,       tools
                       ``status`` (opt.)
=====================  ==========================  =========================

``touch`` is the trail of files touched, kept by construction: the runtime writes one for
each path a tool call read, listed, searched, wrote or edited and each command it ran (with
its exit status), from what the tool declares it touches, never from a summary. The trail is
newest first, one line per path or command (what was done to it merged), its oldest lines
folded into one "and N earlier" line past ``TOUCHED_KEPT``. A touch lands in ``fresh`` and
is rendered only once a compaction has carried it (``carried``): until then the call that
made it is in the history, and the protected message, which opens every request, does not
change under the provider's prompt cache every round.

``prepare`` checks an op against the state and its source and gives the canonical op to log
(with the new entry's id filled in); ``ProtectedState.apply`` folds a canonical op and is what
replay runs, so the live state and the replayed one are the same function of the same log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

from ._errors import ProtectedStateViolation
from ._items import AssistantMessage, CompactionSummary, Item, SystemMessage, UserMessage

__all__ = [
    "SUMMARIZER_OPS", "TOOL_OPS", "TOUCHED_KEPT", "Touched", "USER_ONLY_OPS", "EntryKind",
    "ProtectedEntry", "ProtectedSource", "ProtectedState", "check_op", "op_target", "prepare",
    "prepare_all", "render", "render_touched", "user_ops", "verify",
]  # fmt: skip

ProtectedSource: TypeAlias = Literal["user", "summarizer", "tools"]
EntryKind: TypeAlias = Literal[
    "objective", "constraint", "decision", "completed", "pending", "failed_attempt", "artifact"
]

#: ops only the user may make: the objective and the constraints are the user's word
USER_ONLY_OPS = frozenset({"set_objective", "add_constraint", "drop_constraint"})
#: ops the summarizer may propose in the JSON block of its reply
SUMMARIZER_OPS = frozenset(
    {"add_decision", "add_failed_attempt", "add_artifact", "add_pending", "complete_pending"}
)
#: ops only the runtime makes, from the tool calls: the trail of files touched
TOOL_OPS = frozenset({"touch"})
_OPS = USER_ONLY_OPS | SUMMARIZER_OPS | TOOL_OPS
#: lines of the trail of files touched kept whole; older ones fold into one line
TOUCHED_KEPT = 30
#: what the folded line names of the older paths, at most
_EARLIER_NAMED = 40
#: what a call does to a target, in the order a trail line says it
_TOUCH_KINDS = ("read", "list", "search", "write", "edit", "run")

# The text fields each op needs (and the optional ones), all strings.
_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "set_objective": (("text",), ()),
    "add_constraint": (("text",), ()),
    "drop_constraint": (("id",), ()),
    "add_decision": (("text",), ()),
    "add_failed_attempt": (("what", "why"), ()),
    "add_artifact": (("ref",), ("note",)),
    "add_pending": (("text",), ()),
    "complete_pending": (("id",), ()),
    "touch": (("kind", "target"), ("status",)),
}
# id prefix of each kind; completed entries keep the id they had while pending
_PREFIX: dict[str, str] = {
    "objective": "o",
    "constraint": "c",
    "decision": "d",
    "pending": "p",
    "failed_attempt": "f",
    "artifact": "a",
}
_SECTIONS: tuple[tuple[EntryKind, str], ...] = (
    ("objective", "Objective"),
    ("constraint", "Constraints (the user's word: always hold)"),
    ("decision", "Decisions"),
    ("completed", "Completed"),
    ("pending", "Pending"),
    ("failed_attempt", "Failed attempts (do not repeat)"),
    ("artifact", "Artifacts"),
)
_HEADER = (
    "# Protected state\n"
    "Kept verbatim through every compaction; it outranks any summary. Objective and "
    "constraints come from the user and always hold; failed attempts must not be repeated."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedEntry:
    """One protected fact. ``detail`` is the why of a failed attempt or an artifact's note."""

    id: str
    kind: EntryKind
    text: str
    detail: str = ""

    @property
    def line(self) -> str:
        """The entry as rendered, verbatim: what must appear in every projection."""
        if self.kind == "failed_attempt":
            return f"[{self.id}] {self.text} -- failed because: {self.detail}"
        if self.kind == "artifact" and self.detail:
            return f"[{self.id}] {self.text} -- {self.detail}"
        return f"[{self.id}] {self.text}"

    def to_json(self) -> dict[str, str]:
        """A JSON object of the entry (for snapshots). Raises nothing."""
        out = {"id": self.id, "kind": self.kind, "text": self.text}
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Touched:
    """One line of the trail of files touched: a path and what the session's calls did to it
    (``read``, ``edit``, ...), or a command it ran (``kinds == ("run",)``) and how it ended."""

    target: str
    kinds: tuple[str, ...]
    status: str = ""

    @property
    def is_command(self) -> bool:
        return self.kinds == ("run",)

    @property
    def line(self) -> str:
        """The line as rendered, verbatim."""
        if self.is_command:
            return f"ran `{self.target}`" + (f" ({self.status})" if self.status else "")
        said = "/".join(self.kinds) + f" {self.target}"
        return said + (f" ({self.status})" if self.status else "")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.target, "kinds": list(self.kinds)}
        if self.status:
            out["status"] = self.status
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedState:
    """The protected facts of a session: an immutable value, changed by ``apply``.

    ``serial`` is the highest number ever given per id prefix, so ids are never reused (a
    dropped ``c2`` stays ``c2`` in the log; the next constraint is ``c3``).
    """

    objective: ProtectedEntry | None = None
    constraints: tuple[ProtectedEntry, ...] = ()
    decisions: tuple[ProtectedEntry, ...] = ()
    completed: tuple[ProtectedEntry, ...] = ()
    pending: tuple[ProtectedEntry, ...] = ()
    failed_attempts: tuple[ProtectedEntry, ...] = ()
    artifacts: tuple[ProtectedEntry, ...] = ()
    serial: Mapping[str, int] = field(default_factory=dict)
    #: the trail of files touched, newest first (``touch`` ops), at most ``TOUCHED_KEPT``
    touched: tuple[Touched, ...] = ()
    #: how many older lines were folded, and the paths they named (newest first, bounded)
    earlier: int = 0
    earlier_named: tuple[str, ...] = ()
    #: lines touched since the last compaction, newest first: not rendered (the calls that
    #: touched them are still in the history), so the protected message, which opens every
    #: request, stays the same between compactions and the provider's prompt cache holds;
    #: a compaction folds them in (``carried``)
    fresh: tuple[Touched, ...] = ()
    #: characters the rendered trail may take (None: all of it): set by the compaction that
    #: carried it from the room its window left, so the trail never costs a turn that fits
    #: its window; the lines past it are kept, and shown again when a compaction has room
    shown: int | None = None

    @property
    def entries(self) -> tuple[ProtectedEntry, ...]:
        """Every entry, in rendering order."""
        lead = (self.objective,) if self.objective is not None else ()
        return (
            *lead,
            *self.constraints,
            *self.decisions,
            *self.completed,
            *self.pending,
            *self.failed_attempts,
            *self.artifacts,
        )

    def __bool__(self) -> bool:
        return bool(self.entries) or bool(self.touched) or bool(self.fresh)

    def find(self, entry_id: str) -> ProtectedEntry | None:
        """The entry with ``entry_id``, or None. Raises nothing."""
        return next((e for e in self.entries if e.id == entry_id), None)

    def apply(self, op: Mapping[str, Any]) -> ProtectedState:
        """The state after the canonical ``op`` (ids filled in, as ``prepare`` gives it).

        Raises ``ProtectedStateViolation`` for an unknown op, a missing or non-string field,
        an id already taken, or an id that names no entry of the right kind.
        """
        name = check_op(op)
        if name == "touch":
            return self._touch(str(op["kind"]), str(op["target"]), str(op.get("status", "")))
        if name in ("drop_constraint", "complete_pending"):
            return self._remove_or_move(name, str(op["id"]))
        entry = _entry_for(name, op)
        if "id" not in op:
            raise ProtectedStateViolation(f"{name} needs an id to be applied; prepare() gives one")
        if entry.id[:1] != _PREFIX[entry.kind] or _number(entry.id) < 1:
            raise ProtectedStateViolation(f"{name}: id {entry.id!r} is not a {entry.kind} id")
        if _number(entry.id) <= self.serial.get(entry.id[:1], 0):
            raise ProtectedStateViolation(f"{name}: id {entry.id!r} was given before")
        serial = {**self.serial, entry.id[:1]: _number(entry.id)}
        match entry.kind:
            case "objective":
                return replace(self, objective=entry, serial=serial)
            case "constraint":
                return replace(self, constraints=(*self.constraints, entry), serial=serial)
            case "decision":
                return replace(self, decisions=(*self.decisions, entry), serial=serial)
            case "pending":
                return replace(self, pending=(*self.pending, entry), serial=serial)
            case "failed_attempt":
                return replace(self, failed_attempts=(*self.failed_attempts, entry), serial=serial)
            case _:
                return replace(self, artifacts=(*self.artifacts, entry), serial=serial)

    def apply_all(self, ops: Iterable[Mapping[str, Any]]) -> ProtectedState:
        """``apply`` each op in order. Raises as ``apply`` does."""
        state = self
        for op in ops:
            state = state.apply(op)
        return state

    def _touch(self, kind: str, target: str, status: str) -> ProtectedState:
        """``fresh`` with ``target`` moved to its front, what was done to it merged."""
        if kind not in _TOUCH_KINDS:
            raise ProtectedStateViolation(f"touch: kind {kind!r} is not one of {_TOUCH_KINDS}")
        return replace(
            self, fresh=_merged(self.fresh, Touched(target=target, kinds=(kind,), status=status))
        )

    def carried(self, shown: int | None = None) -> ProtectedState:
        """The state a compaction carries: the lines touched since the last one folded into
        the trail (newest first, the oldest past ``TOUCHED_KEPT`` into one line), rendered
        in at most ``shown`` characters (None: all). Raises nothing."""
        if not self.fresh:
            if not self.touched or self.shown == shown:
                return self  # no trail: nothing to show, the state stays as it is
            return replace(self, shown=shown)
        trail = self.touched
        for line in reversed(self.fresh):  # oldest first, so the newest ends in front
            trail = _merged(trail, line)
        if len(trail) <= TOUCHED_KEPT:
            return replace(self, touched=trail, fresh=(), shown=shown)
        folded = trail[TOUCHED_KEPT:]
        named = tuple(dict.fromkeys((*(t.target for t in folded), *self.earlier_named)))
        return replace(
            self,
            touched=trail[:TOUCHED_KEPT],
            fresh=(),
            shown=shown,
            earlier=self.earlier + len(folded),
            earlier_named=named[:_EARLIER_NAMED],
        )

    def _remove_or_move(self, name: str, entry_id: str) -> ProtectedState:
        if name == "drop_constraint":
            kept = tuple(e for e in self.constraints if e.id != entry_id)
            if len(kept) == len(self.constraints):
                raise ProtectedStateViolation(f"drop_constraint: no constraint {entry_id!r}")
            return replace(self, constraints=kept)
        entry = next((e for e in self.pending if e.id == entry_id), None)
        if entry is None:
            raise ProtectedStateViolation(f"complete_pending: no pending entry {entry_id!r}")
        return replace(
            self,
            pending=tuple(e for e in self.pending if e.id != entry_id),
            completed=(*self.completed, replace(entry, kind="completed")),
        )

    def snapshot(self) -> dict[str, Any]:
        """The state as a JSON object, for ``CompactionRecord.protected``: what ``carried``
        gives, so a snapshot never holds ``fresh`` lines. Raises nothing."""
        if self.fresh:
            return self.carried(self.shown).snapshot()
        out: dict[str, Any] = {
            "v": 1,
            "entries": [e.to_json() for e in self.entries],
            "serial": dict(sorted(self.serial.items())),
        }
        if self.touched:
            out["touched"] = [t.to_json() for t in self.touched]
        if self.earlier:
            out["earlier"] = {"count": self.earlier, "named": list(self.earlier_named)}
        if self.shown is not None:
            out["shown"] = self.shown
        return out

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any]) -> ProtectedState:
        """The state a ``snapshot`` describes.

        Raises ``ProtectedStateViolation`` when it is not one (wrong version, bad entries).
        """
        if data.get("v") != 1 or not isinstance(data.get("entries"), list):
            raise ProtectedStateViolation(f"not a protected-state snapshot: {dict(data)!r}")
        by_kind: dict[str, list[ProtectedEntry]] = {kind: [] for kind, _ in _SECTIONS}
        for raw in data["entries"]:
            if not isinstance(raw, dict) or raw.get("kind") not in by_kind:
                raise ProtectedStateViolation(f"bad protected entry in snapshot: {raw!r}")
            values = [raw.get("id"), raw.get("text"), raw.get("detail", "")]
            if not all(isinstance(v, str) for v in values):
                raise ProtectedStateViolation(f"bad protected entry in snapshot: {raw!r}")
            by_kind[raw["kind"]].append(
                ProtectedEntry(id=raw["id"], kind=raw["kind"], text=raw["text"], detail=values[2])
            )
        serial = data.get("serial", {})
        if not isinstance(serial, dict) or not all(isinstance(v, int) for v in serial.values()):
            raise ProtectedStateViolation(f"bad serial in protected snapshot: {serial!r}")
        objectives = by_kind["objective"]
        touched, earlier, named = _trail_from_snapshot(data)
        return cls(
            objective=objectives[-1] if objectives else None,
            constraints=tuple(by_kind["constraint"]),
            decisions=tuple(by_kind["decision"]),
            completed=tuple(by_kind["completed"]),
            pending=tuple(by_kind["pending"]),
            failed_attempts=tuple(by_kind["failed_attempt"]),
            artifacts=tuple(by_kind["artifact"]),
            serial=dict(serial),
            touched=touched,
            earlier=earlier,
            earlier_named=named,
            shown=_shown(data.get("shown")),
        )


def _shown(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise ProtectedStateViolation(f"bad trail size in protected snapshot: {value!r}")


def _merged(trail: tuple[Touched, ...], line: Touched) -> tuple[Touched, ...]:
    """``trail`` with ``line`` at its front, merged with the line it had for the same path."""
    old = next(
        (t for t in trail if t.target == line.target and t.is_command == line.is_command), None
    )
    if old is None:
        return (line, *trail)
    kinds = tuple(k for k in _TOUCH_KINDS if k in old.kinds or k in line.kinds)
    merged = Touched(target=line.target, kinds=kinds, status=line.status or old.status)
    return (merged, *(t for t in trail if t is not old))


def _trail_from_snapshot(
    data: Mapping[str, Any],
) -> tuple[tuple[Touched, ...], int, tuple[str, ...]]:
    raw = data.get("touched", [])
    earlier = data.get("earlier", {"count": 0, "named": []})
    try:
        touched = tuple(
            Touched(target=t["target"], kinds=tuple(t["kinds"]), status=t.get("status", ""))
            for t in raw
        )
        count, named = int(earlier["count"]), tuple(str(n) for n in earlier["named"])
    except (TypeError, KeyError, ValueError):
        raise ProtectedStateViolation(f"bad trail in protected snapshot: {raw!r}") from None
    if not all(isinstance(t.target, str) and set(t.kinds) <= set(_TOUCH_KINDS) for t in touched):
        raise ProtectedStateViolation(f"bad trail in protected snapshot: {raw!r}")
    return touched, count, named


def prepare(
    state: ProtectedState, op: Mapping[str, Any], source: ProtectedSource
) -> dict[str, Any] | None:
    """Check ``op`` from ``source`` against ``state``; the canonical op to log and apply. An add
    op gets the next id of its kind: ids are the runtime's, never the model's."""
    name = check_op(op)
    if (name in TOOL_OPS) != (source == "tools"):
        raise ProtectedStateViolation(
            f"{name}: the trail of files touched is written by the runtime from the tool "
            "calls, and nothing else"
            if name in TOOL_OPS
            else f"the tool calls may only add to the trail of files touched, not {name}"
        )
    if name in TOOL_OPS:
        canonical = {k: op[k] for k in ("op", "kind", "target", "status") if k in op}
        state.apply(canonical)  # raises on a kind that is not one
        return canonical
    if source == "summarizer" and name not in SUMMARIZER_OPS:
        raise ProtectedStateViolation(
            f"the summarizer may not {name.replace('_', ' ')} ({op_target(state, op)}): "
            "objective and constraints change only by the user's word"
        )
    if name in ("drop_constraint", "complete_pending"):
        canonical = {"op": name, "id": op["id"]}
        state.apply(canonical)  # raises, naming the id, when there is no such entry
        return canonical
    entry = _entry_for(name, {**op, "id": "x0"})
    same_kind = tuple(e for e in state.entries if e.kind == entry.kind)
    if entry.kind == "pending":
        same_kind += state.completed  # completed work is not pending again
    if any(e.text == entry.text and e.detail == entry.detail for e in same_kind):
        return None
    prefix = _PREFIX[entry.kind]
    fields = {k: op[k] for k in (*_FIELDS[name][0], *_FIELDS[name][1]) if k in op}
    return {"op": name, "id": f"{prefix}{state.serial.get(prefix, 0) + 1}", **fields}


def prepare_all(
    state: ProtectedState, ops: Iterable[Mapping[str, Any]], source: ProtectedSource
) -> tuple[ProtectedState, tuple[dict[str, Any], ...]]:
    """``prepare`` and apply each op in turn; the new state and the canonical ops.

    All or nothing: raises ``ProtectedStateViolation`` on the first op that may not apply.
    """
    canonical: list[dict[str, Any]] = []
    for op in ops:
        prepared = prepare(state, op, source)
        if prepared is not None:
            state = state.apply(prepared)
            canonical.append(prepared)
    return state, tuple(canonical)


def user_ops(
    *,
    objective: str | None = None,
    add_constraints: Iterable[str] = (),
    drop_constraints: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The ops of a user's change, in the order they apply: drops, objective, additions.

    Dropping first lets one command replace a constraint. Raises nothing.
    """
    ops: list[dict[str, Any]] = [{"op": "drop_constraint", "id": i} for i in drop_constraints]
    if objective is not None:
        ops.append({"op": "set_objective", "text": objective})
    ops += [{"op": "add_constraint", "text": text} for text in add_constraints]
    return ops


def render(state: ProtectedState) -> str:
    """The protected message: every entry's ``line``, by section, deterministic.

    Empty string for an empty state, or one whose trail is all it has and is not shown. The
    trail's ``fresh`` lines are not rendered (see ``ProtectedState.fresh``). Raises nothing.
    """
    trail = render_touched(state)
    if not (state.entries or trail):
        return ""
    parts = [_HEADER]
    entries = state.entries
    for kind, title in _SECTIONS:
        lines = [f"- {e.line}" for e in entries if e.kind == kind]
        if lines:
            parts.append(f"{title}:\n" + "\n".join(lines))
    if trail:
        parts.append(trail)
    return "\n\n".join(parts)


_TRAIL_HEADING = "Files touched (from the tool calls, newest first):"


def render_touched(state: ProtectedState) -> str:
    """The trail's section of the protected message, in at most ``state.shown`` characters:
    its newest lines that fit, then how many more there are (empty without a trail, or
    without room for one line). Raises nothing."""
    if not state.touched:
        return ""
    lines = [f"- {t.line}" for t in state.touched]
    if state.earlier:
        more = "…" if state.earlier > len(state.earlier_named) else ""
        lines.append(f"- and {state.earlier} earlier: {', '.join(state.earlier_named)}{more}")
    whole = "\n".join((_TRAIL_HEADING, *lines))
    if state.shown is None or len(whole) <= state.shown:
        return whole
    kept = [_TRAIL_HEADING]
    for index, line in enumerate(lines):
        rest = len(state.touched) - index + state.earlier
        tail = f"- and {rest} more (stowage context lists them)"
        if len("\n".join((*kept, line, tail))) > state.shown:
            if len(kept) == 1:
                return ""
            return "\n".join((*kept, tail))
        kept.append(line)
    return "\n".join(kept)  # pragma: no cover - the whole trail fitted above


def verify(state: ProtectedState, items: Sequence[Item]) -> tuple[ProtectedEntry, ...]:
    """The entries of ``state`` whose ``line`` appears verbatim in no item of ``items``.

    Empty when the projection keeps every protected fact. Raises nothing.
    """
    texts = [
        item.text
        for item in items
        if isinstance(item, SystemMessage | UserMessage | AssistantMessage | CompactionSummary)
    ]
    missing = tuple(e for e in state.entries if not any(e.line in text for text in texts))
    trail = render_touched(state)
    if trail and not any(trail in text for text in texts):
        missing += (ProtectedEntry(id="touched", kind="artifact", text=trail),)
    return missing


def check_op(op: Mapping[str, Any]) -> str:
    """The name of ``op`` when it is well formed (a known op, its fields present strings)."""
    name = op.get("op") if isinstance(op, Mapping) else None
    if not isinstance(name, str) or name not in _OPS:
        raise ProtectedStateViolation(f"unknown protected-state op: {op!r}")
    required, optional = _FIELDS[name]
    for key in (*required, *optional, *(("id",) if "id" in op else ())):
        if key in op and not isinstance(op[key], str):
            raise ProtectedStateViolation(f"{name}: {key!r} must be a string, got {op[key]!r}")
    for key in required:
        if key not in op or not op[key].strip():
            raise ProtectedStateViolation(f"{name}: {key!r} is missing or empty")
    return name


def op_target(state: ProtectedState, op: Mapping[str, Any]) -> str:
    """The entry an op is aimed at, for messages and events."""
    name = op.get("op") if isinstance(op, Mapping) else None
    if name == "set_objective":
        return state.objective.id if state.objective is not None else "objective"
    if name == "add_constraint":
        return "constraints"
    if isinstance(op.get("id"), str):
        return str(op["id"])
    return str(name).removeprefix("add_") if isinstance(name, str) else "?"


def _entry_for(name: str, op: Mapping[str, Any]) -> ProtectedEntry:
    entry_id = str(op.get("id", ""))
    match name:
        case "set_objective":
            return ProtectedEntry(id=entry_id, kind="objective", text=op["text"])
        case "add_constraint":
            return ProtectedEntry(id=entry_id, kind="constraint", text=op["text"])
        case "add_decision":
            return ProtectedEntry(id=entry_id, kind="decision", text=op["text"])
        case "add_pending":
            return ProtectedEntry(id=entry_id, kind="pending", text=op["text"])
        case "add_failed_attempt":
            return ProtectedEntry(
                id=entry_id, kind="failed_attempt", text=op["what"], detail=op["why"]
            )
        case _:
            return ProtectedEntry(
                id=entry_id, kind="artifact", text=op["ref"], detail=op.get("note", "")
            )


def _number(entry_id: str) -> int:
    digits = entry_id[1:]
    return int(digits) if digits.isdigit() else -1
