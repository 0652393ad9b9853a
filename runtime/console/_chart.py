"""The tokens-in-use chart as plain numbers for an SVG template: drawn on the server, so the
page needs no chart library and works offline.

A chart stays small whatever the session's length: past ``MAX_POINTS`` rounds it draws the
highest round of each run of rounds (the peaks are what the watermarks are about), and the
compactions that fall on one pixel share one marker. Every point above the hard mark is
marked with what followed it: the compaction that brought the session back, with that
compaction's figures as its record holds them, or the error that stopped the turn.
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._cards import CompactionCard
from ._views import ChartPoint, Milestone

__all__ = ["MAX_POINTS", "Chart", "Over", "chart_geometry"]

WIDTH, HEIGHT = 900, 260
#: the right margin holds the watermark labels, beside their lines rather than on them
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 100, 14, 30
#: a point more than this many times the scale the rest of the chart needs is off scale
_OUTLIER = 1.5
#: the least vertical distance between two watermark labels, in SVG units
_LABEL_GAP = 15.0
#: the highest a label's baseline may sit: a line of text below the top edge
_LABEL_TOP = 11.0
#: the most points one chart draws: two pixels each across the plot
MAX_POINTS = (WIDTH - _LEFT - _RIGHT) // 2
#: compaction markers closer than this many SVG units are drawn as one
_EVENT_GAP = 3.0
#: room a marked point's label needs on its right, in SVG units
_LABEL_ROOM = 60
#: above this many compaction markers, they are ticks on the axis rather than lines
_SPARSE_EVENTS = 40
#: above this many points, each is drawn smaller
_SPARSE_POINTS = 120
#: above this many marked points, each keeps its ring and tooltip but not its text label
_LABELLED_OVERS = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class Over:
    """A point above the hard mark and what followed it."""

    x: float
    y: float
    point: ChartPoint
    #: its tokens as a fraction of its usable budget
    share: float
    #: the compaction (or microcompaction) after it, None when none followed
    card: CompactionCard | None
    #: the tooltip: the point's figure, then what followed, in the log's figures
    note: str
    #: the text drawn beside it ("" when too many points are marked to label each)
    label: str
    #: where the label starts, and which way it runs ("start", or "end" near the right edge,
    #: clear of the watermark labels)
    label_x: float = 0.0
    anchor: str = "start"


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    """Coordinates for ``session.html``'s SVG; empty ``points`` when nothing was committed."""

    width: int
    height: int
    points: tuple[tuple[float, float, ChartPoint], ...]
    polyline: str
    #: (y, label, css class, label y) of each watermark line; labels are moved apart so
    #: they never overlap, and sit in the right margin, clear of every line
    marks: tuple[tuple[float, str, str, float], ...]
    #: (x, y) of each point above the scale, drawn at the top edge with a marker; its
    #: tooltip gives the real figure
    clipped: tuple[tuple[float, float, ChartPoint], ...]
    #: (x, label, css class) of each compaction marker (compactions on one pixel share one)
    events: tuple[tuple[float, str, str], ...]
    #: (x, label) of each milestone: the phase that ended there
    milestones: tuple[tuple[float, str], ...]
    #: (y, label) of the vertical axis ticks
    ticks: tuple[tuple[float, str], ...]
    x_labels: tuple[tuple[float, str], ...]
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    #: each drawn point above the hard mark, with what followed it
    overs: tuple[Over, ...] = ()
    #: too many compaction markers for full-height lines: drawn as ticks on the round axis
    dense_events: bool = False
    #: the radius of each point (smaller when many are drawn)
    point_radius: float = 3
    #: rounds each drawn point stands for (1: every round is drawn; more: the highest of each
    #: run of that many rounds)
    per_point: int = 1
    #: the one round of a one-round session, labelled with its figure
    single: str = ""

    @property
    def listed_overs(self) -> tuple[Over, ...]:
        """The marked points to list under the chart in words: all of them, when few."""
        return self.overs if len(self.overs) <= _LABELLED_OVERS else ()


