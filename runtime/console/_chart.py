"""The tokens-in-use chart as plain numbers for an SVG template: drawn on the server, so the
page needs no chart library and works offline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._views import ChartPoint, CompactionCard

__all__ = ["Chart", "chart_geometry"]

WIDTH, HEIGHT = 900, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 16, 14, 30


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    """Coordinates for ``session.html``'s SVG; empty ``points`` when nothing was committed."""

    width: int
    height: int
    points: tuple[tuple[float, float, ChartPoint], ...]
    polyline: str
    #: (y, label, css class) of each watermark line
    marks: tuple[tuple[float, str, str], ...]
    #: (x, label, css class) of each compaction and microcompaction
    events: tuple[tuple[float, str, str], ...]
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
) -> Chart:
    """Place ``points`` (tokens per round), the watermarks of ``usable`` and the compactions.
    Raises nothing."""
    top_value = max([p.tokens for p in points] + [usable or 0, 1]) * 1.05
    rounds = [p.round for p in points] + [c.round for c in cards]
    first, last = (min(rounds), max(rounds)) if rounds else (0, 1)
    span = max(1, last - first)
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM

    def x(round_: float) -> float:
        return round(_LEFT + (round_ - first) / span * plot_w, 1)

    def y(tokens: float) -> float:
        return round(_TOP + plot_h - tokens / top_value * plot_h, 1)

    placed = tuple((x(p.round), y(p.tokens), p) for p in points)
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
        marks=tuple(mark_lines),
        events=events,
        ticks=ticks,
        x_labels=x_labels,
        plot_left=_LEFT,
        plot_right=WIDTH - _RIGHT,
        plot_top=_TOP,
        plot_bottom=HEIGHT - _BOTTOM,
    )
