"""The runtime's limits, declared once: what a ``Runtime`` shares between its sessions.

Each limit is a field of ``RuntimeLimits`` declared with ``limit_field``: its type, default,
bounds, what None means and its help. ``Runtime``, ``Worker``, ``stowage worker``'s flags and
``stowage load`` all read that declaration (``limit_infos``; the flags are made by
``add_limit_options``), so no two of them can disagree on a name, a default or a bound again.
A bad value is a ``ConfigError`` naming the limit and the range it must be in.

``idle_timeout`` is ``>= 0``: 0 hibernates a session as soon as it has nothing to do (what a
worker that must hand its leases back at once wants); None never hibernates it for idleness.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError

__all__ = ["LimitInfo", "RuntimeLimits", "check_limits", "limit_field", "limit_infos"]

_BOUND_WORDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def limit_field(
    default: float | None,
    help: str,
    *,
    none: str | None = None,
    unit: str = "",
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> Any:
    """The declaration of one limit, as the default of a dataclass field: ``help``; ``none``,
    what None means (None: it is not allowed); ``unit`` of the value ("seconds"); the bounds
    every value other than None keeps (``gt``, ``ge``, ``le``)."""
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge), ("le", le)) if v is not None}
    return dataclasses.field(
        default=default, metadata={"help": help, "none": none, "unit": unit, "bounds": bounds}
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitInfo:
    """One declared limit, as the checks, the flags and the docs read it."""

    name: str
    #: ``int`` or ``float``
    kind: type
    default: float | None
    help: str
    #: what None means, or None when None is not a value of it
    none: str | None
    unit: str
    bounds: Mapping[str, float]

    @property
    def flag(self) -> str:
        """Its command-line flag: ``--idle-timeout`` for ``idle_timeout``."""
        return "--" + self.name.replace("_", "-")

    def allowed(self) -> str:
        """The range in words: ``>= 0 (seconds; None: never)``."""
        rule = " and ".join(f"{_BOUND_WORDS[k]} {v:g}" for k, v in self.bounds.items())
        notes = [self.unit or ("a whole number" if self.kind is int else "a number")]
        if self.none is not None:
            notes.append(f"None: {self.none}")
        return f"{rule} ({'; '.join(notes)})".strip()

    def check(self, value: object) -> None:
        """Raises ``ConfigError`` naming the limit and its range when ``value`` is not in it."""
        if value is None and self.none is not None:
            return
        if not self.fits(value):
            raise ConfigError(f"{self.name} must be {self.allowed()}, got {value!r}")

    def fits(self, value: object) -> bool:
        """Whether ``value`` (not None) is of its kind and within its bounds."""
        kinds = (int,) if self.kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or math.isnan(value):
            return False
        return all(
            {"gt": value > v, "ge": value >= v, "le": value <= v}[k] for k, v in self.bounds.items()
        )


def limit_infos(declared: type) -> tuple[LimitInfo, ...]:
    """The limits a dataclass of ``limit_field``s declares (``RuntimeLimits``,
    ``WorkerOptions``), in declaration order."""
    infos = _INFOS.get(declared)
    if infos is None:
        infos = _INFOS[declared] = _read_infos(declared)
    return infos


_INFOS: dict[type, tuple[LimitInfo, ...]] = {}


def _read_infos(declared: type) -> tuple[LimitInfo, ...]:
    hints = typing.get_type_hints(declared)
    infos = []
    for field in dataclasses.fields(declared):
        kinds = [k for k in typing.get_args(hints[field.name]) or (hints[field.name],)]
        infos.append(
            LimitInfo(
                name=field.name,
                kind=int if int in kinds else float,
                default=field.default,  # type: ignore[arg-type]
                help=field.metadata["help"],
                none=field.metadata["none"],
                unit=field.metadata["unit"],
                bounds=field.metadata["bounds"],
            )
        )
    return tuple(infos)


def check_limits(values: object) -> None:
    """Raises ``ConfigError`` for the first field of ``values`` out of its declared range."""
    for info in limit_infos(type(values)):
        info.check(getattr(values, info.name))


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeLimits:
    """The limits a runtime shares between all its sessions (httpx's ``Limits``, for agents).

    Pass it whole (``Runtime(settings, limits=RuntimeLimits(max_model_calls=20))``); the
    fields are declared once here, with their bounds and help. Raises ``ConfigError`` naming
    a limit out of its range.
    """

    max_model_calls: int | None = limit_field(
        100,
        "model calls in flight to the endpoint, rounds and summaries alike (a waiting summary "
        "goes before waiting rounds)",
        none="no limit",
        ge=1,
    )
    max_compactions: int | None = limit_field(
        8,
        "compactions in flight (sessions crossing the watermark together queue for them)",
        none="no limit",
        ge=1,
    )
    max_tool_calls: int | None = limit_field(256, "tool calls in flight", none="no limit", ge=1)
    max_running_sessions: int | None = limit_field(
        None,
        "sessions whose turns run at once; the others wait parked, first come first served",
        none="no limit",
        ge=1,
    )
    idle_timeout: float | None = limit_field(
        None,
        "seconds a session with nothing to do stays live before it hibernates (0: at once)",
        none="never",
        unit="seconds",
        ge=0,
    )

    def __post_init__(self) -> None:
        check_limits(self)

    def with_(self, **changes: Any) -> RuntimeLimits:
        """A copy with ``changes`` applied and checked. Raises ``TypeError`` for a name that
        is not a limit, ``ConfigError`` for a value out of range."""
        unknown = sorted(set(changes) - {info.name for info in limit_infos(RuntimeLimits)})
        if unknown:
            names = ", ".join(info.name for info in limit_infos(RuntimeLimits))
            raise TypeError(f"not a runtime limit: {', '.join(unknown)} (the limits: {names})")
        return dataclasses.replace(self, **changes)
