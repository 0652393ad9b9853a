"""Checked summaries, pure: probes drawn from what a compaction absorbs, and the check of a
summary against them.

A probe is a sentence a summary must keep the substance of: an instruction or a correction
the user gave in a message the compaction absorbs (one it does not keep verbatim). What the
protected state and the trail of files touched hold is carried verbatim by construction and
is not probed again; calls awaiting approval are never absorbed (a compaction covers only
committed rounds). Probes outlive their compaction: each one's are carried to the next
(newest first, at most ``MAX_PROBES``), so a fact the first summary kept and the fifth one
dropped is caught when it is dropped.

A summary *keeps* a probe when every exact token of it (a number, a path, a version, an
identifier, anything quoted) appears in the summary and most of its other words do
(``WORDS_KEPT``, compared by their first letters, so "write" and "written" match). The check is a string test, deterministic and cheap: a paraphrase that
changes a value misses, one that rewords the prose does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stowage.core import HistoryEntry, UserMessage

__all__ = [
    "KEPT_HEADING", "MAX_PROBES", "WORDS_KEPT", "draw_probes", "fit_probes", "keeps",
    "kept_section", "missed_probes", "probe_focus",
]  # fmt: skip

#: probes a compaction checks (and carries to the next), newest first
MAX_PROBES = 24
#: the share of a probe's plain words a summary must hold (its exact tokens: all of them)
WORDS_KEPT = 0.6
#: the heading of what a summary gets appended when it still misses probes after a second ask
KEPT_HEADING = "Kept from the covered messages (the summary left them out):"
#: a plain word is compared by its first letters only (a crude stem: inflections still match)
_STEM = 4
#: a probe is a sentence, at most this long
_PROBE_CHARS = 300

# a sentence that tells the agent what to do, not to do, or that it was wrong
_DIRECTIVE = re.compile(
    r"\b(must|never|always|do not|don't|dont|should|shouldn't|make sure|instead|only|avoid|"
    r"prefer|remember|keep|use|stop|wrong|not|no longer|from now on)\b",
    re.IGNORECASE,
)
_CORRECTION = re.compile(r"^\s*(no\b|actually\b|wait\b|correction\b|that's wrong|not\s)", re.I)
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_WORD = re.compile(r"[\w./:@+-]+")
_TOKEN = re.compile(r"`[^`]+`|\"[^\"]+\"|'[^']+'|[\w./:@+-]+")
_STOP = frozenset(
    [
        "the",
        "a",
        "an",
        "and",
        "or",
        "but",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "is",
        "are",
        "be",
        "was",
        "were",
        "it",
        "this",
        "that",
        "these",
        "those",
        "you",
        "your",
        "we",
        "our",
        "i",
        "me",
        "my",
        "as",
        "if",
        "then",
        "than",
        "so",
        "do",
        "does",
        "did",
        "not",
        "no",
        "can",
        "will",
        "would",
        "should",
        "must",
        "never",
        "always",
        "any",
        "all",
    ]
)


@dataclass(frozen=True, slots=True)
class _Terms:
    exact: frozenset[str]
    words: frozenset[str]


def _terms(text: str) -> _Terms:
    exact: set[str] = set()
    words: set[str] = set()
    for token in _TOKEN.findall(text):
        quoted = token[0] in "`\"'" and len(token) > 2
        bare = token.strip("`\"'").strip(".,:;").lower()
        if not bare:
            continue
        if (
            quoted
            or any(c.isdigit() for c in bare)
            or any(c in bare for c in "_/@")
            or ("." in bare.strip("."))
        ):
            exact.add(bare)
        elif len(bare) >= 3 and bare not in _STOP:
            words.add(bare[:_STEM])  # "write" and "written" are one word to the check
    return _Terms(frozenset(exact), frozenset(words))


def _sentences(text: str) -> Iterable[str]:
    for part in _SENTENCE.split(text):
        part = " ".join(part.split())
        if part:
            yield part[:_PROBE_CHARS]


def _is_probe(sentence: str) -> bool:
    terms = _terms(sentence)
    if not (terms.exact or len(terms.words) >= 2):
        return False  # "ok, do not." holds nothing to check
    return bool(_DIRECTIVE.search(sentence) or _CORRECTION.search(sentence))


def draw_probes(absorbed: Sequence[HistoryEntry], carried: Sequence[str] = ()) -> tuple[str, ...]:
    """The probes a summary of ``absorbed`` (the entries it replaces and does not keep) must
    keep: the instructions and corrections of its user messages, newest first, then the
    ``carried`` ones of earlier compactions; unique, at most ``MAX_PROBES``. A pinned
    message is kept verbatim and is not probed. Raises nothing."""
    found: list[str] = []
    for entry in reversed(absorbed):
        item = entry.item
        if isinstance(item, UserMessage) and not item.pinned:
            found += [s for s in reversed(list(_sentences(item.text))) if _is_probe(s)]
    return tuple(dict.fromkeys((*found, *carried)))[:MAX_PROBES]


def keeps(summary: str, probe: str) -> bool:
    """Whether ``summary`` keeps the substance of ``probe`` (see the module docstring)."""
    wanted = _terms(probe)
    text = summary.lower()
    if not all(token in text for token in wanted.exact):
        return False
    if not wanted.words:
        return True
    # the summary's words as they stand (its quotes may pair up across sentences)
    held = {w.strip(".,:;").lower()[:_STEM] for w in _WORD.findall(summary)}
    return len(wanted.words & held) >= WORDS_KEPT * len(wanted.words)


def missed_probes(summary: str, probes: Iterable[str]) -> tuple[str, ...]:
    """The probes ``summary`` does not keep, in order. Raises nothing."""
    return tuple(p for p in probes if not keeps(summary, p))


def probe_focus(missed: Sequence[str]) -> str:
    """What a second summary request is told: the items the first summary missed."""
    listed = "\n".join(f"- {p}" for p in missed)
    return (
        "A check found the previous summary without these instructions and corrections of "
        f"the user; keep each of them, with its exact values:\n{listed}"
    )


def fit_probes(missed: Sequence[str], room: int | None) -> tuple[str, ...]:
    """The probes of ``missed`` (newest first) whose section fits in ``room`` characters
    (None: all of them). Raises nothing."""
    if room is None:
        return tuple(missed)
    fitted: list[str] = []
    for probe in missed:
        if len(kept_section([*fitted, probe])) > room:
            break
        fitted.append(probe)
    return tuple(fitted)


def kept_section(missed: Sequence[str]) -> str:
    """The section appended to a summary that still misses probes: nothing is dropped."""
    return KEPT_HEADING + "\n" + "\n".join(f"- {p}" for p in missed)