def chart_geometry(
    points: Sequence[ChartPoint],
    cards: Sequence[CompactionCard],
    marks: dict[str, float],
    usable: int | None,
    milestones: Sequence[Milestone] = (),
    stops: Sequence[tuple[int, str]] = (),
) -> Chart:
    """Place ``points`` (tokens per round), the watermarks of ``usable`` and the compactions;
    ``stops`` are (seq, message) of error records, what followed a point no compaction did. Raises
    nothing."""
    drawn, per_point = _thin(points)
    top_value = _scale([p.tokens for p in drawn], usable)
    rounds = [p.round for p in points] + [c.round for c in cards] + [m.round for m in milestones]
    first, last = (min(rounds), max(rounds)) if rounds else (0, 1)
    # one round: the axis runs from the round before to the round after, the point between
    low, high = (first - 1, last + 1) if first == last else (first, last)
    span = high - low
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM

    def x(round_: float) -> float:
        return round(_LEFT + (round_ - low) / span * plot_w, 1)

    def y(tokens: float) -> float:
        return round(_TOP + plot_h - tokens / top_value * plot_h, 1)

    placed = tuple((x(p.round), y(min(p.tokens, top_value)), p) for p in drawn)
    clipped = tuple(point for point in placed if point[2].tokens > top_value)
    mark_lines: list[tuple[float, str, str]] = []
    if usable:
        mark_lines.append((y(usable), f"usable {usable:,}", "usable"))
        for name, css in (
            ("soft_mark", "soft"),
            ("compact_mark", "compact"),
            ("hard_mark", "hard"),
        ):
            fraction = marks.get(name)
            if fraction:
                mark_lines.append((y(usable * fraction), f"{css} {fraction:.0%}", css))
    ticks = tuple((y(top_value * i / 4), f"{int(top_value * i / 4):,}") for i in range(5))
    x_labels = tuple((x(r), str(r)) for r in _round_labels(first, last)) if rounds else ()
    events = _events(cards, x)
    single = ""
    if len(points) == 1:
        (only,) = points
        share = _share(only, usable)
        single = f"round {only.round}: {only.tokens:,} tokens" + (
            f", {share:.0%} of usable" if share is not None else ""
        )
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        points=placed,
        polyline=" ".join(f"{px},{py}" for px, py, _ in placed) if len(placed) > 1 else "",
        marks=_spread(mark_lines),
        clipped=clipped,
        events=events,
        milestones=tuple((x(m.round), m.name) for m in milestones),
        ticks=ticks,
        x_labels=x_labels,
        plot_left=_LEFT,
        plot_right=WIDTH - _RIGHT,
        plot_top=_TOP,
        plot_bottom=HEIGHT - _BOTTOM,
        overs=_overs(placed, cards, stops, usable, marks.get("hard_mark") or 1.0),
        per_point=per_point,
        single=single,
        dense_events=len(events) > _SPARSE_EVENTS,
        point_radius=5 if len(points) == 1 else 3 if len(drawn) <= _SPARSE_POINTS else 1.8,
    )


