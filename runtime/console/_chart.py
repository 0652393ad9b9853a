"""The tokens-in-use chart as plain numbers for an SVG template: drawn on the server, so the
page needs no chart library and works offline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._views import ChartPoint, CompactionCard, Milestone

__all__ = ["Chart", "chart_geometry"]

WIDTH, HEIGHT = 900, 260
#: the right margin holds the watermark labels, beside their lines rather than on them
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 100, 14, 30
#: a point more than this many times the scale the rest of the chart needs is off scale
_OUTLIER = 1.5
#: the least vertical distance between two watermark labels, in SVG units
_LABEL_GAP = 15.0


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
    #: (x, label, css class) of each compaction and microcompaction
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


def chart_geometry(
    points: Sequence[ChartPoint],
    cards: Sequence[CompactionCard],
    marks: dict[str, float],
    usable: int | None,
    milestones: Sequence[Milestone] = (),
) -> Chart:
    """Place ``points`` (tokens per round), the watermarks of ``usable`` and the compactions.

    The scale is what the watermarks and the bulk of the points need; a point far above it
    (a spike, such as a round that read a huge file) is clipped to the top edge with a
    marker instead of squashing every other point and mark into the bottom. Raises nothing.
    """
    top_value = _scale([p.tokens for p in points], usable)
    rounds = [p.round for p in points] + [c.round for c in cards] + [m.round for m in milestones]
    first, last = (min(rounds), max(rounds)) if rounds else (0, 1)
    span = max(1, last - first)
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM

    def x(round_: float) -> float:
        return round(_LEFT + (round_ - first) / span * plot_w, 1)

    def y(tokens: float) -> float:
        return round(_TOP + plot_h - tokens / top_value * plot_h, 1)

    placed = tuple((x(p.round), y(min(p.tokens, top_value)), p) for p in points)
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
    events = tuple(
        (
            x(c.round),
            f"{'micro' if c.kind == 'micro' else 'compaction'} #{c.number}",
            "micro" if c.kind == "micro" else "full",
        )
        for c in cards
    )
    ticks = tuple((y(top_value * i / 4), f"{int(top_value * i / 4):,}") for i in range(5))
    step = max(1, span // 10)
    x_labels = tuple((x(r), str(r)) for r in range(first, last + 1, step))
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        points=placed,
        polyline=" ".join(f"{px},{py}" for px, py, _ in placed),
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
    )


def _scale(tokens: Sequence[int], usable: int | None) -> float:
    """The top of the vertical axis: room for the usable line and the points, except points
    more than ``_OUTLIER`` times what the others (and the usable line) need."""
    if not tokens:
        return max(usable or 0, 1) * 1.05
    ordered = sorted(tokens)
    # the 90th percentile stands for "the bulk": one spike in ten rounds does not set it
    bulk = ordered[(len(ordered) - 1) * 9 // 10]
    need = max(usable or 0, bulk, 1)
    highest = ordered[-1]
    return (highest if highest <= _OUTLIER * need else _OUTLIER * need) * 1.05


def _spread(lines: Sequence[tuple[float, str, str]]) -> tuple[tuple[float, str, str, float], ...]:
    """Each mark line with the y of its label: the line's own, moved up as little as needed
    so that no two labels are closer than ``_LABEL_GAP`` (marks at 85% and 95% of a small
    chart would otherwise print on each other)."""
    ordered = sorted(lines, key=lambda line: -line[0])  # from the bottom of the chart up
    placed: list[tuple[float, str, str, float]] = []
    floor = float("inf")
    for y, label, css in ordered:
        at = min(y + 3.5, floor - _LABEL_GAP)  # +3.5: the text's middle on its line
        placed.append((y, label, css, round(at, 1)))
        floor = at
    return tuple(placed)
