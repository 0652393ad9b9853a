"""The summarizer's side of protected state: asking for updates and reading them back.

The summary request asks for one fenced JSON block of proposed updates after the summary; the
compactor cuts it out of the reply with ``parse_summary_updates``. A block that is not valid
JSON of the agreed shape changes nothing: its ops are dropped whole and the problem is reported,
because applying half of a block the model got wrong is a guess. Whether each well-formed op
is *allowed* is decided later, against the live state, by ``runtime._protected.prepare``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import ProtectedStateViolation
from ._protected import ProtectedState, check_op, op_target, prepare

__all__ = [
    "UPDATES_INSTRUCTIONS", "UPDATES_KEY", "Refusal", "UpdatesReview", "parse_summary_updates",
    "review_updates", "updates_block",
]  # fmt: skip

UPDATES_KEY = "protected_updates"

UPDATES_INSTRUCTIONS = f"""\
After the summary, add exactly one fenced JSON block that proposes updates to the protected \
state (its own system message near the start, if any), in this form:

```json
{{"{UPDATES_KEY}": [
  {{"op": "add_decision", "text": "<a decision and why>"}},
  {{"op": "add_failed_attempt", "what": "<what was tried>", "why": "<why it failed>"}},
  {{"op": "add_artifact", "ref": "<path, URL or id>", "note": "<what it is>"}},
  {{"op": "add_pending", "text": "<work still to do>"}},
  {{"op": "complete_pending", "id": "<id of a pending entry now done, e.g. p2>"}}
]}}
```

Use only these five ops; propose only what the transcript shows and the protected state does \
not already hold; copy exact names, paths, numbers and versions. You may not change or remove \
the objective or any constraint. Use an empty list when there is nothing to add."""

# A fenced block: ``` or ```json (any info string), up to the next fence line.
_FENCE = re.compile(r"```[^\n`]*\n(.*?)\n?```[ \t]*(?:\n|$)", re.DOTALL)


def updates_block(ops: list[dict[str, Any]]) -> str:
    """The fenced block proposing ``ops``, as a model is asked to write it. Raises nothing."""
    return "```json\n" + json.dumps({UPDATES_KEY: ops}, ensure_ascii=False) + "\n```"


def parse_summary_updates(reply: str) -> tuple[str, tuple[dict[str, Any], ...], tuple[str, ...]]:
    """Split a summarizer's reply into the summary, the proposed ops and the problems found.

    The block is the last fenced block that mentions ``protected_updates``; it is removed from
    the summary whether or not it parses. No block: no ops, no problems. A malformed block
    (not JSON, wrong shape, an unknown op, a missing or non-string field): no ops at all and
    one problem naming what is wrong. Raises nothing.
    """
    blocks = [m for m in _FENCE.finditer(reply) if UPDATES_KEY in m.group(1)]
    if not blocks:
        return reply.strip(), (), ()
    block = blocks[-1]
    summary = (reply[: block.start()] + reply[block.end() :]).strip()
    try:
        data = json.loads(block.group(1))
    except ValueError as exc:
        return summary, (), (f"protected updates block is not valid JSON: {exc}",)
    ops = data.get(UPDATES_KEY) if isinstance(data, dict) else None
    if not isinstance(ops, list):
        return summary, (), (f"protected updates block must hold a list under {UPDATES_KEY!r}",)
    for op in ops:
        try:
            check_op(op)
        except ProtectedStateViolation as exc:
            return summary, (), (f"protected updates block rejected: {exc}",)
    return summary, tuple(dict(op) for op in ops), ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """One summarizer op that may not apply: the entry at stake and why."""

    entry: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdatesReview:
    """The summarizer's proposals checked against the state: the state after the allowed ops,
    those ops in canonical form (to log), and the refused ones."""

    state: ProtectedState
    ops: tuple[dict[str, Any], ...]
    refused: tuple[Refusal, ...]


def review_updates(state: ProtectedState, ops: Iterable[Mapping[str, Any]]) -> UpdatesReview:
    """Apply the summarizer's ``ops`` that it may make, one by one; refuse the others.

    Unlike a user's command (all or nothing), one bad proposal does not sink the rest: the
    summary it came with is still worth having, and each refusal is named. Raises nothing.
    """
    canonical: list[dict[str, Any]] = []
    refused: list[Refusal] = []
    for op in ops:
        try:
            prepared = prepare(state, op, "summarizer")
        except ProtectedStateViolation as exc:
            refused.append(Refusal(entry=op_target(state, op), reason=str(exc)))
            continue
        if prepared is not None:
            state = state.apply(prepared)
            canonical.append(prepared)
    return UpdatesReview(state=state, ops=tuple(canonical), refused=tuple(refused))