def _round_labels(first: int, last: int) -> list[int]:
    """The rounds the axis names: the first, then multiples of a round step (1, 2 or 5 times
    a power of ten) that gives at most about ten labels."""
    wanted = max(1, (last - first) / 10)
    power = 10 ** math.floor(math.log10(wanted))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= wanted)
    following = range((first // step + 1) * step, last + 1, step)
    # the first round's label, unless the next one would print on it
    return [first, *(r for r in following if r - first >= step / 2)]


def _thin(points: Sequence[ChartPoint]) -> tuple[Sequence[ChartPoint], int]:
    """At most ``MAX_POINTS`` points: the highest of each run of rounds, and the run's length."""
    if len(points) <= MAX_POINTS:
        return points, 1
    size = math.ceil(len(points) / MAX_POINTS)
    runs = (points[i : i + size] for i in range(0, len(points), size))
    return [max(run, key=lambda p: p.tokens) for run in runs], size


def _share(point: ChartPoint, usable: int | None) -> float | None:
    budget = point.usable or usable
    return point.tokens / budget if budget else None


def _events(
    cards: Sequence[CompactionCard], x: Callable[[float], float]
) -> tuple[tuple[float, str, str], ...]:
    """One marker per compaction, or per group of compactions closer than ``_EVENT_GAP``."""
    groups: list[tuple[float, list[CompactionCard]]] = []
    for card in cards:
        at = x(card.round)
        if groups and abs(at - groups[-1][0]) < _EVENT_GAP:
            groups[-1][1].append(card)
        else:
            groups.append((at, [card]))
    events: list[tuple[float, str, str]] = []
    for at, group in groups:
        full = [c for c in group if c.kind != "micro"]
        names = ", ".join(
            f"{'micro' if c.kind == 'micro' else 'compaction'} #{c.number}" for c in group[:6]
        )
        more = f" and {len(group) - 6} more" if len(group) > 6 else ""
        events.append((at, names + more, "full" if full else "micro"))
    return tuple(events)


def _overs(
    placed: Sequence[tuple[float, float, ChartPoint]],
    cards: Sequence[CompactionCard],
    stops: Sequence[tuple[int, str]],
    usable: int | None,
    hard: float,
) -> tuple[Over, ...]:
    """Each point above the hard mark of its usable budget, with what followed it."""
    card_seqs = [c.seq for c in cards]
    stop_seqs = [seq for seq, _ in stops]
    found: list[Over] = []
    for px, py, point in placed:
        share = _share(point, usable)
        if share is None or share <= hard:
            continue
        said = (
            f"round {point.round}: {point.tokens:,} tokens in use"
            f"{' (estimated)' if point.estimated else ''}, {share:.0%} of usable "
            f"{point.usable or usable:,}, above the hard mark {hard:.0%}."
        )
        at = bisect_right(card_seqs, point.seq)
        card = cards[at] if at < len(cards) else None
        at = bisect_right(stop_seqs, point.seq)
        stop = stops[at] if at < len(stops) else None
        if card is not None and (stop is None or card.seq < stop[0]):
            then, label = _followed_by(card), f"\u2192 #{card.number}"
        elif stop is not None:
            card, then, label = (
                None,
                f"Then the turn stopped (record #{stop[0]}): {stop[1]}",
                "stopped",
            )
        else:
            then, label = "No compaction has followed yet.", ""
        right = px > WIDTH - _RIGHT - _LABEL_ROOM
        found.append(
            Over(
                x=px,
                y=py,
                point=point,
                share=share,
                card=card,
                note=f"{said} {then}",
                label=label,
                label_x=px - 9 if right else px + 9,
                anchor="end" if right else "start",
            )
        )
    if len(found) > _LABELLED_OVERS:
        found = [dataclasses.replace(over, label="") for over in found]
    return tuple(found)


def _followed_by(card: CompactionCard) -> str:
    """What a compaction's card says of it, in one sentence: the figures its record holds."""
    name = f"{'Microcompaction' if card.kind == 'micro' else 'Compaction'} #{card.number}"
    where = f" (record #{card.seq}, round {card.round})"
    applied = ""
    if card.in_use is not None:
        applied = f" applied at {card.in_use:,} tokens"
        if card.applied_at is not None:
            applied += f", {card.applied_at:.0%} of usable"
    freed = ""
    if card.freed is not None and card.tokens_before is not None:
        freed = f"; freed {card.freed:,} ({card.tokens_before:,} \u2192 {card.tokens_after:,})"
    return f"Then {name}{where}{applied}{freed}."


def _scale(tokens: Sequence[int], usable: int | None) -> float:
    """The top of the vertical axis: room for the usable line and the points, except points
    more than ``_OUTLIER`` times what the others (and the usable line) need."""
    if not tokens:
        return max(usable or 0, 1) * 1.05
    ordered = sorted(tokens)
    # the 90th percentile stands for "the bulk": one spike in ten rounds does not set it
    bulk = ordered[(len(ordered) - 1) * 9 // 10]
    need = max(usable or 0, bulk, 1)
    return min(max(ordered[-1], need), _OUTLIER * need) * 1.05


def _spread(lines: Sequence[tuple[float, str, str]]) -> tuple[tuple[float, str, str, float], ...]:
    """Each mark line with the y of its label: the line's own, moved up as little as needed
    so that no two labels are closer than ``_LABEL_GAP`` (marks at 85% and 95% of a small
    chart would otherwise print on each other)."""
    ordered = sorted(lines, key=lambda line: -line[0])  # from the bottom of the chart up
    heights: list[float] = []
    floor = float("inf")
    for y, _, _ in ordered:
        floor = min(y + 3.5, floor - _LABEL_GAP)  # +3.5: the text's middle on its line
        heights.append(floor)
    # labels pushed above the top edge (marks crowded under it) come down again, in order
    ceiling = _LABEL_TOP - _LABEL_GAP
    for index in reversed(range(len(heights))):
        ceiling = heights[index] = max(heights[index], ceiling + _LABEL_GAP)
    return tuple(
        (y, label, css, round(at, 1)) for (y, label, css), at in zip(ordered, heights, strict=True)
    )
