"""Checked summaries, pure: which sentences become probes, when a summary keeps one, and
that the appended section leaves nothing missing, whatever the summary said."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from stowage.core import AssistantMessage, HistoryEntry, SummaryCheck, UserMessage
from stowage.policy import draw_probes, fit_probes, kept_section, missed_probes, probe_focus
from stowage.policy._probes import MAX_PROBES, keeps

INSTRUCTIONS = (
    "Never run the migration on the prod replica db-7.",
    "Use Python 3.12 only, not 3.13.",
    "Actually, the timeout is 37 s, not 30 s.",
    "Always write results to out/results.csv.",
    "Do not touch the vendored `libfoo` directory.",
    "Make sure the retry budget stays at 450 ms.",
)
CHATTER = ("Thanks, that looks good.", "Hello there.", "What do you think?", "ok.")

sentences = st.lists(st.sampled_from(INSTRUCTIONS + CHATTER), min_size=1, max_size=6)
messages = st.lists(
    st.tuples(sentences, st.booleans()).map(
        lambda m: UserMessage(text=" ".join(m[0]), pinned=m[1])
    ),
    max_size=8,
)


def entries(users: list[UserMessage]) -> list[HistoryEntry]:
    out: list[HistoryEntry] = []
    for n, user in enumerate(users):
        out.append(HistoryEntry(seq=2 * n + 1, item=user))
        out.append(HistoryEntry(seq=2 * n + 2, item=AssistantMessage(text="done")))
    return out


@given(messages, st.lists(st.sampled_from(INSTRUCTIONS), max_size=4))
def test_probes_are_the_instructions_of_unpinned_messages_newest_first(
    users: list[UserMessage], carried: list[str]
) -> None:
    probes = draw_probes(entries(users), carried)
    assert len(probes) == len(set(probes)) <= MAX_PROBES
    assert not set(probes) & set(CHATTER), "a sentence without an instruction became a probe"
    drawn = [p for p in probes if p not in carried]
    for probe in drawn:
        assert any(probe in u.text for u in users if not u.pinned)
    # the newest message's instructions come first
    newest = next((u for u in reversed(users) if not u.pinned), None)
    if newest is not None:
        own = [s for s in INSTRUCTIONS if s in newest.text]
        if own:
            assert probes[0] in own


@given(st.lists(st.sampled_from(INSTRUCTIONS), min_size=1, unique=True), st.text(max_size=200))
def test_the_appended_section_leaves_nothing_missing(probes: list[str], summary: str) -> None:
    missed = missed_probes(summary, probes)
    assert missed_probes(f"{summary}\n\n{kept_section(missed)}", probes) == ()
    # and the second ask names every one it wants kept
    focus = probe_focus(missed)
    assert all(p in focus for p in missed)


@given(st.sampled_from(INSTRUCTIONS))
def test_a_summary_keeps_a_probe_it_quotes_or_rewords_but_not_one_with_a_value_changed(
    probe: str,
) -> None:
    assert keeps(f"Goals so far. {probe} More notes.", probe)
    assert keeps(probe.upper(), probe)
    for old, new in (("37", "30"), ("3.12", "3.11"), ("db-7", "db-8"), ("450", "500")):
        if old in probe:
            assert not keeps(probe.replace(old, new), probe)


def test_a_summary_that_drops_a_sentence_misses_it() -> None:
    summary = "The user wants results written to out/results.csv. They asked about Python versions."
    assert missed_probes(summary, INSTRUCTIONS[:4]) == (
        INSTRUCTIONS[0],
        INSTRUCTIONS[1],
        INSTRUCTIONS[2],
    )


@given(st.lists(st.sampled_from(INSTRUCTIONS), unique=True), st.integers(0, 400) | st.none())
def test_what_is_appended_fits_its_room_newest_first(missed: list[str], room: int | None) -> None:
    fitted = fit_probes(missed, room)
    assert list(fitted) == missed[: len(fitted)], "not the newest first"
    if room is None:
        assert list(fitted) == missed
    elif fitted:
        assert len(kept_section(fitted)) <= room
    if room is not None and len(fitted) < len(missed):
        # the next one would not have fitted
        assert len(kept_section([*fitted, missed[len(fitted)]])) > room


def test_a_check_names_what_it_left_out_for_room() -> None:
    check = SummaryCheck(
        probes=INSTRUCTIONS[:4],
        missed_first=INSTRUCTIONS[:3],
        asked_again=True,
        appended=INSTRUCTIONS[:1],
        left_out=INSTRUCTIONS[1:3],
    )
    assert check.line == (
        "the summary missed 3 of 4 probes; asked once more; 3 still missing, 1 appended, "
        "2 left out for room (named on the compaction record)"
    )
