"""The growth forecast: will a plan asked for a round from now land before the hard mark?

A full compaction takes a model call, and rounds go on while it is made. If it is asked for
only at the compaction mark, a session whose rounds grow fast reaches the hard mark first and
must wait. The forecast remembers what recent rounds added to the request, what stubs could not
free, how often rounds commit and how long plans took, and replays every stretch of that growth
(``rounds_to_hard_mark``) against the plan's latency. Deterministic: the caller passes the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ._watermarks import Watermarks, rounds_to_hard_mark

__all__ = ["Forecast"]

_STEPS = 8
_COMMITS = 6
_FLOORS = 6
_PLANS = 5


def _kept(values: tuple[float, ...], value: float, n: int) -> tuple[float, ...]:
    return (*values, value)[-n:]


@dataclass(frozen=True, slots=True)
class Forecast:
    """Recent growth of one session's requests, and how long its plans take (a value: each
    observation makes a new one)."""

    #: tokens of the last request the forecast saw (what the next round's growth is measured on)
    sent: int | None = None
    steps: tuple[int, ...] = ()
    commits: tuple[float, ...] = ()
    #: tokens left after recent rounds if every old output were stubbed
    floors: tuple[int, ...] = ()
    plan_seconds: tuple[float, ...] = ()

    def observe(self, tokens: int | None, floor: int, now: float) -> Forecast:
        """A round committed with ``tokens`` in use (``floor`` of them not freeable by stubs)."""
        if tokens is None:
            return self
        steps = self.steps
        if self.sent is not None:
            steps = (*steps, max(0, tokens - self.sent))[-_STEPS:]
        return Forecast(
            sent=tokens,
            steps=steps,
            commits=_kept(self.commits, now, _COMMITS),
            floors=(*self.floors, floor)[-_FLOORS:],
            plan_seconds=self.plan_seconds,
        )

    def reset_to(self, tokens: int | None) -> Forecast:
        """History was compacted or stubbed: growth is measured again from ``tokens``."""
        return replace(self, sent=tokens, floors=self.floors[-1:])

    def sending(self, tokens: int | None) -> Forecast:
        """The next request is measured from ``tokens`` (a boundary that is not a round)."""
        return replace(self, sent=tokens)

    def plan_took(self, seconds: float) -> Forecast:
        """A plan came back ``seconds`` after it was asked for."""
        return replace(self, plan_seconds=_kept(self.plan_seconds, seconds, _PLANS))

    def plan_rounds(self) -> int:
        """Rounds a plan asked for now takes to come back: the slowest recent plan over the
        recent time between rounds; 1 before a plan and two rounds were seen."""
        latency = max(self.plan_seconds, default=None)
        if latency is None or len(self.commits) < 2:
            return 1
        cadence = (self.commits[-1] - self.commits[0]) / (len(self.commits) - 1)
        return max(1, math.ceil(latency / max(cadence, 1e-6)))

    def floor_per_round(self) -> float | None:
        """Tokens a recent round added that stubs could not free; None before two rounds."""
        if len(self.floors) < 2:
            return None
        return max(0.0, (self.floors[-1] - self.floors[0]) / (len(self.floors) - 1))

    def lands_late(
        self, tokens: int, *, usable: int, marks: Watermarks, micro_min_free: float, armed: bool
    ) -> str | None:
        """Why a plan must be asked for now: if asked a round later, rounds growing as any
        stretch of the recent ones did (with the stubs microcompaction would make on the way)
        would reach the hard mark before it is back; None when it can wait. Raises nothing."""
        step = max(self.steps, default=0)
        if step <= 0:
            return None
        rounds = self.plan_rounds()
        floor_step = self.floor_per_round()
        floor = self.floors[-1] if self.floors else tokens
        recent = list(self.steps)
        hard_in: int | None = None
        for start in range(len(recent)):
            found = rounds_to_hard_mark(
                tokens=tokens,
                floor=min(floor, tokens),
                steps=[recent[(start + k) % len(recent)] for k in range(rounds + 1)],
                floor_step=step if floor_step is None else min(floor_step, step),
                usable=usable,
                marks=marks,
                micro_min_free=micro_min_free,
                armed=armed,
            )
            if found is not None and (hard_in is None or found < hard_in):
                hard_in = found
        if hard_in is None:
            return None
        return (
            f"planned early to land before the hard mark: rounds growing as the recent ones "
            f"did (up to +{step} tokens a round) reach it in {hard_in} round(s), a plan "
            f"takes ~{rounds}"
        )
